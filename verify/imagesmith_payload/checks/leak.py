"""Memory leaks: a fixed-shape training loop must not grow memory.

Bytes in use are sampled every few steps after a warm-up and a line is fitted
(stats.leak_verdict).  On a GPU the device series is torch.cuda.memory_allocated;
on a CPU it is the bytes of live tensors found by the garbage collector.  Host
RSS is sampled in the same loop.  config leak_inject_mib plants a leak of that
many MiB per step (to prove the detector works); the loop stops as soon as a
leak is certain.
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any, Callable, Dict, List

from ..context import Context
from ..registry import check
from ..results import Result, outcome
from ..stats import LEAK_MIN_SAMPLES, LEAK_SLOPE_LIMIT, MIB, leak_verdict

WARMUP_STEPS = 20
MAX_STEPS = 400
MAX_SECONDS = 8.0
# Sample every k steps; scanning the collector for CPU tensors is slow, RSS is cheap.
DEVICE_EVERY = {"cuda": 2, "cpu": 10}
HOST_EVERY = 2
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * PAGE


def live_tensor_bytes(torch: Any) -> int:
    """CPU: bytes of distinct storages of every tensor the collector can see."""
    seen: Dict[int, int] = {}
    tensor = torch.Tensor
    for obj in gc.get_objects():  # type() not isinstance(): no proxies, no lazy attributes
        if issubclass(type(obj), tensor) and obj.device.type == "cpu":
            storage = obj.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def device_meter(torch: Any, device: Any) -> Callable[[], int]:
    if device.type == "cuda":
        return lambda: int(torch.cuda.memory_allocated(device))
    return lambda: live_tensor_bytes(torch)


def make_step(torch: Any, device: Any) -> Callable[[], None]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 128)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 128, device=device), torch.randn(32, 128, device=device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return step


class Series:
    """Samples of one meter every `every` steps."""

    def __init__(self, meter: Callable[[], int], every: int) -> None:
        self.meter, self.every = meter, every
        self.steps: List[int] = []
        self.used: List[int] = []

    def sample(self, step: int) -> bool:
        """Sample if due; True when this series now shows a leak for certain."""
        if step % self.every:
            return False
        self.steps.append(step)
        self.used.append(self.meter())
        return len(self.steps) % 4 == 0 and leak_verdict(self.steps, self.used).leaking

    def judgeable(self) -> bool:
        return len(self.steps) >= LEAK_MIN_SAMPLES


def leak_loop(torch: Any, device: Any, inject_mib: float,
              max_seconds: float = MAX_SECONDS) -> Dict[str, Any]:
    """Run the loop; return both series and when (if) a leak was certain."""
    step = make_step(torch, device)
    dev = Series(device_meter(torch, device), DEVICE_EVERY[device.type])
    host = Series(rss_bytes, HOST_EVERY)
    leaked: List[Any] = []
    t0, caught = time.monotonic(), None
    for i in range(WARMUP_STEPS + MAX_STEPS):
        step()
        if inject_mib:
            leaked.append(torch.full((int(inject_mib * MIB) // 4,), float(i), device=device))
        elapsed = time.monotonic() - t0
        leaking = i >= WARMUP_STEPS and (dev.sample(i) | host.sample(i))
        if leaking and (dev.judgeable() or elapsed > max_seconds / 2):
            caught = elapsed
            break
        if elapsed > max_seconds:
            break
    del leaked
    return {"device": dev, "host": host, "seconds": time.monotonic() - t0,
            "caught_after_s": caught, "device_type": device.type}


def run_once(ctx: Context) -> Dict[str, Any]:
    """leak.device runs the loop and leaves it for leak.host (which re-runs alone)."""
    run = ctx.cache.pop("leak_run", None)
    if run is None:
        run = leak_loop(ctx.torch, ctx.device, ctx.config.leak_inject_mib)
        ctx.release_memory()
    return run


def judge_series(run: Dict[str, Any], key: str, what: str) -> Result:
    series = run[key]
    verdict = leak_verdict(series.steps, series.used)
    data = {"steps": series.steps, "bytes": series.used, "loop_seconds": round(run["seconds"], 2),
            "caught_after_s": run["caught_after_s"], "samples": verdict.samples}
    if verdict.samples < LEAK_MIN_SAMPLES:
        return outcome("warn", f"only {verdict.samples} samples of {what} in "
                       f"{run['seconds']:.1f} s (machine busy?): cannot judge", None,
                       LEAK_SLOPE_LIMIT / MIB, data=data)
    status = "fail" if verdict.leaking else "pass"
    head = "leak: " if verdict.leaking else "no leak: "
    return outcome(status, f"{head}{what} {verdict.describe()}", round(verdict.slope / MIB, 4),
                   LEAK_SLOPE_LIMIT / MIB, data=data)


@check("leak.device", "fixed-shape training loop: allocated memory stays flat",
       tier="standard", unit="MiB/step")
def device_leak(ctx: Context) -> Result:
    run = run_once(ctx)
    ctx.cache["leak_run"] = run
    what = "torch.cuda.memory_allocated" if run["device_type"] == "cuda" else "live CPU tensor bytes"
    return judge_series(run, "device", what)


@check("leak.host", "fixed-shape training loop: host RSS stays flat", tier="standard",
       unit="MiB/step")
def host_leak(ctx: Context) -> Result:
    return judge_series(run_once(ctx), "host", "host RSS")
