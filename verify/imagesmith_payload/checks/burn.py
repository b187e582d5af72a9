"""gpu-burn style: identical GEMMs for a while, every result equal to the first."""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional

from ..context import Context
from ..formulas import gemm_tflops
from ..judge import SERIOUS_THROTTLE, WARN, judge_throughput
from ..nvml import Sampler, open_nvml
from ..registry import check
from ..results import Result, failed, measured
from ..stats import sensor_summary
from ._common import fresh_seed, randn

N = 8192
SYNC_EVERY = 10


class Burner:
    """One GPU: a fixed product, recomputed and compared with the first result on device.

    Each product is timed with CUDA events, so the rate is the GEMMs' own
    (sustained clocks, power capping), not the comparison's.
    """

    def __init__(self, torch: Any, device: Any, seed: int) -> None:
        self.torch, self.device = torch, device
        self.stream = torch.cuda.current_stream(device)
        self.a = randn(torch, (N, N), device, seed, torch.bfloat16)
        self.b = randn(torch, (N, N), device, seed + 1, torch.bfloat16)
        self.ref = torch.matmul(self.a, self.b)
        self.out = torch.empty_like(self.ref)
        self.bad = torch.zeros((), dtype=torch.int64, device=device)
        self.gemm_ms = 0.0
        self._events: List[Any] = []

    def step(self) -> None:
        start = self.torch.cuda.Event(enable_timing=True)
        end = self.torch.cuda.Event(enable_timing=True)
        start.record(self.stream)
        self.torch.matmul(self.a, self.b, out=self.out)
        end.record(self.stream)
        self.bad.add_(self.torch.ne(self.out, self.ref).any())
        self._events.append((start, end))

    def settle(self) -> None:
        """After a synchronize: add up the finished GEMMs' times."""
        self.torch.cuda.synchronize(self.device)
        self.gemm_ms += sum(s.elapsed_time(e) for s, e in self._events)
        self._events.clear()


def burn(torch: Any, burners: List[Burner], seconds: float) -> Dict[str, Any]:
    count, t0 = 0, time.perf_counter()
    while True:
        for burner in burners:
            burner.step()
        count += 1
        if count % SYNC_EVERY == 0:
            for burner in burners:
                burner.settle()
            if time.perf_counter() - t0 >= seconds:
                break
    elapsed = time.perf_counter() - t0
    return {"iterations": count, "seconds": round(elapsed, 2),
            "tflops": {b.device.index: gemm_tflops(N, N, N, b.gemm_ms / 1e3 / count)
                       for b in burners},
            "wall_tflops": {b.device.index: round(gemm_tflops(N, N, N, elapsed / count), 1)
                            for b in burners},
            "mismatched": {b.device.index: int(b.bad.item()) for b in burners}}


def nvml_sampler(torch: Any, count: int) -> Optional[Sampler]:
    nvml = open_nvml()
    if nvml is None:
        return None
    handles = {}
    for i in range(count):
        uuid = getattr(torch.cuda.get_device_properties(i), "uuid", None)
        handles[i] = nvml.handle(i, str(uuid) if uuid is not None else None)
    return Sampler(nvml, handles)


@check("burn.gemm", "sustained bf16 GEMMs equal to the first result; clocks, heat",
       tier="standard", unit="TFLOP/s", needs="gpu",
       timeout_s=lambda ctx: ctx.config.burn_seconds + 120.0, throughput=True)
def burn_gemm(ctx: Context) -> Result:
    torch, seed = ctx.torch, fresh_seed()
    burners = [Burner(torch, d, seed) for d in ctx.devices()]
    if not all(bool(torch.isfinite(b.ref).all()) for b in burners):
        return failed("the first bf16 product is not finite")
    sampler = nvml_sampler(torch, len(burners))
    if sampler is None:
        run = burn(torch, burners, ctx.config.burn_seconds)
        sensors: Dict[str, Any] = {}
    else:
        with sampler:
            run = burn(torch, burners, ctx.config.burn_seconds)
        sensors = {str(i): sensor_summary(s) for i, s in sampler.samples.items()}
    del burners
    ctx.release_memory()
    return judge_burn(ctx, run, sensors)


def judge_burn(ctx: Context, run: Dict[str, Any], sensors: Dict[str, Any]) -> Result:
    data = dict(run, sensors=sensors)
    data["tflops"] = {str(i): round(v, 1) for i, v in run["tflops"].items()}
    bad = {i: n for i, n in run["mismatched"].items() if n}
    if bad:
        return failed(f"results differed from the first on GPU(s) {sorted(bad)} in "
                      f"{sum(bad.values())} of {run['iterations']} iterations: unstable GPU or "
                      "silent data corruption", data=data)
    slowest = min(run["tflops"], key=lambda i: run["tflops"][i])
    verdict = judge_throughput(run["tflops"][slowest], ctx.threshold("burn.gemm"),
                               f"{run['seconds']:.0f} s sustained bf16 {N}^3 on GPU {slowest}")
    result = measured(run["tflops"][slowest], verdict, data=data,
                      extra_detail=f"{run['iterations']} iterations all identical")
    serious = sorted({r for s in sensors.values() for r in s["throttle_reasons"]} & SERIOUS_THROTTLE)
    if serious and result["status"] == "pass":
        result["status"] = WARN
        result["detail"] += f"; clocks slowed by {', '.join(serious)}"
    return result
