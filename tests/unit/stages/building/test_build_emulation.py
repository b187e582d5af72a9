"""A measurement that failed under emulation says where the image can be measured (issue 24): torch 2.14.1's
aarch64 wheel aborts at import under QEMU on an amd64 host, reading MIDR_EL1 from sysfs."""

from __future__ import annotations

from imagesmith.stages.building.measured import emulation_hint

MIDR = ("measuring the image failed (exit -1): /__w/pytorch/pytorch/third_party/ideep/mkl-dnn/third_party/xbyak_aarch64/"
        "src/util_impl_linux.h, 444: Can't open MIDR_EL1 sysfs entry")


def test_torch_that_cannot_start_under_qemu_is_named_with_the_native_runner_to_use() -> None:
    assert emulation_hint(MIDR, "linux/arm64", "linux/amd64") == (
        " [the linux/arm64 image ran under emulation; torch cannot start under QEMU on this linux/amd64 host (oneDNN's "
        "xbyak_aarch64 reads MIDR_EL1 from sysfs, which only an arm64 kernel has): build or measure it on a native arm64 "
        "runner (docs/matrix.md, Native and emulated builds)]")


def test_any_other_emulated_failure_names_the_native_runner_and_a_native_one_adds_nothing() -> None:
    assert emulation_hint("exit 1: boom", "linux/arm64", "linux/amd64").startswith(
        " [the linux/arm64 image ran under emulation: build or measure it on a native arm64 runner")
    assert emulation_hint(MIDR, "linux/amd64", "linux/amd64") == ""
    assert emulation_hint(MIDR, "", "linux/amd64") == ""
