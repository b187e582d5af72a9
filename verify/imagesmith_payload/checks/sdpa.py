"""Scaled dot-product attention: each backend alone against math; throughput."""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Optional, Tuple

from ..context import Context
from ..formulas import sdpa_tflops
from ..judge import SDPA_TOLERANCE, judge_at_most, judge_throughput
from ..registry import check
from ..results import Result, bounded, failed, measured, skipped, warned
from ..stats import median
from ..timing import event_times_ms
from ._common import fresh_seed, randn, rel_err

SHAPE = (2, 8, 1024, 64)  # batch, heads, sequence, head dim
PERF_SHAPE = (16, 16, 4096, 128)
BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
            "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
_OLD_FLAGS = {"flash": "enable_flash", "efficient": "enable_mem_efficient", "math": "enable_math"}


@contextlib.contextmanager
def only_backend(torch: Any, name: str) -> Iterator[None]:
    """Restrict SDPA to one backend (torch >= 2.3 API, older flags as fallback)."""
    attention = getattr(torch.nn, "attention", None)
    if attention is not None and hasattr(attention, "sdpa_kernel"):
        backend = getattr(attention.SDPBackend, BACKENDS[name], None)
        if backend is None:
            raise NotAvailable(f"this torch has no {BACKENDS[name]} backend")
        with attention.sdpa_kernel([backend]):
            yield
        return
    if name not in _OLD_FLAGS:
        raise NotAvailable(f"this torch has no {name} backend")
    flags = {flag: flag == _OLD_FLAGS[name] for flag in _OLD_FLAGS.values()}
    with torch.backends.cuda.sdp_kernel(**flags):
        yield


class NotAvailable(RuntimeError):
    """The backend does not exist or refuses these inputs on this GPU."""


def attention(torch: Any, backend: str, q: Any, k: Any, v: Any) -> Tuple[Any, Tuple[Any, ...]]:
    """Forward and input gradients under one backend."""
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    try:
        with only_backend(torch, backend):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            out.backward(torch.ones_like(out))
    except RuntimeError as exc:
        if "No available kernel" in str(exc) or "not supported" in str(exc).lower():
            raise NotAvailable(str(exc).splitlines()[0]) from exc
        raise
    return out, (q.grad, k.grad, v.grad)


def backend_errors(torch: Any, device: Any, backend: str, seed: int) -> Dict[str, float]:
    q, k, v = (randn(torch, SHAPE, device, seed + i, torch.bfloat16) for i in range(3))
    out, grads = attention(torch, backend, q, k, v)
    ref, ref_grads = attention(torch, "math", q.double(), k.double(), v.double())
    errors = {"out": rel_err(torch, out, ref)}
    errors.update({f"d{n}": rel_err(torch, g, r) for n, g, r in zip("qkv", grads, ref_grads)})
    return errors


def sdpa_check(ctx: Context, backend: str, required_from: Optional[Tuple[int, int]]) -> Result:
    torch, seed = ctx.torch, fresh_seed()
    cap = torch.cuda.get_device_capability(ctx.device)
    try:
        errors = backend_errors(torch, ctx.device, backend, seed)
    except NotAvailable as exc:
        data = {"available": False}
        if required_from is not None and cap >= required_from:
            return failed(f"{backend} attention not available on sm_{cap[0]}{cap[1]}: {exc}",
                          data=data)
        return (skipped if required_from is not None else warned)(
            f"{backend} attention not available on sm_{cap[0]}{cap[1]}: {exc}")
    worst_key, err = max(errors.items(), key=lambda kv: kv[1])
    limit = SDPA_TOLERANCE["bf16"]
    return bounded(err, limit, judge_at_most(err, limit),
                   f"{backend} bf16 causal vs math float64 (worst: {worst_key})",
                   data={"available": True, "errors": errors, "seed": seed})


@check("sdpa.flash", "SDPA flash backend alone matches math", unit="rel. error",
       needs="gpu")
def flash(ctx: Context) -> Result:
    return sdpa_check(ctx, "flash", required_from=(8, 0))


@check("sdpa.efficient", "SDPA memory-efficient backend alone matches math",
       unit="rel. error", needs="gpu")
def efficient(ctx: Context) -> Result:
    return sdpa_check(ctx, "efficient", required_from=(5, 0))


@check("sdpa.cudnn", "SDPA cuDNN backend alone matches math (availability varies)",
       unit="rel. error", needs="gpu")
def cudnn(ctx: Context) -> Result:
    return sdpa_check(ctx, "cudnn", required_from=None)


# ------------------------------------------------------------------ throughput
def time_sdpa(torch: Any, device: Any, backend: Optional[str], seed: int) -> float:
    """Median TFLOP/s of causal bf16 forward at PERF_SHAPE."""
    q, k, v = (randn(torch, PERF_SHAPE, device, seed + i, torch.bfloat16) for i in range(3))
    ctx_mgr = only_backend(torch, backend) if backend else contextlib.nullcontext()
    with ctx_mgr, torch.no_grad():
        times = event_times_ms(torch, device, lambda i: torch.nn.functional.
                               scaled_dot_product_attention(q, k, v, is_causal=True), 3, 10)
    return sdpa_tflops(*PERF_SHAPE, median(times) / 1e3, causal=True)


@check("sdpa.perf", "causal SDPA bf16 forward throughput", tier="standard", unit="TFLOP/s",
       needs="gpu", throughput=True)
def perf(ctx: Context) -> Result:
    torch, seed = ctx.torch, fresh_seed()
    value = time_sdpa(torch, ctx.device, None, seed)
    per_backend: Dict[str, Any] = {}
    for name in ("flash", "cudnn", "efficient"):
        try:
            per_backend[name] = round(time_sdpa(torch, ctx.device, name, seed), 1)
        except (NotAvailable, RuntimeError) as exc:
            per_backend[name] = f"unavailable: {str(exc).splitlines()[0][:80]}"
    verdict = judge_throughput(value, ctx.threshold("sdpa.perf"), "causal SDPA bf16")
    shape = "x".join(map(str, PERF_SHAPE))
    return measured(value, verdict, data={"shape_bhsd": shape, "per_backend": per_backend})
