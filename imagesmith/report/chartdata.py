"""What the charts show, read from the checks' ``data`` in the shapes the payload writes.

* ``leak.*``: ``data.steps`` + ``data.bytes`` (parallel lists) and the payload's
  fit ``slope_bytes_per_step`` + ``intercept`` (checks/leak.py ``series_data``);
* rate checks: ``data.per_gpu_tflops`` / ``data.per_gpu_gbps`` as ``{"0": value}``
  (checks/gemm.py, checks/bandwidth.py), else the check's value against its baseline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from imagesmith import resources
from imagesmith.report.model import Check, Verify
from imagesmith.report.parse import number


@dataclass(frozen=True)
class LeakCurve:
    check: Check
    points: tuple[tuple[float, float], ...]  # (step, bytes)
    slope: float  # bytes per step
    intercept: float  # bytes


@dataclass(frozen=True)
class GpuRate:
    gpu: str  # "0", "1", ... or "all" when the check gives no per-GPU figures
    value: float


@dataclass(frozen=True)
class Throughput:
    check: Check
    rates: tuple[GpuRate, ...]


def leak_curves(v: Verify) -> list[LeakCurve]:
    """Leak checks (``leak.*``) that carry their samples and a line through them."""
    out = []
    for c in v.checks:
        points = leak_points(c.data) if c.id.startswith("leak.") else ()
        fit = _fit(c.data, points) if len(points) >= 2 else None
        if fit is not None:
            out.append(LeakCurve(c, points, *fit))
    return out


def leak_points(data: Mapping[str, Any]) -> tuple[tuple[float, float], ...]:
    steps, used = data.get("steps"), data.get("bytes")
    if not isinstance(steps, list) or not isinstance(used, list):
        return ()
    pairs = zip((number(s) for s in steps), (number(b) for b in used))
    return tuple((x, y) for x, y in pairs if x is not None and y is not None)


def _fit(data: Mapping[str, Any], points: tuple[tuple[float, float], ...]) -> tuple[float, float] | None:
    """The payload's fitted line; a report without one is fitted with the payload's own least squares."""
    slope, intercept = number(data.get("slope_bytes_per_step")), number(data.get("intercept"))
    if slope is not None and intercept is not None:
        return slope, intercept
    try:
        fitted: tuple[float, float] = resources.payload_module("stats").linear_fit(*zip(*points))
    except ValueError:  # one distinct step: no line to draw
        return None
    return fitted


def throughputs(v: Verify) -> list[Throughput]:
    """Rate checks measured against a baseline or per GPU (GEMM, bandwidth, ...)."""
    out = []
    for c in v.checks:
        rates = per_gpu(c.data)
        value = number(c.value)
        if not rates and c.baseline is not None and value is not None:
            rates = (GpuRate("all", value),)
        if rates and (c.baseline is not None or c.id.startswith("gemm.")):
            out.append(Throughput(c, rates))
    return out


def per_gpu(data: Mapping[str, Any]) -> tuple[GpuRate, ...]:
    """``per_gpu_<unit>``: {"0": value, ...}; GPUs without a figure are left out."""
    for key, raw in data.items():
        if key.startswith("per_gpu") and isinstance(raw, Mapping):
            pairs = [(str(k), number(v)) for k, v in raw.items()]
            return tuple(GpuRate(g, v) for g, v in pairs if v is not None)
    return ()
