"""The payload's pure judging (verify/imagesmith_payload/judge.py): tables, no torch."""

from __future__ import annotations

import math
import os
import sys
from typing import Any

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "verify"))

from imagesmith_payload import judge
from imagesmith_payload.judge import Threshold


@pytest.mark.parametrize("expected, actual, match", [
    ("2.14.1", "2.14.1+cu130", True),
    ("2.14", "2.14.1", True),
    ("2.1", "2.14.1", False),
    ("9", "9.24.0", True),
    ("13.0", "13.0", True),
    ("12.8", "13.0", False),
    ("2.30.7", "2.30.7", True),
    ("2.30.7", "2.30", False),
    ("580.65.06", "580.65.6", True),
    ("debian12", "debian12", True),
    ("ubuntu22.04", "ubuntu22.04", True),
    ("ubuntu22", "ubuntu22.04", True),
    ("ubuntu22.04", "ubuntu24.04", False),
    ("", "2.9.1", False),
])
def test_version_matches_by_dotted_prefix(expected: str, actual: str, match: bool) -> None:
    assert judge.version_matches(expected, actual) is match


@pytest.mark.parametrize("text, parts", [
    ("580.159.04", (580, 159, 4)), ("2.9.0a0+git", (2, 9, 0)), ("13.0", (13, 0)), ("x", ()),
])
def test_version_tuple(text: str, parts: tuple[Any, ...]) -> None:
    assert judge.version_tuple(text) == parts


@pytest.mark.parametrize("fn, code, text", [
    (judge.cudnn_version_string, 91002, "9.10.2"),
    (judge.cudnn_version_string, 92400, "9.24.0"),
    (judge.cudnn_version_string, 8907, "8.9.7"),
    (judge.nccl_version_string, 22809, "2.28.9"),
    (judge.nccl_version_string, (2, 27, 3), "2.27.3"),
    (judge.nccl_version_string, 2708, "2.7.8"),
    (judge.cuda_version_string, 13000, "13.0"),
    (judge.cuda_version_string, 12080, "12.8"),
])
def test_library_version_codes(fn: Any, code: Any, text: str) -> None:
    assert fn(code) == text


@pytest.mark.parametrize("actual, toolkit, minimum, status, detail", [
    ("580.159.04", "580.65.06", "580.00.00", "pass", "driver 580.159.04 >= 580.65.06 (the toolkit's driver)"),
    ("580.10.01", "580.65.06", "580.00.00", "warn",
     "driver 580.10.01 < 580.65.06 but >= 580.00.00: runs under CUDA minor-version compatibility "
     "(no PTX JIT of newer code); upgrade the host driver to >= 580.65.06"),
    ("570.86.10", "580.65.06", "580.00.00", "fail",
     "driver 570.86.10 is older than 580.00.00: CUDA calls will fail with 'driver too old'; "
     "upgrade the host driver to >= 580.65.06"),
    ("570.86.10", "580.65.06", None, "fail",
     "driver 570.86.10 is older than 580.65.06: CUDA calls will fail with 'driver too old'; "
     "upgrade the host driver to >= 580.65.06"),
])
def test_judge_driver(actual: str, toolkit: str, minimum: Any, status: str, detail: str) -> None:
    assert judge.judge_driver(actual, toolkit, minimum) == (status, detail)


# ------------------------------------------------------ driver by measured CUDA runtime
def kb_releases() -> list[Any]:
    """The knowledge base's release table, as the host hands it to the payload."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".."))
    from imagesmith.model import compat

    return [judge.CudaRelease(**r) for r in compat.load().cuda_releases()]


@pytest.mark.parametrize("release, label", [("12.8.1", "CUDA 12.8 Update 1"), ("12.8.0", "CUDA 12.8 GA"),
                                            ("13.0.3", "CUDA 13.0 Update 3"), ("11.8.0", "CUDA 11.8 GA")])
def test_release_label(release: str, label: str) -> None:
    assert judge.CudaRelease(release, "x", "y").label == label


# measured cudart (the nvidia-cuda-runtime wheel's version) -> release it ships with, exact?
@pytest.mark.parametrize("cudart, release, exact", [
    ("12.8.90", "12.8.1", True),  # 12.8 Update 1 (also in 12.8.2: the earliest release wins)
    ("12.8.57", "12.8.0", True),
    ("12.9.79", "12.9.1", True),  # 12.9.2 ships it unchanged
    ("12.6.77", "12.6.3", True),
    ("12.4.127", "12.4.1", True),
    ("13.0.96", "13.0.2", True),  # torch 2.14.1's runtime (13.0.3 ships it unchanged)
    ("13.0.48", "13.0.0", True),
    ("13.2.86", "13.2.2", True),
    ("11.8.89", "11.8.0", True),
    ("12.8.93", "12.8.1", False),  # newer than any listed 12.8 runtime: the newest release below it
    ("12.8.10", "12.8.0", False),  # older than any listed: the minor's first release
    ("12.7.1", None, False),  # a minor the knowledge base lacks
])
def test_runtime_release(cudart: str, release: Any, exact: bool) -> None:
    found, is_exact = judge.runtime_release(cudart, kb_releases())
    assert (found.release if found else None, is_exact) == (release, exact)


# host driver x measured runtime -> status and message: an update's own driver passes
@pytest.mark.parametrize("driver, cudart, status, detail", [
    ("570.124.06", "12.8.90", "pass", "CUDA runtime 12.8.90 (w) is CUDA 12.8 Update 1: driver 570.124.06 >= "
                                      "570.124.06 (the toolkit's driver)"),
    ("570.86.10", "12.8.57", "pass", "CUDA runtime 12.8.57 (w) is CUDA 12.8 GA: driver 570.86.10 >= 570.26 "
                                     "(the toolkit's driver)"),
    ("570.86.10", "12.8.90", "warn", "CUDA runtime 12.8.90 (w) is CUDA 12.8 Update 1: driver 570.86.10 < "
                                     "570.124.06 but >= 525.60.13: runs under CUDA minor-version compatibility "
                                     "(no PTX JIT of newer code); upgrade the host driver to >= 570.124.06"),
    ("580.65.06", "13.0.48", "pass", "CUDA runtime 13.0.48 (w) is CUDA 13.0 GA: driver 580.65.06 >= 580.65.06 "
                                     "(the toolkit's driver)"),
    ("580.95.05", "13.0.96", "pass", "CUDA runtime 13.0.96 (w) is CUDA 13.0 Update 2: driver 580.95.05 >= "
                                     "580.95.05 (the toolkit's driver)"),
    ("575.51.03", "12.9.37", "pass", "CUDA runtime 12.9.37 (w) is CUDA 12.9 GA: driver 575.51.03 >= 575.51.03 "
                                     "(the toolkit's driver)"),
    ("550.54.14", "12.4.99", "pass", "CUDA runtime 12.4.99 (w) is CUDA 12.4 GA: driver 550.54.14 >= 550.54.14 "
                                     "(the toolkit's driver)"),
    ("595.45.04", "13.2.51", "pass", "CUDA runtime 13.2.51 (w) is CUDA 13.2 GA: driver 595.45.04 >= 595.45.04 "
                                     "(the toolkit's driver)"),
    ("570.124.06", "13.0.96", "fail", "CUDA runtime 13.0.96 (w) is CUDA 13.0 Update 2: driver 570.124.06 is older "
                                      "than 580.65.06: CUDA calls will fail with 'driver too old'; upgrade the host "
                                      "driver to >= 580.95.05"),
    ("570.124.06", "12.8.93", "pass", "CUDA runtime 12.8.93 (w) is not in the knowledge base; judged as 12.8.90 of "
                                      "CUDA 12.8 Update 1: driver 570.124.06 >= 570.124.06 (the toolkit's driver)"),
])
def test_driver_judged_by_the_measured_runtime(driver: str, cudart: str, status: str, detail: str) -> None:
    assert judge.judge_driver_for_runtime(driver, cudart, "w", kb_releases()) == (status, detail)


def test_driver_for_an_unknown_minor_is_not_judged_here() -> None:
    assert judge.judge_driver_for_runtime("580.95.05", "12.7.1", "w", kb_releases()) is None


@pytest.mark.parametrize("driver_cuda, torch_cuda, status", [
    ("13.0", "13.0", "pass"), ("13.1", "12.8", "pass"), ("12.4", "12.8", "warn"), ("12.8", "13.0", "fail"),
])
def test_judge_driver_cuda(driver_cuda: str, torch_cuda: str, status: str) -> None:
    assert judge.judge_driver_cuda(driver_cuda, torch_cuda)[0] == status


ARCHS = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


@pytest.mark.parametrize("capability, arch_list, status, detail", [
    ((9, 0), ARCHS, "pass", "sm_90 in torch arch list [sm_75, sm_80, sm_86, sm_90, sm_100, sm_120]"),
    ((8, 9), ["sm_80", "sm_86"], "pass", "sm_89 runs sm_86 machine code (same major) from [sm_80, sm_86]"),
    ((9, 0), ["sm_80", "sm_86", "compute_86"], "warn",
     "sm_90 not in [sm_80, sm_86, compute_86]: only PTX compute_86 is JIT-compiled at start (slow first "
     "launch); use a torch build that lists sm_90"),
    ((9, 0), ["sm_80", "sm_86"], "fail",
     'GPU sm_90 not in torch arch list [sm_80, sm_86]: "no kernel image is available for execution on '
     'the device" will occur; use a torch build for this GPU'),
    ((9, 0), ["sm_90a"], "pass", "sm_90 in torch arch list [sm_90a]"),
    ((10, 0), ["sm_90a"], "fail",
     'GPU sm_100 not in torch arch list [sm_90a]: "no kernel image is available for execution on '
     'the device" will occur; use a torch build for this GPU'),
])
def test_arch_support(capability: Any, arch_list: Any, status: str, detail: str) -> None:
    assert judge.arch_support(capability, arch_list) == (status, detail)


H200_BF16 = Threshold(784.0, 0.75, 0.9, "TFLOP/s")


@pytest.mark.parametrize("value, threshold, status, pct, detail", [
    (780.0, H200_BF16, "pass", 99.5, "bf16 99.5% of baseline 784 TFLOP/s"),
    (700.0, H200_BF16, "warn", 89.3, "bf16 89.3% of baseline 784 TFLOP/s, below the warn line 0.9x"),
    (500.0, H200_BF16, "fail", 63.8, "bf16 63.8% of baseline 784 TFLOP/s, below the fail line 0.75x"),
    (588.0, H200_BF16, "warn", 75.0, "bf16 75.0% of baseline 784 TFLOP/s, below the warn line 0.9x"),
    (12.0, None, "pass", None, "bf16: no baseline for this GPU; recorded only"),
    (math.nan, H200_BF16, "fail", None, "bf16 measured a non-positive or non-finite rate"),
    (0.0, H200_BF16, "fail", None, "bf16 measured a non-positive or non-finite rate"),
])
def test_judge_throughput(value: float, threshold: Any, status: str, pct: Any, detail: str) -> None:
    verdict = judge.judge_throughput(value, threshold, "bf16")
    assert (verdict.status, verdict.percent_of_baseline, verdict.detail) == (status, pct, detail)
    judged = threshold is not None and value > 0  # nan > 0 is False
    assert verdict.threshold == (pytest.approx(588.0) if judged else None)


@pytest.mark.parametrize("value, limit, status", [
    (1e-7, 1e-5, "pass"), (1e-5, 1e-5, "pass"), (2e-5, 1e-5, "fail"), (math.inf, 1e-5, "fail"),
    (math.nan, 1e-5, "fail"),
])
def test_judge_at_most(value: float, limit: float, status: str) -> None:
    assert judge.judge_at_most(value, limit) == status


@pytest.mark.parametrize("losses, ok, detail", [
    ([1.0, 0.9, 0.8, 0.3, 0.2, 0.1], True, "loss 0.9 -> 0.2 over 6 steps"),
    ([1.0, 1.0, 1.0, 0.95, 0.95, 0.95], False, "loss 1 -> 0.95 over 6 steps"),
    ([1.0, math.nan, 0.1], False, "non-finite loss (NaN/Inf)"),
    ([], False, "non-finite loss (NaN/Inf)"),
])
def test_loss_fell(losses: list[Any], ok: bool, detail: str) -> None:
    assert judge.loss_fell(losses) == (ok, detail)


@pytest.mark.parametrize("solo, per, status", [
    (660.0, [152.0, 152.0, 152.0, 152.0], "pass"),
    (660.0, [120.0, 120.0, 120.0, 120.0], "fail"),  # aggregate 0.73x
    (660.0, [300.0, 280.0, 30.0, 10.0], "fail"),  # one starved: 0.015x < 0.175x
    (660.0, [330.0, 330.0], "pass"),
])
def test_judge_contention(solo: float, per: list[Any], status: str) -> None:
    assert judge.judge_contention(solo, per)[0] == status


def test_judge_contention_detail() -> None:
    assert judge.judge_contention(100.0, [45.0, 45.0])[1] == \
        "2 processes: aggregate 0.90x solo (>= 0.85), slowest 0.450x (>= 0.350)"


@pytest.mark.parametrize("mask, names", [
    (0, ()), (0x4, ("sw_power_cap",)), (0x1 | 0x40, ("gpu_idle", "hw_thermal_slowdown")),
])
def test_decode_throttle_reasons(mask: int, names: tuple[Any, ...]) -> None:
    assert judge.decode_throttle_reasons(mask) == names


@pytest.mark.parametrize("statuses, worst", [
    (["pass", "skip"], "pass"), (["pass", "warn", "skip"], "warn"), (["warn", "fail"], "fail"), ([], "skip"),
])
def test_worst(statuses: list[Any], worst: str) -> None:
    assert judge.worst(statuses) == worst
