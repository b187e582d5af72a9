"""Matmul correctness against float64 in fp32, tf32, fp16 and bf16 (GPU or CPU)."""

from __future__ import annotations

import os
from typing import Any

from ..context import Context
from ..judge import MATMUL_TOLERANCE, judge_at_most
from ..registry import check
from ..results import Result, bounded, skipped
from ._common import fresh_seed, gpu_label, precision, randn, rel_err

SIZE = {"cuda": 1024, "cpu": 512}


def matmul_error(torch: Any, device: Any, kind: str, seed: int) -> float:
    """Relative error of a (n x n) product in `kind` vs float64 of the same rounded inputs."""
    n = SIZE[device.type]
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(kind, torch.float32)
    a = randn(torch, (n, n), device, seed, dtype)
    b = randn(torch, (n, n), device, seed + 1, dtype)
    with precision(torch, tf32=(kind == "tf32")):
        out = a @ b
    return rel_err(torch, out, a.cpu().double() @ b.cpu().double())


def matmul_check(ctx: Context, kind: str) -> Result:
    torch, seed = ctx.torch, fresh_seed()
    devices = ctx.devices()
    if kind == "tf32" and devices[0].type != "cuda":
        return skipped("TF32 is a GPU tensor-core mode; no GPU (CPU mode)")
    errors = {gpu_label(torch, d): matmul_error(torch, d, kind, seed) for d in devices}
    label, err = max(errors.items(), key=lambda kv: kv[1])
    limit = MATMUL_TOLERANCE[kind]
    status = judge_at_most(err, limit)
    what = f"{kind} {SIZE[devices[0].type]}^3 rel. error vs float64 on {label}"
    result = bounded(err, limit, status, what, data={"errors": errors, "seed": seed})
    if status != "pass" and kind == "fp32" and os.environ.get("NVIDIA_TF32_OVERRIDE"):
        result["detail"] += "; NVIDIA_TF32_OVERRIDE is set: cuBLAS may use TF32 for fp32"
    return result


@check("matmul.fp32", "fp32 matmul matches float64", unit="rel. error")
def fp32(ctx: Context) -> Result:
    return matmul_check(ctx, "fp32")


@check("matmul.tf32", "tf32 matmul matches float64 within tf32 tolerance", unit="rel. error")
def tf32(ctx: Context) -> Result:
    return matmul_check(ctx, "tf32")


@check("matmul.fp16", "fp16 matmul matches float64 within fp16 tolerance", unit="rel. error")
def fp16(ctx: Context) -> Result:
    return matmul_check(ctx, "fp16")


@check("matmul.bf16", "bf16 matmul matches float64 within bf16 tolerance", unit="rel. error")
def bf16(ctx: Context) -> Result:
    return matmul_check(ctx, "bf16")
