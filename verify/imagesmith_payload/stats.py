"""Pure statistics: median, least-squares slope, the leak detector, trends."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

MIB = 1024 * 1024

# A leak alarm needs BOTH a fitted slope above SLOPE_LIMIT and a fitted growth
# over the window above GROWTH_LIMIT: a 1 MiB/step leak crosses both within
# ~20 steps, while allocator noise (a few cached blocks, RSS jitter) is below
# the growth limit or has no sustained slope.
LEAK_SLOPE_LIMIT = 0.125 * MIB  # bytes per step
LEAK_GROWTH_LIMIT = 16 * MIB  # bytes over the window
LEAK_MIN_SAMPLES = 12


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


@dataclass(frozen=True)
class LeakVerdict:
    leaking: bool
    slope: float  # bytes per step
    growth: float  # fitted bytes over the window
    samples: int

    def describe(self) -> str:
        return (f"{self.slope / MIB:+.3f} MiB/step, {self.growth / MIB:+.1f} MiB fitted over "
                f"{self.samples} samples")


def leak_verdict(steps: Sequence[float], used: Sequence[float],
                 slope_limit: float = LEAK_SLOPE_LIMIT,
                 growth_limit: float = LEAK_GROWTH_LIMIT) -> LeakVerdict:
    """Fit bytes-in-use against step number; alarm on sustained growth."""
    if len(steps) < LEAK_MIN_SAMPLES:
        return LeakVerdict(False, 0.0, 0.0, len(steps))
    slope, _ = linear_fit(steps, used)
    growth = slope * (steps[-1] - steps[0])
    return LeakVerdict(slope > slope_limit and growth > growth_limit, slope, growth, len(steps))


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


def sensor_summary(samples: Sequence[dict]) -> dict:
    """NVML samples of one GPU -> max temperature and power, SM clock range, reasons seen."""
    def values(key: str) -> list:
        return [s[key] for s in samples if isinstance(s.get(key), (int, float))]
    temps, power, clocks = values("temperature_c"), values("power_w"), values("sm_clock_mhz")
    reasons: dict = {}
    for sample in samples:
        for name in sample.get("throttle") or ():
            reasons[name] = reasons.get(name, 0) + 1
    return {"samples": len(samples), "max_temperature_c": max(temps, default=None),
            "max_power_w": max(power, default=None),
            "sm_clock_mhz": {"min": min(clocks, default=None),
                             "median": median(clocks) if clocks else None,
                             "max": max(clocks, default=None)},
            "throttle_reasons": reasons}
