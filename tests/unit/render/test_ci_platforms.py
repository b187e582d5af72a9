"""The CI emitters with platforms: each job names its target's platform and asks for a runner of its architecture."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from imagesmith.errors import UserError
from imagesmith.model import matrix, plan
from imagesmith.render import ci
from tests.conftest import ROOT
from tests.unit.render.test_ci import check_jsonschema, plan_of

STAGE = "harbor.example.com/ml/staging"
DATE = "20261130"
AMD, ARM = "2.9.1-cu128-py3.12-debian12-base", "2.9.1-cu128-py3.12-debian12-arm64-base"


def multiarch() -> plan.Plan:
    return plan.expand(matrix.load(ROOT / "examples" / "multiarch.yaml"), DATE)


def test_gitlab_jobs_name_their_platform_and_arm64_ones_ask_for_an_arm64_runner() -> None:
    doc = ci.gitlab_pipeline(multiarch(), ci.Options("examples/multiarch.yaml", STAGE))
    assert doc[f"build:{AMD}"]["variables"] == {"PLATFORM": "linux/amd64", "ARCH": "amd64"}
    assert doc[f"build:{ARM}"]["variables"] == {"PLATFORM": "linux/arm64", "ARCH": "arm64"}
    assert doc[f"verify:{ARM}"]["variables"] == {"PLATFORM": "linux/arm64", "ARCH": "arm64"}
    assert doc[f"build:{AMD}"]["tags"] == ["self-hosted", "linux", "docker"]  # as before platforms
    assert doc[f"build:{ARM}"]["tags"] == ["self-hosted", "linux", "docker", "arm64"]
    assert doc[f"verify:{AMD}"]["tags"] == ["self-hosted", "linux", "gpu"]
    assert doc[f"verify:{ARM}"]["tags"] == ["self-hosted", "linux", "gpu", "arm64"]


def test_gitlab_emulated_arm64_builds_run_on_the_build_runners_but_verify_stays_native() -> None:
    o = ci.Options("examples/multiarch.yaml", STAGE, build_tags=("docker", "arm64"), emulated=("linux/arm64",))
    doc = ci.gitlab_pipeline(multiarch(), o)
    assert doc[f"build:{ARM}"]["tags"] == ["docker", "arm64"]  # named already: not twice
    doc = ci.gitlab_pipeline(multiarch(), ci.Options("examples/multiarch.yaml", STAGE, emulated=("linux/arm64",)))
    assert doc[f"build:{ARM}"]["tags"] == ["self-hosted", "linux", "docker"]
    assert doc[f"verify:{ARM}"]["tags"] == ["self-hosted", "linux", "gpu", "arm64"]  # a GPU is not reached through QEMU


@pytest.mark.parametrize("value, message", [
    ("arm64", "the emulated value 'arm64' names no OS; write linux/arm64 (platforms: linux/amd64, linux/arm64)"),
    ("linux/arm/v7", "the emulated value 'linux/arm/v7' is not a platform imagesmith builds; platforms: linux/amd64, linux/arm64"),
])
def test_an_emulated_value_is_a_platform(value: str, message: str) -> None:
    with pytest.raises(UserError) as info:
        ci.gitlab_pipeline(multiarch(), ci.Options("m.yaml", STAGE, emulated=(value,)))
    assert str(info.value) == message


def test_gitlab_platform_variables_are_written_literally() -> None:
    t = multiarch().targets[1]
    assert ci.platform_variables(t) == {"PLATFORM": ci.literal("linux/arm64"), "ARCH": ci.literal("arm64")}
    text = ci.gitlab_document(multiarch(), ci.Options("examples/multiarch.yaml", STAGE), "0")
    assert yaml.safe_load(text)[f"build:{ARM}"]["variables"]["PLATFORM"] == "linux/arm64"


def test_gitlab_multiarch_child_pipeline_validates_against_gitlabs_schema(tmp_path: Path) -> None:
    text = ci.gitlab_document(multiarch(), ci.Options("examples/multiarch.yaml", STAGE), "0")
    done = check_jsonschema("vendor.gitlab-ci", {"multiarch": text}, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_github_entries_carry_platform_arch_and_the_runner_label() -> None:
    doc = ci.github_matrix(multiarch())
    assert doc["depth0"]["include"] == [
        {"target": AMD, "parent": "", "layer": "base", "cell": AMD[:-5], "platform": "linux/amd64", "arch": "amd64", "runner_arch": "X64"},
        {"target": ARM, "parent": "", "layer": "base", "cell": ARM[:-5], "platform": "linux/arm64", "arch": "arm64", "runner_arch": "ARM64"}]
    assert [e["runner_arch"] for e in doc["verify"]["include"]] == ["X64", "ARM64"]
    assert {e["platform"] for e in ci.github_matrix(plan_of("local"))["verify"]["include"]} == {"linux/amd64"}


def test_github_multiarch_matrix_validates_as_a_workflow_matrix(tmp_path: Path) -> None:
    doc = ci.github_matrix(multiarch())
    job = {"runs-on": ["self-hosted", "linux", "docker", "${{ matrix.runner_arch }}"], "strategy": {"matrix": doc["depth0"]},
           "steps": [{"run": "true"}]}
    done = check_jsonschema("vendor.github-workflows", {"m": {"on": "push", "jobs": {"build": job}}}, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
