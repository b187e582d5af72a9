"""A fleet class's platform (a GH200 class: linux/arm64): its runs are native there. Kubernetes selects its nodes
by kubernetes.io/arch; a report from an emulated run, or from another machine, does not pass the cell."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import ValidationError
from imagesmith.model import fleet as config
from imagesmith.model.platform import Platform
from imagesmith.stages.fleet import kubernetes, runner
from tests.doubles import verify_report
from tests.unit.stages.fleet.test_fleet_kubernetes import as_dict, dig

GH200 = """\
classes:
  gh200:
    gpu: NVIDIA GH200 480GB
    gpus: 1
    platform: linux/arm64
    kubernetes: {namespace: ml-verify, node_selector: {nvidia.com/gpu.product: NVIDIA-GH200-480GB}}
"""


def test_a_class_names_its_platform_and_kubernetes_selects_those_nodes() -> None:
    fleet = config.parse(GH200, Path("fleet.yaml"))
    assert fleet.classes[0].platform is Platform.ARM64
    assert dig(as_dict(GH200), "spec.template.spec.nodeSelector") == {
        "nvidia.com/gpu.product": "NVIDIA-GH200-480GB", kubernetes.ARCH_LABEL: "arm64"}
    plain = "classes:\n  cpu:\n    gpus: 0\n    kubernetes: {namespace: ci}\n"
    assert config.parse(plain, Path("fleet.yaml")).classes[0].platform is Platform.AMD64
    assert dig(as_dict(plain), "spec.template.spec.nodeSelector") is None  # linux/amd64: as before


@pytest.mark.parametrize("value, why", [
    ("arm64", "'arm64' names no OS; write linux/arm64"),
    ("linux/riscv64", "'linux/riscv64' is not a platform imagesmith builds"),
    ("[linux/arm64]", "expected one platform"),
])
def test_a_bad_class_platform_is_refused_where_it_is_written(value: str, why: str) -> None:
    with pytest.raises(ValidationError) as err:
        config.parse(GH200.replace("platform: linux/arm64", f"platform: {value}"), Path("fleet.yaml"))
    assert any("classes.gh200.platform" in str(p) and why in str(p) for p in err.value.problems), err.value.problems


def report(machine: str | None, emulation: dict[str, str] | None = None) -> dict[str, Any]:
    env: dict[str, Any] = {"gpus": [{"name": "NVIDIA GH200 480GB"}]}
    if machine:
        env["machine"] = machine
    return {"checks": [{"id": "versions.torch", "status": "pass"}], "environment": env, "emulation": emulation}


@pytest.mark.parametrize("doc, problems", [
    (report("aarch64"), []),
    (report(None), []),  # a report from before the payload said its machine
    (report("x86_64"), ["the job ran on x86_64, not on the class's linux/arm64 (aarch64): check the placement"]),
    (report("aarch64", {"image": "linux/arm64", "host": "linux/amd64", "by": "qemu-user through binfmt_misc"}),
     ["the job ran emulated (linux/arm64 on a linux/amd64 host (qemu-user through binfmt_misc)); a fleet class "
      "verifies natively on its linux/arm64 nodes"]),
])
def test_a_cell_passes_only_from_a_native_run_on_the_class_platform(doc: dict[str, Any], problems: list[str]) -> None:
    klass = config.parse(GH200, Path("fleet.yaml")).classes[0]
    assert runner.judge_report("sha256:" + "ab" * 32, klass, verify_report(doc)) == problems
