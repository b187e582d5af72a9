"""The payload's statistics and rate formulas (stats.py, formulas.py): pure tables."""

from __future__ import annotations

import os
import random
import sys
from typing import Any

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "verify"))

from imagesmith_payload import formulas, stats
from imagesmith_payload.stats import MIB


@pytest.mark.parametrize("values, mid", [([3.0], 3.0), ([3.0, 1.0, 2.0], 2.0), ([4.0, 1.0, 3.0, 2.0], 2.5)])
def test_median(values: list[Any], mid: float) -> None:
    assert stats.median(values) == mid


def test_median_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="median of no values"):
        stats.median([])


@pytest.mark.parametrize("xs, ys, slope, intercept", [
    ([0, 1, 2, 3], [1, 3, 5, 7], 2.0, 1.0),
    ([0, 1, 2, 3], [5, 5, 5, 5], 0.0, 5.0),
    ([1, 2, 3], [3, 2, 1], -1.0, 4.0),
    ([0, 1, 2, 3], [0, 1, 1, 2], 0.6, 0.1),
])
def test_linear_fit_least_squares(xs: list[Any], ys: list[Any], slope: float, intercept: float) -> None:
    got = stats.linear_fit(xs, ys)
    assert got == pytest.approx((slope, intercept))


@pytest.mark.parametrize("xs, ys, message", [
    ([1], [1], "two or more"), ([1, 2], [1], "two or more"), ([2, 2], [1, 3], "two distinct x"),
])
def test_linear_fit_refuses_degenerate_input(xs: list[Any], ys: list[Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        stats.linear_fit(xs, ys)


# ------------------------------------------------------------------ the leak detector
from imagesmith_payload.stats import DEVICE_LIMITS, HOST_LIMITS  # noqa: E402


def series(per_step: float, seed: int, steps: int = 1200, every: int = 2, noise: float = 0.0,
           base: float = 900 * MIB, start: int = 20) -> tuple[Any, ...]:
    """Bytes in use sampled every `every` steps: base + leak*step + uniform jitter."""
    rng = random.Random(seed)
    xs = list(range(start, start + steps, every))
    return xs, [base + per_step * x + rng.uniform(-noise, noise) for x in xs]


@pytest.mark.parametrize("t_p, df, t", [(0.999, 10, 4.144), (0.999, 20, 3.552), (0.999, 100, 3.174),
                                        (0.975, 10, 2.228), (0.95, 30, 1.697)])
def test_t_quantile_matches_the_table(t_p: float, df: int, t: float) -> None:
    assert stats.t_quantile(t_p, df) == pytest.approx(t, rel=0.005)


def test_slope_fit_standard_error() -> None:
    fit = stats.slope_fit([0, 1, 2, 3, 4], [0.0, 1.2, 1.9, 3.1, 4.0])
    assert (fit.slope, fit.intercept) == pytest.approx((0.99, 0.06))
    assert fit.stderr == pytest.approx((0.051 / 3 / 10) ** 0.5)  # sqrt(SSE/(n-2)/Sxx)
    low, high = fit.bounds(0.975)  # t(0.975, 3 df) = 3.182
    assert (low, high) == pytest.approx((0.99 - 3.182 * fit.stderr, 0.99 + 3.182 * fit.stderr), rel=0.01)


def test_block_slopes_split_the_samples_in_order() -> None:
    xs = list(range(12))
    ys = [0.0, 0.0, 0.0, 0.0, 4.0, 5.0, 6.0, 7.0, 16.0, 18.0, 20.0, 22.0]
    assert stats.block_slopes(xs, ys, 3) == [pytest.approx(0.0), pytest.approx(1.0), pytest.approx(2.0)]
    assert stats.block_slopes(xs[:5], ys[:5], 3) == []  # fewer than 2 points per block


# per step (MiB), jitter (MiB), limits, leaking: what the detector must say about a
# steady series of 600 samples over 1200 steps (the standard tier on a GPU)
@pytest.mark.parametrize("per_step, noise, limits, leaking", [
    (0.0, 0.0, DEVICE_LIMITS, False),  # torch.cuda.memory_allocated of a clean loop: constant
    (0.05, 0.0, DEVICE_LIMITS, True),  # the target: a steady 0.05 MiB/step leak
    (0.09, 0.0, DEVICE_LIMITS, True),  # every nn.Module output kept alive (~0.09 MiB/step)
    (0.03, 0.0, DEVICE_LIMITS, True),
    (0.01, 0.0, DEVICE_LIMITS, False),  # below the floor (12 MiB over 1200 steps)
    (0.0, 2.0, HOST_LIMITS, False),  # RSS jitter of +-2 MiB
    (0.05, 2.0, HOST_LIMITS, True),  # the same leak seen through that jitter
    (0.001, 0.5, HOST_LIMITS, False),  # Python objects of a clean loop: a few pages
    (-0.05, 0.0, HOST_LIMITS, False),  # shrinking is not a leak
])
def test_steady_series(per_step: float, noise: float, limits: Any, leaking: bool) -> None:
    for seed in range(3):
        xs, ys = series(per_step * MIB, seed, noise=noise * MIB)
        verdict = stats.leak_verdict(xs, ys, limits)
        assert verdict.leaking is leaking, verdict.describe()


@pytest.mark.parametrize("seed", range(10))
def test_ten_noisy_clean_series_raise_no_alarm(seed: int) -> None:
    xs, ys = series(0.0, seed, noise=4 * MIB)
    assert not stats.leak_verdict(xs, ys, HOST_LIMITS).leaking


def plateau(heights: dict[int, int], steps: int = 1200) -> tuple[Any, ...]:
    """A flat series that rises by heights[s] MiB at step s (the allocator caching a block)."""
    xs = list(range(20, 20 + steps, 2))
    return xs, [800 * MIB + sum(h * MIB for s, h in heights.items() if x >= s) for x in xs]


@pytest.mark.parametrize("heights, limits", [
    ({600: 8}, HOST_LIMITS),  # one malloc arena
    ({600: 64}, HOST_LIMITS),  # one large block: steep fitted slope, but a step
    ({400: 32, 900: 32}, HOST_LIMITS),  # two blocks
    ({100: 20}, DEVICE_LIMITS),  # a lazily created buffer after the warm-up
    ({1100: 2}, DEVICE_LIMITS),
])
def test_allocator_plateaus_are_not_leaks(heights: dict[int, int], limits: Any) -> None:
    xs, ys = plateau(heights)
    verdict = stats.leak_verdict(xs, ys, limits)
    assert not verdict.leaking, verdict.describe()


@pytest.mark.parametrize("chunk_mib, every_steps", [(1, 20), (4, 80), (8, 160)])
def test_a_leak_that_grows_in_chunks_is_still_a_leak(chunk_mib: int, every_steps: int) -> None:
    xs = list(range(20, 1220, 2))  # 0.05 MiB/step on average, in arena-sized chunks
    ys = [800 * MIB + chunk_mib * MIB * (x // every_steps) for x in xs]
    assert stats.leak_verdict(xs, ys, HOST_LIMITS).leaking


def test_a_steady_leak_on_top_of_a_plateau_is_a_leak() -> None:
    xs, ys = plateau({600: 64})
    ys = [y + 0.05 * MIB * x for x, y in zip(xs, ys)]
    assert stats.leak_verdict(xs, ys, HOST_LIMITS).leaking


@pytest.mark.parametrize("limits", [DEVICE_LIMITS, HOST_LIMITS])
def test_one_mib_per_step_is_certain_from_the_first_dozen_samples(limits: Any) -> None:
    xs, ys = series(1.0 * MIB, 0, steps=24, noise=0.25 * MIB)  # 12 samples over 22 steps
    assert stats.leak_verdict(xs, ys, limits).leaking


def test_a_short_window_needs_a_steeper_slope() -> None:
    """The allocator's granularity is spread over the window: 0.05 MiB/step over 24
    steps (1.2 MiB) is within one cached block, over 1200 steps it is not."""
    short, long = series(0.05 * MIB, 0, steps=24), series(0.05 * MIB, 0)
    assert not stats.leak_verdict(*short).leaking and stats.leak_verdict(*long).leaking
    assert stats.leak_margin(DEVICE_LIMITS, 22) == pytest.approx(0.02 * MIB + 2 * MIB / 22)


def test_too_few_samples_never_alarm() -> None:
    xs, ys = series(5.0 * MIB, 0, steps=20)
    verdict = stats.leak_verdict(xs, ys)
    assert (verdict.leaking, verdict.samples) == (False, 10)


def test_leak_verdict_describe() -> None:
    verdict = stats.LeakVerdict(True, 1.0 * MIB, 0.9 * MIB, 1.1 * MIB, 0.1 * MIB, 1.0 * MIB, 30.0 * MIB,
                                40, 78.0)
    assert verdict.describe() == ("+1.000 MiB/step (99.9% bounds +0.900..+1.100; a leak needs the lower bound "
                                  "above 0.100 and growth in most of the run: median block +1.000), +30.0 MiB "
                                  "over 78 steps, 40 samples")


@pytest.mark.parametrize("values, spread", [([100.0], 0.0), ([100.0, 90.0], 10.0), ([50.0, 100.0, 75.0], 50.0)])
def test_spread_percent(values: list[Any], spread: float) -> None:
    assert stats.spread_percent(values) == pytest.approx(spread)


@pytest.mark.parametrize("values, trend", [
    ([100.0, 100.0, 100.0], 0.0), ([100.0, 99.0, 98.0], -100.0 / 99.0), ([5.0], None), ([0.0, 0.0], None),
])
def test_trend_percent_per_round(values: list[Any], trend: Any) -> None:
    got = stats.trend_percent_per_round(values)
    assert got == (None if trend is None else pytest.approx(trend, abs=1e-9))


def test_sensor_summary() -> None:
    samples: list[dict[str, Any]] = [{"temperature_c": 50, "power_w": 600.0, "sm_clock_mhz": 1980, "throttle": []},
               {"temperature_c": 61, "power_w": 699.5, "sm_clock_mhz": 1485, "throttle": ["sw_power_cap"]},
               {"temperature_c": None, "power_w": None, "sm_clock_mhz": 1500, "throttle": ["sw_power_cap"]}]
    assert stats.sensor_summary(samples) == {
        "samples": 3, "max_temperature_c": 61, "max_power_w": 699.5,
        "sm_clock_mhz": {"min": 1485, "median": 1500, "max": 1980},
        "throttle_reasons": {"sw_power_cap": 2}}


# ----------------------------------------------------------------------- formulas
@pytest.mark.parametrize("nbytes, seconds, world, busbw", [
    (1 << 30, 1.0, 2, (1 << 30) / 1e9),  # n=2: busbw == algbw
    (1 << 30, 1.0, 4, (1 << 30) / 1e9 * 1.5),  # 2(n-1)/n = 1.5
    (1 << 30, 0.5, 8, (1 << 30) / 0.5e9 * 1.75),
    (1 << 30, 1.0, 1, 0.0),
])
def test_allreduce_busbw(nbytes: int, seconds: float, world: int, busbw: float) -> None:
    assert formulas.allreduce_busbw(nbytes, seconds, world) == pytest.approx(busbw)


def test_busbw_needs_a_world() -> None:
    with pytest.raises(ValueError, match="world_size must be >= 1"):
        formulas.allreduce_busbw(1, 1.0, 0)


@pytest.mark.parametrize("fn, args, value", [
    (formulas.gemm_tflops, (8192, 8192, 8192, 1.4e-3), 785.4),
    (formulas.gemm_tflops, (10000, 10000, 10000, 0.04), 50.0),
    (formulas.copy_gbps, (2 << 30, 1e-3), 4295.0),
    (formulas.copy_gbps, (512 << 20, 1e-2, False), 53.7),
    (formulas.sdpa_tflops, (16, 16, 4096, 128, 1.8e-3, True), 610.8),
    (formulas.sdpa_tflops, (16, 16, 4096, 128, 3.6e-3, False), 610.8),
])
def test_rates(fn: Any, args: tuple[Any, ...], value: float) -> None:
    assert fn(*args) == pytest.approx(value, rel=1e-3)
