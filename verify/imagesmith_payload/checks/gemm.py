"""GEMM throughput per GPU (bf16, fp16, tf32, fp32), CUDA events, median of repeats."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

from ..context import Context
from ..formulas import gemm_tflops
from ..judge import MATMUL_TOLERANCE, WARN, judge_throughput
from ..registry import check
from ..results import Result, failed, measured
from ..stats import median, spread_percent
from ..timing import concurrent_event_times_ms
from ._common import fresh_seed, precision, randn, rel_err

# kind -> (n for n x n x n, timed repeats); sizes as in the reference loop.
SHAPES = {"bf16": (8192, 30), "fp16": (8192, 30), "tf32": (10000, 12), "fp32": (10000, 6)}
BUFFER_SETS = 2  # rotate inputs between repeats
SPREAD_WARN_PERCENT = 10.0
CHECK_ROWS = 64


def dtype_of(torch: Any, kind: str) -> Any:
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(kind, torch.float32)


class GemmBench:
    """Per device: fn(i) multiplies input set i % BUFFER_SETS into a fixed output."""

    def __init__(self, torch: Any, kind: str, n: int, seed: int) -> None:
        self.torch, self.kind, self.n, self.seed = torch, kind, n, seed
        self.buffers: Dict[int, Tuple[List[Tuple[Any, Any]], Any]] = {}

    def __call__(self, device: Any) -> Callable[[int], Any]:
        torch, n, dtype = self.torch, self.n, dtype_of(self.torch, self.kind)
        sets = [(randn(torch, (n, n), device, self.seed + 2 * s, dtype),
                 randn(torch, (n, n), device, self.seed + 2 * s + 1, dtype))
                for s in range(BUFFER_SETS)]
        out = torch.empty((n, n), device=device, dtype=dtype)
        self.buffers[device.index] = (sets, out)
        return lambda i: torch.matmul(*sets[i % BUFFER_SETS], out=out)


def check_rows(torch: Any, sets: List[Tuple[Any, Any]], out: Any, last: int) -> float:
    """The last product's first rows against float64 of the same inputs."""
    a, b = sets[last % BUFFER_SETS]
    ref = a[:CHECK_ROWS].double() @ b.double()
    return rel_err(torch, out[:CHECK_ROWS], ref)


def gemm_check(ctx: Context, kind: str) -> Result:
    torch, seed = ctx.torch, fresh_seed()
    n, repeats = SHAPES[kind]
    bench = GemmBench(torch, kind, n, seed)
    with precision(torch, tf32=(kind == "tf32")):
        times = concurrent_event_times_ms(torch, ctx.devices(), bench, 3, repeats)
        errors = {i: check_rows(torch, *bench.buffers[i], 3 + repeats - 1) for i in times}
    per_gpu = {i: gemm_tflops(n, n, n, median(t) / 1e3) for i, t in times.items()}
    del bench
    ctx.release_memory()
    return judge_gemm(ctx, kind, n, per_gpu, errors)


def judge_gemm(ctx: Context, kind: str, n: int, per_gpu: Dict[int, float],
               errors: Dict[int, float]) -> Result:
    limit = 5 * MATMUL_TOLERANCE[kind]
    spread = round(spread_percent(list(per_gpu.values())), 2)
    data = {"per_gpu_tflops": {str(i): round(v, 1) for i, v in per_gpu.items()},
            "rel_error": {str(i): e for i, e in errors.items()}, "shape": f"{n}^3",
            "spread_percent": spread}
    bad = {i: e for i, e in errors.items() if not e <= limit}
    if bad:
        return failed(f"{kind} {n}^3 products wrong on GPU(s) {sorted(bad)}: rel. error "
                      f"{max(bad.values()):.3g} > {limit:.3g}", data=data)
    slowest = min(per_gpu, key=lambda i: per_gpu[i])
    verdict = judge_throughput(per_gpu[slowest], ctx.threshold(f"gemm.{kind}"),
                               f"{kind} {n}^3 on GPU {slowest}")
    result = measured(per_gpu[slowest], verdict, data=data)
    if spread > SPREAD_WARN_PERCENT and result["status"] == "pass":
        result["status"] = WARN
        result["detail"] += f"; GPUs differ by {spread}%"
    return result


@check("gemm.bf16", "bf16 GEMM 8192^3 throughput per GPU", tier="standard", unit="TFLOP/s",
       needs="gpu", throughput=True)
def bf16(ctx: Context) -> Result:
    return gemm_check(ctx, "bf16")


@check("gemm.fp16", "fp16 GEMM 8192^3 throughput per GPU", tier="standard", unit="TFLOP/s",
       needs="gpu", throughput=True)
def fp16(ctx: Context) -> Result:
    return gemm_check(ctx, "fp16")


@check("gemm.tf32", "tf32 GEMM 10000^3 throughput per GPU", tier="standard", unit="TFLOP/s",
       needs="gpu", throughput=True)
def tf32(ctx: Context) -> Result:
    return gemm_check(ctx, "tf32")


@check("gemm.fp32", "fp32 GEMM 10000^3 throughput per GPU", tier="standard", unit="TFLOP/s",
       needs="gpu", throughput=True)
def fp32(ctx: Context) -> Result:
    return gemm_check(ctx, "fp32")
