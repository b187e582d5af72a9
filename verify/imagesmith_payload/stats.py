"""Pure statistics: median, least-squares slope, the leak detector, trends."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Dict, List, Optional, Sequence, Tuple

MIB = 1024 * 1024

# The leak detector (leak_verdict) fits bytes-in-use against the step number and
# calls a leak only when growth is statistically certain AND more than the
# allocator can explain:
#   * the one-sided LEAK_CONFIDENCE lower bound of the fitted slope exceeds a
#     margin: a floor (bytes/step) plus the allocator's granularity spread over
#     the window (a cache or malloc arena may grow by that much ONCE without
#     leaking, so a short window needs a steeper slope than a long one);
#   * the growth is sustained: the median of the slopes of LEAK_BLOCKS
#     consecutive blocks of samples is above the floor too (a one-off plateau
#     or step raises one block, not most of them).
# The loop that feeds it collects a number of steps, never a number of seconds.
LEAK_CONFIDENCE = 0.999
LEAK_MIN_SAMPLES = 12
LEAK_BLOCKS = 6


@dataclass(frozen=True)
class LeakLimits:
    """What a series may do without being called a leak."""

    floor: float  # bytes per step
    granularity: float  # bytes the allocator may add once per window


# torch.cuda.memory_allocated / live CPU tensor bytes: exact counters.
DEVICE_LIMITS = LeakLimits(floor=0.02 * MIB, granularity=2 * MIB)
# Host RSS: pages, malloc arenas and Python's allocator grow in chunks.
HOST_LIMITS = LeakLimits(floor=0.02 * MIB, granularity=8 * MIB)


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[mid])
    return (ordered[mid - 1] + ordered[mid]) / 2.0


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> Tuple[float, float]:
    """Least-squares line y = slope * x + intercept."""
    n = len(xs)
    if n != len(ys) or n < 2:
        raise ValueError("linear_fit needs two or more (x, y) pairs of equal count")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("linear_fit needs at least two distinct x values")
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    slope = sxy / sxx
    return slope, my - slope * mx


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile (Cornish-Fisher expansion; within 1% for df >= 5)."""
    z = NormalDist().inv_cdf(p)
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    return z + g1 / df + g2 / df ** 2 + g3 / df ** 3


@dataclass(frozen=True)
class SlopeFit:
    slope: float
    intercept: float
    stderr: float  # standard error of the slope
    samples: int

    def bounds(self, confidence: float) -> Tuple[float, float]:
        """One-sided `confidence` lower and upper bounds of the slope."""
        half = t_quantile(confidence, max(self.samples - 2, 1)) * self.stderr
        return self.slope - half, self.slope + half


def slope_fit(xs: Sequence[float], ys: Sequence[float]) -> SlopeFit:
    """Least squares with the slope's standard error (needs 3+ points)."""
    slope, intercept = linear_fit(xs, ys)
    n = len(xs)
    if n < 3:
        raise ValueError("slope_fit needs three or more points")
    mx = sum(xs) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sse = sum((y - slope * x - intercept) ** 2 for x, y in zip(xs, ys))
    return SlopeFit(slope, intercept, math.sqrt(sse / (n - 2) / sxx), n)


def block_slopes(xs: Sequence[float], ys: Sequence[float], blocks: int) -> List[float]:
    """Fitted slope of each of `blocks` consecutive runs of samples (2+ each)."""
    size = len(xs) // blocks
    if size < 2:
        return []
    cuts = [i * size for i in range(blocks)] + [len(xs)]
    return [linear_fit(xs[a:b], ys[a:b])[0] for a, b in zip(cuts, cuts[1:])]


@dataclass(frozen=True)
class LeakVerdict:
    leaking: bool
    slope: float  # bytes per step
    low: float  # lower confidence bound of the slope
    high: float  # upper confidence bound
    margin: float  # what `low` had to exceed
    sustained: float  # median block slope
    growth: float  # fitted bytes over the window
    samples: int
    span: float = 0.0  # steps between the first and last sample
    intercept: float = 0.0

    def describe(self) -> str:
        pct = f"{100 * LEAK_CONFIDENCE:g}%"
        return (f"{self.slope / MIB:+.3f} MiB/step ({pct} bounds {self.low / MIB:+.3f}.."
                f"{self.high / MIB:+.3f}; a leak needs the lower bound above "
                f"{self.margin / MIB:.3f} and growth in most of the run: median block "
                f"{self.sustained / MIB:+.3f}), {self.growth / MIB:+.1f} MiB over "
                f"{self.span:g} steps, {self.samples} samples")


def leak_margin(limits: LeakLimits, span: float) -> float:
    """Bytes/step a slope's lower bound must exceed over a window of `span` steps."""
    return limits.floor + limits.granularity / max(span, 1.0)


def leak_verdict(steps: Sequence[float], used: Sequence[float],
                 limits: LeakLimits = DEVICE_LIMITS,
                 confidence: float = LEAK_CONFIDENCE) -> LeakVerdict:
    """Is bytes-in-use growing with the step number, certainly and steadily?"""
    n = len(steps)
    if n < LEAK_MIN_SAMPLES:
        return LeakVerdict(False, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, n)
    fit = slope_fit(steps, used)
    low, high = fit.bounds(confidence)
    span = float(steps[-1] - steps[0])
    margin = leak_margin(limits, span)
    sustained = median(block_slopes(steps, used, LEAK_BLOCKS) or [fit.slope])
    leaking = low > margin and sustained > limits.floor
    return LeakVerdict(leaking, fit.slope, low, high, margin, sustained, fit.slope * span, n,
                       span, fit.intercept)


def spread_percent(values: Sequence[float]) -> float:
    """(max - min) / max in percent; 0 for one value."""
    top = max(values)
    return 0.0 if top <= 0 else 100.0 * (top - min(values)) / top


def trend_percent_per_round(values: Sequence[float]) -> Optional[float]:
    """Fitted change per round as a percent of the median (soak trends)."""
    clean = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if len(clean) < 2:
        return None
    mid = median(clean)
    if mid == 0:
        return None
    slope, _ = linear_fit(list(range(len(clean))), clean)
    return 100.0 * slope / abs(mid)


def sensor_summary(samples: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """NVML samples of one GPU -> max temperature and power, SM clock range, reasons seen."""
    def values(key: str) -> List[float]:
        return [s[key] for s in samples if isinstance(s.get(key), (int, float))]
    temps, power, clocks = values("temperature_c"), values("power_w"), values("sm_clock_mhz")
    reasons: Dict[str, int] = {}
    for sample in samples:
        for name in sample.get("throttle") or ():
            reasons[name] = reasons.get(name, 0) + 1
    return {"samples": len(samples), "max_temperature_c": max(temps, default=None),
            "max_power_w": max(power, default=None),
            "sm_clock_mhz": {"min": min(clocks, default=None),
                             "median": median(clocks) if clocks else None,
                             "max": max(clocks, default=None)},
            "throttle_reasons": reasons}
