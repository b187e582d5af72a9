"""GPUs: presence and count, architecture coverage, real kernel launches."""

from __future__ import annotations

import glob
import os
from typing import Any, Callable, Dict, List, Tuple

from ..context import Context
from ..environment import gpus
from ..gpumode import Mode, decide
from ..judge import PASS, arch_support, judge_at_most, worst
from ..libs import torch_build
from ..registry import check
from ..results import Result, bounded, failed, outcome, passed, warned
from ._common import fresh_seed, gpu_label, precision, randn, rel_err

KERNEL_TOLERANCE = 1e-5


def no_gpu_reason(ctx: Context) -> str:
    """The most likely reason torch sees no GPU, as a hint to the user."""
    if not ctx.try_torch():
        return ctx.config.gpu_unavailable or f"torch is not importable ({ctx.torch_error})"
    torch = ctx.torch
    if not torch.version.cuda:
        return f"torch {torch.__version__} is a CPU-only build"
    if ctx.config.gpu_unavailable:  # the host could not attach GPUs (no NVIDIA runtime)
        return ctx.config.gpu_unavailable
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "none", "void"):
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
    if not glob.glob("/dev/nvidia[0-9]*"):
        return "no /dev/nvidia* device nodes: started without GPUs (docker --gpus / device_requests)"
    try:
        torch.cuda.init()
    except Exception as exc:
        return f"CUDA initialisation failed: {exc}"
    return "torch.cuda.is_available() is False"


def run_mode(ctx: Context) -> Mode:
    """GPU or CPU mode for this run, judged against what was asked (once per run)."""
    if "mode" not in ctx.cache:
        cfg = ctx.config
        visible = ctx.gpu_count
        cuda_build = bool(torch_build().cuda)
        why = "" if visible else no_gpu_reason(ctx)
        ctx.cache["mode"] = decide(cfg.gpus, visible, cuda_build, cfg.require_gpu, cfg.allow_cpu, why)
    mode: Mode = ctx.cache["mode"]
    return mode


@check("gpu.devices", "GPUs visible as asked: count, name, capability, memory", unit="GPUs",
       needs="nothing")
def devices(ctx: Context) -> Result:
    mode = run_mode(ctx)
    if mode.status != PASS or not mode.gpus:
        return outcome(mode.status, mode.reason, mode.gpus)
    return _judge_devices(gpus(ctx), ctx.config.expect_gpus)


def _judge_devices(found: List[Dict[str, Any]], expected: Any) -> Result:
    desc = "; ".join(f"{g['index']}: {g['name']} sm {g['capability']} {g['memory_gib']} GiB"
                     for g in found)
    data = {"gpus": found}
    if expected is not None and expected != len(found):
        return failed(f"{len(found)} GPUs visible, {expected} requested: {desc}", len(found),
                      data=data)
    if len({g["name"] for g in found}) > 1:
        return warned(f"mixed GPU models: {desc}", len(found), data=data)
    return passed(desc, len(found), data=data)


@check("gpu.arch", "GPU architecture in torch's compiled arch list", needs="gpu")
def arch(ctx: Context) -> Result:
    torch = ctx.torch
    arch_list = list(torch.cuda.get_arch_list())
    verdicts = [arch_support(torch.cuda.get_device_capability(i), arch_list)
                for i in range(ctx.gpu_count)]
    status = worst(s for s, _ in verdicts)
    detail = next(d for s, d in verdicts if s == status)
    return outcome(status, detail, f"sm_{''.join(map(str, torch.cuda.get_device_capability(0)))}",
                   data={"arch_list": arch_list})


def _per_device(ctx: Context, kernel: Callable[[Any, Any, int], Tuple[Any, Any]],
                what: str) -> Result:
    """Run `kernel(torch, device, seed) -> (out, ref)` on every GPU; worst error wins."""
    torch, seed = ctx.torch, fresh_seed()
    errors = {}
    for device in ctx.devices():
        out, ref = kernel(torch, device, seed)
        errors[gpu_label(torch, device)] = rel_err(torch, out, ref)
    label, err = max(errors.items(), key=lambda kv: kv[1])
    status = judge_at_most(err, KERNEL_TOLERANCE)
    return bounded(err, KERNEL_TOLERANCE, status, f"{what} on {label} vs float64 CPU",
                   data={"errors": errors, "seed": seed})


def _elementwise(torch: Any, device: Any, seed: int) -> Tuple[Any, Any]:
    x = randn(torch, (1 << 20,), device, seed)
    ref = x.cpu().double()
    return torch.sin(x) * x + 0.5 * x * x, torch.sin(ref) * ref + 0.5 * ref * ref


def _cublas(torch: Any, device: Any, seed: int) -> Tuple[Any, Any]:
    a, b = randn(torch, (512, 512), device, seed), randn(torch, (512, 512), device, seed + 1)
    with precision(torch, tf32=False):
        out = a @ b
    return out, a.cpu().double() @ b.cpu().double()


def _cudnn(torch: Any, device: Any, seed: int) -> Tuple[Any, Any]:
    if not torch.backends.cudnn.is_available():
        raise RuntimeError("torch.backends.cudnn.is_available() is False: cuDNN missing")
    x, w = randn(torch, (8, 16, 32, 32), device, seed), randn(torch, (32, 16, 3, 3), device, seed + 1)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False,
                                    allow_tf32=False):
        out = torch.nn.functional.conv2d(x, w, padding=1)
    ref = torch.nn.functional.conv2d(x.cpu().double(), w.cpu().double(), padding=1)
    return out, ref


@check("gpu.kernel.elementwise", "elementwise kernels launch and compute", unit="rel. error",
       needs="gpu")
def elementwise(ctx: Context) -> Result:
    return _per_device(ctx, _elementwise, "sin(x)*x + x^2/2")


@check("gpu.kernel.cublas", "cuBLAS matmul launches and computes", unit="rel. error",
       needs="gpu")
def cublas(ctx: Context) -> Result:
    return _per_device(ctx, _cublas, "fp32 512^3 matmul")


@check("gpu.kernel.cudnn", "cuDNN convolution launches and computes", unit="rel. error",
       needs="gpu")
def cudnn(ctx: Context) -> Result:
    return _per_device(ctx, _cudnn, "fp32 conv2d 3x3")

