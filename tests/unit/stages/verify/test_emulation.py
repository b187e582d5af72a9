"""An image of another platform than the engine's runs under emulation: the report says so, the run is CPU mode,
and nothing it ran counts as GPU-verified (a GPU required of it is refused with what to do instead)."""

from __future__ import annotations

from typing import Any

import pytest

from imagesmith.errors import UserError
from imagesmith.model import policy
from imagesmith.stages.verify import incontainer, verify
from tests.doubles import EngineBase, verify_report

OPTIONS = verify.VerifyOptions()
ARM_ON_AMD = {"image": "linux/arm64", "host": "linux/amd64", "by": incontainer.EMULATOR}


class Info(EngineBase):
    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    def info(self) -> dict[str, Any]:
        return self.doc


@pytest.mark.parametrize("doc, platform", [
    ({"OSType": "linux", "Architecture": "x86_64"}, "linux/amd64"),
    ({"OSType": "linux", "Architecture": "aarch64"}, "linux/arm64"),
    ({}, "linux/"),
])
def test_the_engines_platform_in_oci_words(doc: dict[str, Any], platform: str) -> None:
    assert incontainer.engine_platform(Info(doc)) == platform


@pytest.mark.parametrize("image, host, expected", [
    ("linux/arm64", "linux/amd64", ARM_ON_AMD),
    ("linux/amd64", "linux/amd64", None),
    ("linux/arm64", "linux/arm64", None),
    ("linux", "linux/amd64", None),  # the image config names no architecture: nothing to compare
    ("linux/arm64", "linux/", None),  # the engine did not say
])
def test_emulation_is_named_only_when_the_platforms_differ(image: str, host: str, expected: dict[str, str] | None) -> None:
    assert incontainer.emulation("reg/x@sha256:1", image, host, OPTIONS) == expected


def test_a_gpu_required_of_an_emulated_run_is_refused_with_what_to_do() -> None:
    with pytest.raises(UserError) as err:
        incontainer.emulation("reg/x@sha256:1", "linux/arm64", "linux/amd64", verify.VerifyOptions(require_gpu=True))
    assert str(err.value) == ("reg/x@sha256:1 is a linux/arm64 image: on this linux/amd64 engine it runs only under "
                              "emulation, never on a GPU; verify it on a native arm64 GPU runner (a fleet class on "
                              "linux/arm64), or leave out --require-gpu to check it in CPU mode under emulation")


def report(mode: str, cuda: str | None, emulation: dict[str, str] | None) -> dict[str, Any]:
    gpus = [{"name": "NVIDIA H200"}] if mode == "gpu" else []
    return {"checks": [{"id": "versions.torch", "status": "pass"}, {"id": "gpu.devices", "status": "pass"}],
            "mode": {"mode": mode, "gpus": len(gpus)}, "environment": {"cuda": cuda, "gpus": gpus}, "emulation": emulation,
            "sharing": {"exclusive": True, "allowed": False, "foreign": []}}


def test_nothing_run_under_emulation_is_gpu_verified() -> None:
    assert policy.evidence(verify_report(report("gpu", "12.8", None))).gpu_verified  # the same report, native: verified
    emulated = policy.evidence(verify_report(report("gpu", "12.8", ARM_ON_AMD)))  # a report that claims a GPU under emulation
    assert not emulated.gpu_verified
    assert emulated.describe() == ("not GPU-verified: emulated: linux/arm64 on a linux/amd64 host "
                                   "(qemu-user through binfmt_misc), in CPU mode")
    assert emulated.short() == "not GPU-verified (emulated linux/arm64, CPU mode)"


@pytest.mark.parametrize("cuda, cell", [("12.8", "CPU, emulated linux/arm64: not GPU-verified"),
                                         (None, "CPU, emulated linux/arm64")])
def test_tables_say_emulated(cuda: str | None, cell: str) -> None:
    assert policy.how_verified(verify_report(report("cpu", cuda, ARM_ON_AMD))) == cell
    assert "emulated" not in policy.how_verified(verify_report(report("cpu", cuda, None)))
