"""The payload's statistics and rate formulas (stats.py, formulas.py): pure tables."""

from __future__ import annotations

import os
import random
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "verify"))

from imagesmith_payload import formulas, stats  # noqa: E402
from imagesmith_payload.stats import MIB  # noqa: E402


@pytest.mark.parametrize("values, mid", [([3.0], 3.0), ([3.0, 1.0, 2.0], 2.0), ([4.0, 1.0, 3.0, 2.0], 2.5)])
def test_median(values: list, mid: float) -> None:
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
def test_linear_fit_least_squares(xs: list, ys: list, slope: float, intercept: float) -> None:
    got = stats.linear_fit(xs, ys)
    assert got == (pytest.approx(slope), pytest.approx(intercept))


@pytest.mark.parametrize("xs, ys, message", [
    ([1], [1], "two or more"), ([1, 2], [1], "two or more"), ([2, 2], [1, 3], "two distinct x"),
])
def test_linear_fit_refuses_degenerate_input(xs: list, ys: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        stats.linear_fit(xs, ys)


# ------------------------------------------------------------------ the leak detector
def series(per_step: float, seed: int, steps: int = 200, noise: float = 2 * MIB,
           base: float = 900 * MIB) -> tuple:
    """Bytes in use sampled every 2 steps: base + leak*step + allocator jitter."""
    rng = random.Random(seed)
    xs = list(range(20, 20 + steps, 2))
    return xs, [base + per_step * x + rng.uniform(-noise, noise) for x in xs]


@pytest.mark.parametrize("seed", range(5))
def test_five_clean_noisy_series_raise_no_alarm(seed: int) -> None:
    xs, ys = series(0.0, seed)
    assert not stats.leak_verdict(xs, ys).leaking


@pytest.mark.parametrize("seed", range(5))
def test_an_injected_leak_of_one_mib_per_step_is_caught(seed: int) -> None:
    xs, ys = series(1.0 * MIB, seed)
    verdict = stats.leak_verdict(xs, ys)
    assert verdict.leaking and verdict.slope == pytest.approx(MIB, rel=0.05)


def test_a_leak_is_caught_from_the_first_dozen_samples() -> None:
    xs, ys = series(1.0 * MIB, 0, steps=24)  # 12 samples over 22 steps: ~22 MiB grown
    assert stats.leak_verdict(xs, ys).leaking


def test_one_allocator_step_is_not_a_leak() -> None:
    xs = list(range(20, 420, 2))
    ys = [800 * MIB + (8 * MIB if x > 200 else 0) for x in xs]  # the cache grew once by a block
    assert not stats.leak_verdict(xs, ys).leaking


@pytest.mark.parametrize("per_step, leaking", [(0.01 * MIB, False), (0.1 * MIB, False), (0.25 * MIB, True)])
def test_leak_slope_limit(per_step: float, leaking: bool) -> None:
    xs, ys = series(per_step, 1, noise=0.0)
    assert stats.leak_verdict(xs, ys).leaking is leaking


def test_too_few_samples_never_alarm() -> None:
    xs, ys = series(5.0 * MIB, 0, steps=20)
    verdict = stats.leak_verdict(xs, ys)
    assert (verdict.leaking, verdict.samples) == (False, 10)


def test_leak_verdict_describe() -> None:
    verdict = stats.LeakVerdict(True, 1.0 * MIB, 30.0 * MIB, 40)
    assert verdict.describe() == "+1.000 MiB/step, +30.0 MiB fitted over 40 samples"


@pytest.mark.parametrize("values, spread", [([100.0], 0.0), ([100.0, 90.0], 10.0), ([50.0, 100.0, 75.0], 50.0)])
def test_spread_percent(values: list, spread: float) -> None:
    assert stats.spread_percent(values) == pytest.approx(spread)


@pytest.mark.parametrize("values, trend", [
    ([100.0, 100.0, 100.0], 0.0), ([100.0, 99.0, 98.0], -100.0 / 99.0), ([5.0], None), ([0.0, 0.0], None),
])
def test_trend_percent_per_round(values: list, trend) -> None:
    got = stats.trend_percent_per_round(values)
    assert got == (None if trend is None else pytest.approx(trend, abs=1e-9))


def test_sensor_summary() -> None:
    samples = [{"temperature_c": 50, "power_w": 600.0, "sm_clock_mhz": 1980, "throttle": []},
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
def test_rates(fn, args: tuple, value: float) -> None:
    assert fn(*args) == pytest.approx(value, rel=1e-3)
