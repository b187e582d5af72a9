"""Run selected checks: gate, time, catch, watch for hangs, report progress."""

from __future__ import annotations

import sys
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, TextIO

from .context import Context, TorchUnavailable
from .judge import FAIL, SKIP, worst
from .registry import CheckSpec
from .results import Result, failed, skipped
from .stats import median, trend_percent_per_round

Progress = Callable[[Dict[str, Any], int, int], None]
OnHang = Callable[[List[Dict[str, Any]]], None]
Judge = Callable[[Dict[str, Any]], Dict[str, Any]]  # an entry judged again as it ends (sharing.judge_entry)


def gate(spec: CheckSpec, ctx: Context) -> Optional[str]:
    """Why `spec` cannot mean anything here (it is then skipped), or None."""
    if spec.needs == "nothing":
        return None
    if not ctx.try_torch():
        return "torch is not importable (see versions.torch)"
    if spec.needs == "gpu" and ctx.gpu_count == 0:
        return "no CUDA GPU visible (CPU mode)"
    if spec.needs == "multi_gpu" and ctx.gpu_count < 2:
        return f"needs 2 or more GPUs; {ctx.gpu_count} visible"
    return None


def call_check(spec: CheckSpec, ctx: Context) -> Result:
    """The check's own result, or a fail carrying the exception."""
    reason = gate(spec, ctx)
    if reason:
        return skipped(reason)
    try:
        return spec.func(ctx)
    except TorchUnavailable as exc:
        return skipped(f"torch is not importable: {exc}")
    except Exception as exc:  # a check that raises fails, with the exception
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return failed(f"{type(exc).__name__}: {_one_line(exc)} "
                      f"(at {where.name}:{where.lineno})")


def finish(spec: CheckSpec, result: Result, seconds: float) -> Dict[str, Any]:
    """A full report entry, keys in schema order."""
    entry = {"id": spec.id, "title": spec.title, "status": result["status"],
             "value": result.get("value"), "threshold": result.get("threshold"),
             "unit": result.get("unit", spec.unit), "baseline": result.get("baseline"),
             "percent_of_baseline": result.get("percent_of_baseline"),
             "detail": _one_line(result.get("detail", "")), "optional": spec.optional,
             "duration_s": round(seconds, 2)}
    if result.get("data"):
        entry["data"] = result["data"]
    return entry


def run_checks(specs: Sequence[CheckSpec], ctx: Context, progress: Progress,
               on_hang: OnHang, offload: Optional[Any] = None, judge: Optional[Judge] = None) -> List[Dict[str, Any]]:
    """Each check in turn under a watchdog; on a hang, on_hang gets the results so far.
    With `offload` (offload.Offload), its checks run in worker processes meanwhile and are
    collected after the others; the entries come back in the order of `specs`. Every entry
    carries its window (wall-clock start and end; a worker's entry the worker's own), and
    `judge` sees each entry before it is shown (a tenant on the GPU during its window)."""
    order = {spec.id: n for n, spec in enumerate(specs)}
    here = [s for s in specs if offload is None or s.id not in offload]
    ordered = here + [s for s in specs if offload is not None and s.id in offload]
    done: List[Dict[str, Any]] = []
    for i, spec in enumerate(ordered, 1):
        t0 = time.monotonic()
        timeout = spec.timeout_for(ctx)
        rest = ordered[i:]
        dog = threading.Timer(timeout, lambda s=spec, t=timeout, r=rest: on_hang(
            done + [_hung(s, t)] + [_not_run(x, s) for x in r]))
        dog.daemon = True
        dog.start()
        began = time.time()
        try:
            if offload is not None and spec.id in offload:
                entry = offload.entry(spec, finish)
            else:
                entry = finish(spec, call_check(spec, ctx), time.monotonic() - t0)
        finally:
            dog.cancel()
        entry.setdefault("window", window(began, time.time()))
        done.append(judge(entry) if judge is not None else entry)
        progress(done[-1], i, len(specs))
    return sorted(done, key=lambda e: order.get(e["id"], len(order)))


def window(start: float, end: float) -> Dict[str, float]:
    """A check's window in the report: wall-clock seconds (the host's watch uses the same clock)."""
    return {"start": round(start, 3), "end": round(end, 3)}


def _hung(spec: CheckSpec, timeout: float) -> Dict[str, Any]:
    return finish(spec, failed(f"did not finish within {timeout:.0f} s (hung); "
                               "the payload stopped here"), timeout)


def _not_run(spec: CheckSpec, hung: CheckSpec) -> Dict[str, Any]:
    """A check the payload never reached because `hung` stopped it: listed, failed."""
    return finish(spec, failed(f"not run: the payload stopped at {hung.id} (hung)"), 0.0)


# ------------------------------------------------------------------------ soak
def run_soak(specs: Sequence[CheckSpec], ctx: Context, minutes: float, progress: Progress,
             on_hang: OnHang, judge: Optional[Judge] = None) -> List[Dict[str, Any]]:
    """Repeat the checks until `minutes` have passed (at least once); fold with trends."""
    deadline = time.monotonic() + 60.0 * minutes
    rounds: List[List[Dict[str, Any]]] = []
    while not rounds or time.monotonic() < deadline:
        rounds.append(run_checks(specs, ctx, progress, on_hang, judge=judge))
    return [fold_rounds([r[i] for r in rounds]) for i in range(len(specs))]


def fold_rounds(entries: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """One entry from the same check's rounds: worst status, median value, trend."""
    last = dict(entries[-1])
    statuses = [e["status"] for e in entries]
    values = [e["value"] for e in entries if isinstance(e.get("value"), (int, float))
              and not isinstance(e.get("value"), bool)]
    last["status"] = worst(statuses)
    if values:
        last["value"] = median(values)
    bad = [i for i, e in enumerate(entries) if e["status"] == FAIL]
    trend = trend_percent_per_round(values)
    last["data"] = {"rounds": len(entries), "values": values, "statuses": statuses,
                    "trend_percent_per_round": None if trend is None else round(trend, 3)}
    last["duration_s"] = round(sum(e["duration_s"] for e in entries), 2)
    spans = [e["window"] for e in entries if isinstance(e.get("window"), dict)]
    if spans:
        last["window"] = {"start": spans[0]["start"], "end": spans[-1]["end"]}
    if bad:
        worst_entry = entries[bad[0]]
        last["detail"] = f"failed in {len(bad)}/{len(entries)} rounds; first: {worst_entry['detail']}"
    elif last["status"] != SKIP:
        last["detail"] = f"{len(entries)} rounds; {last['detail']}"
    return last


# -------------------------------------------------------------------- progress
def progress_printer(stream: Optional[TextIO] = None) -> Progress:
    def show(entry: Dict[str, Any], i: int, n: int) -> None:
        out = stream or sys.stderr
        value = entry.get("value")
        shown = "" if value is None else f"{_fmt(value)} {entry.get('unit') or ''}".strip()
        out.write(f"[{i:>2}/{n}] {entry['id']:<24} {entry['status']:<4} {shown:>20} "
                     f"{entry['duration_s']:6.1f}s  {entry['detail'][:110]}\n")
        out.flush()
    return show


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 0.01 else f"{value:.1f}"
    return str(value)


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())[:2000]
