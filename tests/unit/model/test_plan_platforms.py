"""The plan of a multi-platform matrix: target names, CUDA sets and cache keys per platform, tags and image indexes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import ValidationError
from imagesmith.model import matrix, plan, tags
from imagesmith.model.platform import Platform
from imagesmith.stages.building import cudabuild
from tests.conftest import ROOT
from tests.unit.model.test_matrix_platform import BASE

AMD64, ARM64 = Platform.AMD64, Platform.ARM64
DATE = "20261130"
ONE = BASE + "layers:\n  base: {}\n  cv: {packages: [torchvision]}\n"  # the one cell of test_matrix_platform
BOTH = ONE.replace("  os: [debian12]\n", "  os: [debian12]\n  platform: [linux/amd64, linux/arm64]\n")


def expand(write_matrix: Any, text: str) -> plan.Plan:
    return plan.expand(matrix.load(write_matrix(text)), DATE)


def test_linux_amd64_targets_are_today_s_and_linux_arm64_ones_are_named_apart(write_matrix: Any) -> None:
    today = expand(write_matrix, ONE)
    both = expand(write_matrix, BOTH)
    amd64 = [t for t in both.targets if t.platform is AMD64]
    assert amd64 == list(today.targets)  # same ids, images, tags, CUDA set: an amd64 target is what it was
    assert [t.id for t in both.targets] == [
        "2.9.1-cu128-py3.12-debian12-base", "2.9.1-cu128-py3.12-debian12-arm64-base",
        "2.9.1-cu128-py3.12-debian12-cv", "2.9.1-cu128-py3.12-debian12-arm64-cv"]
    arm = both.by_id()["2.9.1-cu128-py3.12-debian12-arm64-cv"]
    assert (arm.platform, arm.parent, arm.cell, arm.image) == (
        ARM64, "2.9.1-cu128-py3.12-debian12-arm64-base", "2.9.1-cu128-py3.12-debian12-arm64",
        "imagesmith/pytorch:2.9.1-cu128-py3.12-debian12-arm64-cv")
    assert arm.versions == both.by_id()["2.9.1-cu128-py3.12-debian12-cv"].versions  # one image, two machines


def test_cuda_sets_and_their_cache_keys_differ_by_platform(write_matrix: Any) -> None:
    bases = {t.platform: t for t in expand(write_matrix, BOTH).targets if t.parent is None}
    amd, arm = bases[AMD64].cuda_set, bases[ARM64].cuda_set
    assert amd is not None and arm is not None
    assert amd == expand(write_matrix, ONE).targets[0].cuda_set  # linux/amd64's set id is unchanged
    assert arm.pins == amd.pins and arm.platform is ARM64 and amd.platform is AMD64
    assert arm.id.startswith("cu128-arm64-") and amd.id.startswith("cu128-") and arm.id != amd.id
    assert plan.cuda_image(bases[ARM64], "r") != plan.cuda_image(bases[AMD64], "r")
    assert plan.cuda_image(bases[ARM64], "r").startswith("r:cuda-cu128-arm64-")
    base_id = "sha256:" + "0" * 64  # even one base image ID (an engine handing out the wrong machine's base)
    keys = {cudabuild.cache_key(base_id, s, 1764460800) for s in (amd, arm)}
    assert len(keys) == 2
    unplatformed = dataclasses.replace(arm, platform=AMD64)
    assert cudabuild.cache_key(base_id, unplatformed, 1) == cudabuild.cache_key(base_id, amd, 1)  # amd64 keys: as before


def test_index_groups_put_each_tag_s_targets_per_platform_together(write_matrix: Any) -> None:
    p = expand(write_matrix, BOTH)
    groups = p.index_groups()
    assert [(g.tag, g.platforms) for g in groups] == [
        ("2.9.1-cuda12.8-cudnn9-py3.12-debian12-base-20261130", (AMD64, ARM64)),
        ("2.9.1-cuda12.8-cudnn9-py3.12-debian12-cv-20261130", (AMD64, ARM64))]
    assert groups[0].target(ARM64) is p.by_id()["2.9.1-cu128-py3.12-debian12-arm64-base"]
    assert groups[0].target(AMD64) is p.by_id()["2.9.1-cu128-py3.12-debian12-base"]
    one = expand(write_matrix, ONE).index_groups()
    assert [(len(g.targets), g.platforms) for g in one] == [(1, (AMD64,)), (1, (AMD64,))]
    assert one[0].target(ARM64) is None


def test_an_arch_field_gives_each_platform_its_own_tag(write_matrix: Any) -> None:
    p = expand(write_matrix, BOTH + "tags:\n  immutable: '{torch}-{accel}-{arch}-{layer}'\n")
    assert [t.tag for t in p.targets] == ["2.9.1-cuda12.8-cudnn9-amd64-base", "2.9.1-cuda12.8-cudnn9-arm64-base",
                                          "2.9.1-cuda12.8-cudnn9-amd64-cv", "2.9.1-cuda12.8-cudnn9-arm64-cv"]
    assert all(len(g.targets) == 1 for g in p.index_groups())
    assert p.targets[1].facts()["arch"] == "arm64" and p.targets[0].facts()["arch"] == "amd64"


def test_one_tag_per_target_of_a_platform_is_still_required(write_matrix: Any) -> None:
    text = BOTH.replace('cuda: ["12.8"]', 'cuda: ["12.8", cpu]') + "tags:\n  immutable: '{torch}-{layer}'\n"
    with pytest.raises(ValidationError) as info:
        expand(write_matrix, text)
    assert str(info.value.problems[0]) == (
        "matrix.yaml:12 tags.immutable: tag '2.9.1-base' is given to both 2.9.1-cpu-py3.12-debian12-base and "
        "2.9.1-cu128-py3.12-debian12-base; add fields such as {cuda}, {python}, {os}, {layer} to tags.immutable")


def test_a_tag_may_not_join_two_different_images_in_one_index(write_matrix: Any) -> None:
    text = ONE.replace('cuda: ["12.8"]', 'cuda: ["12.6"]') + "tags:\n  immutable: '{torch}-{layer}'\n"
    text = text.replace("layers:", "  include:\n    - {torch: '2.9', cuda: '12.8', python: '3.12', os: debian12, platform: linux/arm64}\nlayers:")
    with pytest.raises(ValidationError) as info:
        expand(write_matrix, text)
    assert str(info.value.problems[0]) == (
        "matrix.yaml:13 tags.immutable: tag '2.9.1-base' would join 2.9.1-cu126-py3.12-debian12-base (linux/amd64) and "
        "2.9.1-cu128-py3.12-debian12-arm64-base (linux/arm64) in one image index, but they differ in cuda; "
        "add fields such as {cuda}, {python}, {os}, {layer} to tags.immutable (or {arch} for a tag per platform)")


def test_floating_tags_go_to_the_newest_image_of_each_platform(write_matrix: Any) -> None:
    text = BOTH.replace('torch: ["2.9"]', 'torch: ["2.9", "2.10"]') + "tags:\n  floating: ['v{torch_major}-{layer}']\n"
    p = expand(write_matrix, text)
    assert {t.id: t.floating for t in p.targets if t.floating} == {
        "2.10.0-cu128-py3.12-debian12-base": ("v2-base",), "2.10.0-cu128-py3.12-debian12-arm64-base": ("v2-base",),
        "2.10.0-cu128-py3.12-debian12-cv": ("v2-cv",), "2.10.0-cu128-py3.12-debian12-arm64-cv": ("v2-cv",)}


def test_plan_json_names_every_platform_and_every_tag_a_release_pushes(write_matrix: Any, tmp_path: Path) -> None:
    p = expand(write_matrix, BOTH + "tags:\n  floating: [{tag: latest, when: {layer: base}}]\n")
    data = plan.to_json(p)
    by_id = {t["id"]: t for t in data["targets"]}
    amd, arm = by_id["2.9.1-cu128-py3.12-debian12-base"], by_id["2.9.1-cu128-py3.12-debian12-arm64-base"]
    assert amd["platform"] == amd["cuda_set"]["platform"] == "linux/amd64"  # the default platform said too
    assert arm["platform"] == arm["cuda_set"]["platform"] == "linux/arm64"
    tag = amd["tag"]
    assert [(x["kind"], x["tag"]) for x in data["tags"] if tag in x["tag"] or x.get("of") == tag] == [
        ("image", f"{tag}-amd64"), ("image", f"{tag}-arm64"), ("index", tag), ("floating", "latest")]
    assert {x["tag"]: x.get("platform") for x in data["tags"] if x["kind"] == "image"}[f"{tag}-arm64"] == "linux/arm64"
    plan.write(p, tmp_path / "plan.json")
    assert plan.read(tmp_path / "plan.json") == p
    assert json.loads((tmp_path / "plan.json").read_text()) == json.loads(json.dumps(data))
    old = {k: v for k, v in amd.items() if k != "platform"} | {"cuda_set": {k: v for k, v in amd["cuda_set"].items() if k != "platform"}}
    assert plan.target_from_json(old) == p.by_id()[amd["id"]]  # a plan written before platforms were said: linux/amd64


def test_a_single_platform_plan_pushes_each_tag_as_it_is(write_matrix: Any) -> None:
    data = plan.to_json(expand(write_matrix, ONE))
    assert [(x["kind"], x["tag"], x.get("platform")) for x in data["tags"]] == [
        ("image", t["tag"], "linux/amd64") for t in data["targets"]]


def test_a_platform_in_plan_json_is_read_by_its_grammar() -> None:
    t = plan.to_json(plan.expand(matrix.load(ROOT / "examples" / "multiarch.yaml"), DATE))["targets"][1]
    assert plan.target_from_json(t).platform is ARM64
    with pytest.raises(ValueError):
        plan.target_from_json(t | {"platform": "linux/arm/v7"})


def test_tag_facts_name_the_architecture() -> None:
    versions = {"torch": "2.9.1", "cuda": "12.8", "python": "3.12", "os": "debian12", "variant": "cu128"}
    assert tags.facts(versions, "base", "c", "cuda12.8")["arch"] == "amd64"  # no platform named: linux/amd64
    assert tags.facts(versions, "base", "c", "cuda12.8", ARM64)["arch"] == "arm64"


def test_the_multiarch_example_builds_both_platforms_of_one_cell() -> None:
    p = plan.expand(matrix.load(ROOT / "examples" / "multiarch.yaml"), DATE)
    assert [(t.id, str(t.platform)) for t in p.targets] == [
        ("2.9.1-cu128-py3.12-debian12-base", "linux/amd64"), ("2.9.1-cu128-py3.12-debian12-arm64-base", "linux/arm64")]
    assert [g.platforms for g in p.index_groups()] == [(AMD64, ARM64)]


def test_the_plan_table_shows_a_platform_column_only_when_there_is_a_choice() -> None:
    from click.testing import CliRunner

    from imagesmith.cli import cli

    root = Path(__file__).resolve().parents[3]
    wide = {"COLUMNS": "300"}  # no cell wrapped
    several = CliRunner(env=wide).invoke(cli, ["plan", "-m", str(root / "examples" / "multiarch.yaml"), "--date", "20261201"])
    assert several.exit_code == 0, several.output
    header = next(line for line in several.output.splitlines() if line.startswith("| target"))
    assert "| platform " in header
    assert "2.9.1-cu128-py3.12-debian12-arm64-base" in several.output and several.output.count("linux/arm64") == 1
    single = CliRunner(env=wide).invoke(cli, ["plan", "-m", str(root / "matrix.yaml"), "--date", "20261201"])
    assert single.exit_code == 0, single.output
    assert "| platform " not in next(line for line in single.output.splitlines() if line.startswith("| target"))
