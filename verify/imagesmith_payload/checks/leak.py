"""Memory leaks: a fixed-shape training loop must not grow memory.

Bytes in use are sampled every few steps after a warm-up and judged by
stats.leak_verdict (a fitted slope with its confidence bounds, against a margin
the allocator cannot explain).  On a GPU the device series is
torch.cuda.memory_allocated; on a CPU it is the bytes of live tensors found by
the garbage collector.  Host RSS is sampled in the same loop.

The loop runs a fixed number of STEPS, never a number of seconds: on a loaded
host it takes longer and judges the same evidence.  It stops early only when a
leak is already certain.  The standard tier runs a long loop (leak.device,
leak.host: catches ~0.05 MiB/step); the quick tier a short probe (leak.probe:
catches ~1 MiB/step in a fraction of a second on a GPU).  Config
leak_inject_mib plants a leak of that many MiB per step (to prove the detector).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional

from ..context import Context
from ..registry import check
from ..results import Result, outcome
from ..stats import DEVICE_LIMITS, HOST_LIMITS, LEAK_MIN_SAMPLES, MIB, LeakLimits, LeakVerdict, leak_verdict

WARMUP_STEPS = 20
CHECK_EVERY_SAMPLES = 4  # re-judge a series every k new samples (early stop)
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True)
class Plan:
    """How long a leak loop runs, in steps, and how often each meter is read."""

    steps: int  # after the warm-up, at most
    device_every: Dict[str, int]  # by device type; scanning the collector for CPU tensors is slow
    host_every: int  # RSS is cheap


STANDARD = Plan(steps=1200, device_every={"cuda": 2, "cpu": 15}, host_every=2)
QUICK = Plan(steps=160, device_every={"cuda": 1, "cpu": 10}, host_every=1)


def rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * PAGE


def live_tensor_bytes(torch: Any) -> int:
    """CPU: bytes of distinct storages of every tensor the collector can see."""
    seen: Dict[int, int] = {}
    objects = gc.get_objects()
    # The tensors are picked out in C (map, compress): a Python loop over every object the collector holds
    # (about 170,000 once torch is imported) made each sample cost 65 ms, and far more under a tracer.
    # type() not isinstance(): no proxies, no lazy attributes.
    tensors = itertools.compress(objects, map(issubclass, map(type, objects), itertools.repeat(torch.Tensor)))
    for obj in tensors:
        if obj.device.type == "cpu":
            try:
                storage = obj.untyped_storage()
                seen[storage.data_ptr()] = storage.nbytes()
            except (RuntimeError, NotImplementedError):  # fake/functional/meta tensors (a failed torch.compile
                continue                                  # leaves some behind): they hold no memory of their own
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
    """Samples of one meter every `every` steps, judged with `limits`."""

    def __init__(self, meter: Callable[[], int], every: int, limits: LeakLimits) -> None:
        self.meter, self.every, self.limits = meter, every, limits
        self.steps: List[int] = []
        self.used: List[int] = []

    def sample(self, step: int) -> bool:
        """Sample if due; True when this series now shows a leak for certain."""
        if step % self.every:
            return False
        self.steps.append(step)
        self.used.append(self.meter())
        return len(self.steps) % CHECK_EVERY_SAMPLES == 0 and self.verdict().leaking

    def verdict(self) -> LeakVerdict:
        return leak_verdict(self.steps, self.used, self.limits)

    def judgeable(self) -> bool:
        return len(self.steps) >= LEAK_MIN_SAMPLES


@contextlib.contextmanager
def one_thread(torch: Any, device: Any) -> Iterator[None]:
    """CPU mode: one intra-op thread (a tiny model gains nothing from more, and on a
    loaded host OpenMP threads that wait for each other make every step 30x slower)."""
    saved = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def leak_loop(torch: Any, device: Any, inject_mib: float, plan: Plan = STANDARD) -> Dict[str, Any]:
    """Run the loop for plan.steps steps (or until a leak is certain); return both series."""
    with one_thread(torch, device):
        return _loop(torch, device, inject_mib, plan)


def _loop(torch: Any, device: Any, inject_mib: float, plan: Plan) -> Dict[str, Any]:
    step = make_step(torch, device)
    dev = Series(device_meter(torch, device), plan.device_every[device.type], DEVICE_LIMITS)
    host = Series(rss_bytes, plan.host_every, HOST_LIMITS)
    leaked: List[Any] = []
    t0, caught, done = time.monotonic(), None, 0
    for i in range(WARMUP_STEPS + plan.steps):
        step()
        if inject_mib:
            leaked.append(torch.full((int(inject_mib * MIB) // 4,), float(i), device=device))
        if i < WARMUP_STEPS:
            continue
        done = i - WARMUP_STEPS + 1
        leaking = dev.sample(i)
        leaking = host.sample(i) or leaking
        if leaking and dev.judgeable() and host.judgeable():
            caught = {"steps": done, "seconds": round(time.monotonic() - t0, 3)}
            break
    del leaked
    return {"device": dev, "host": host, "seconds": time.monotonic() - t0, "steps": done,
            "caught": caught, "device_type": device.type}


def run_once(ctx: Context) -> Dict[str, Any]:
    """leak.device runs the loop and leaves it for leak.host (which re-runs alone)."""
    run: Optional[Dict[str, Any]] = ctx.cache.pop("leak_run", None)
    if run is None:
        run = leak_loop(ctx.torch, ctx.device, ctx.config.leak_inject_mib)
        ctx.release_memory()
    return run


def series_data(run: Dict[str, Any], series: Series, verdict: LeakVerdict) -> Dict[str, Any]:
    caught: Optional[Dict[str, Any]] = run["caught"]
    return {"steps": series.steps, "bytes": series.used, "slope_bytes_per_step": verdict.slope,
            "intercept": verdict.intercept, "low_bytes_per_step": verdict.low,
            "high_bytes_per_step": verdict.high, "margin_bytes_per_step": verdict.margin,
            "sustained_bytes_per_step": verdict.sustained, "samples": verdict.samples,
            "loop_steps": run["steps"], "loop_seconds": round(run["seconds"], 2),
            "caught_after_steps": caught and caught["steps"],
            "caught_after_s": caught and caught["seconds"]}


def judge_series(run: Dict[str, Any], key: str, what: str) -> Result:
    series: Series = run[key]
    verdict = series.verdict()
    data = series_data(run, series, verdict)
    if verdict.samples < LEAK_MIN_SAMPLES:  # only if a plan samples too rarely: a bug
        return outcome("fail", f"only {verdict.samples} samples of {what} in {run['steps']} steps: "
                       "cannot judge", None, None, data=data)
    head = "leak: " if verdict.leaking else "no leak: "
    return outcome("fail" if verdict.leaking else "pass", f"{head}{what} {verdict.describe()}",
                   round(verdict.slope / MIB, 4), round(verdict.margin / MIB, 4), data=data)


def device_what(run: Dict[str, Any]) -> str:
    return "torch.cuda.memory_allocated" if run["device_type"] == "cuda" else "live CPU tensor bytes"


@check("leak.probe", "short training loop: allocated memory and host RSS stay flat",
       unit="MiB/step")
def probe(ctx: Context) -> Result:
    run = leak_loop(ctx.torch, ctx.device, ctx.config.leak_inject_mib, QUICK)
    ctx.release_memory()
    results = [judge_series(run, "device", device_what(run)), judge_series(run, "host", "host RSS")]
    bad = [r for r in results if r["status"] != "pass"]
    worst = bad[0] if bad else max(results, key=lambda r: r["value"] or 0.0)
    detail = f"{run['steps']} steps: " + "; ".join(r["detail"] for r in (bad or results))
    data = dict(results[0].get("data") or {}, host=results[1].get("data"))
    return outcome(worst["status"], detail, worst["value"], worst["threshold"], data=data)


@check("leak.device", "fixed-shape training loop: allocated memory stays flat",
       tier="standard", unit="MiB/step")
def device_leak(ctx: Context) -> Result:
    run = run_once(ctx)
    ctx.cache["leak_run"] = run
    return judge_series(run, "device", device_what(run))


@check("leak.host", "fixed-shape training loop: host RSS stays flat", tier="standard",
       unit="MiB/step")
def host_leak(ctx: Context) -> Result:
    return judge_series(run_once(ctx), "host", "host RSS")
