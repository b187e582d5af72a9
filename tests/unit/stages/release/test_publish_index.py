"""A tag of several platforms is released as one OCI image index, only when every platform was released: each
platform's image under its own tag, the index over their digests, floating tags on the index, its signature; a
platform that failed keeps the index (and the previous one) where it was, and the release says why."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagesmith.edges import registry
from imagesmith.model import plan
from imagesmith.model.buildreport import BuildRecord, Release
from imagesmith.model.matrix import load
from imagesmith.model.platform import Platform
from imagesmith.model.tags import TagPolicy
from imagesmith.stages.release import publish
from tests.unit.stages.release.test_publish import DATE, FakeEngine, FakeRegistry, World, item, manifest_for

TAG = f"2.9.1-cuda12.8-cudnn9-py3.11-ubuntu22.04-base-{DATE}"
AMD = "2.9.1-cu128-py3.12-debian12-base"
ARM = "2.9.1-cu128-py3.12-debian12-arm64-base"


def twins(arm_verified: bool = True, arm_torch: str = "2.9.1") -> list[publish.Item]:
    """One cell's base target on linux/amd64 and linux/arm64 (the plan gives both one tag: their group)."""
    amd = replace(item("2.9.1"), target=AMD, group="planned-tag")
    arm = item(arm_torch, verified=arm_verified, image_id="sha256:" + hashlib.sha256(b"arm64").hexdigest())
    return [amd, replace(arm, target=ARM, platform=Platform.ARM64, group="planned-tag")]


@pytest.fixture()
def world(tmp_path: Path) -> World:
    reg = FakeRegistry()
    return World(reg, FakeEngine(reg), tmp_path, [])


def index_digests(world: World, tag: str) -> list[str]:
    held = world.reg.repo_tags[tag]
    assert held.media_type == registry.OCI_INDEX
    return [m["digest"] for m in json.loads(held.raw)["manifests"]]


def test_both_platforms_released_make_one_index_and_its_floating_tags(world: World) -> None:
    signed: list[str] = []

    def sign(digest: str) -> dict[str, Any]:
        signed.append(digest)
        return {"subject": digest}

    data = world.release(twins(), index_evidence=sign)

    assert sorted(world.engine.pushes) == [f"{TAG}-amd64", f"{TAG}-arm64"]  # each platform's image under its own tag
    amd, arm = data["targets"]
    assert (amd["platform"], arm["platform"]) == ("linux/amd64", "linux/arm64")
    assert amd["index"] == arm["index"] == TAG
    [index] = data["indexes"]
    assert index["action"] == "pushed" and index["previous"] is None
    assert index_digests(world, TAG) == [amd["digest"], arm["digest"]]  # pinned: the digests just pushed and read back
    assert index["digest"] == world.reg.digest_of(TAG) == amd["index_digest"] == arm["index_digest"]
    assert {f["tag"]: f["digest"] for f in data["floating"]} == {"v2.9-base": index["digest"], "latest": index["digest"]}
    assert world.reg.digest_of("latest") == index["digest"]  # the floating tag serves the index, not one platform
    assert index["floating"] == ["latest", "v2.9-base"]  # said on the index entry they serve
    assert {p: e["tag"] for p, e in index["platforms"].items()} == {"linux/amd64": f"{TAG}-amd64", "linux/arm64": f"{TAG}-arm64"}
    assert signed == [index["digest"]] and index["evidence"] == {"subject": index["digest"]}
    assert {(r["reference"].rpartition(":")[2], r["kind"]) for r in data["pushed"]} >= {(TAG, "index")}
    assert data["ok"] is True


def test_a_platform_that_failed_keeps_the_previous_index_and_no_floating_tag_moves(world: World) -> None:
    world.release(twins())  # yesterday's release (same date here): the index and latest are there
    before = {t: str(world.reg.digest_of(t)) for t in (TAG, "latest", "v2.9-base")}
    arm_failed = [twins()[0], replace(twins(arm_verified=False)[1], image_id="sha256:" + "b" * 64)]

    data = world.release(arm_failed)

    [index] = data["indexes"]
    assert index["action"] == "held" and index["digest"] is None and index["previous"] == before[TAG]
    assert index["reason"] == (f"not written: linux/arm64 ({ARM}) not-verified: verification failed; not tagged, not pushed; "
                               f"{TAG} keeps its previous index {before[TAG][:19]}")
    assert {t: world.reg.digest_of(t) for t in before} == before  # nothing the users pull moved
    assert [f["action"] for f in data["floating"]] == [] and index["floating"] == []
    assert data["ok"] is False


def test_without_a_previous_index_a_failed_platform_publishes_none(world: World) -> None:
    data = world.release(twins(arm_verified=False))
    assert TAG not in world.reg.repo_tags and f"{TAG}-amd64" in world.reg.repo_tags
    assert data["indexes"][0]["reason"].endswith("no index is published for it until every platform is released")
    assert data["floating"] == [] and "latest" not in world.reg.repo_tags


def test_a_rerun_finds_the_index_unchanged_and_writes_nothing(world: World) -> None:
    first = world.release(twins())
    world.reg.writes.clear()
    again = world.release(twins())
    assert [t["status"] for t in again["targets"]] == ["unchanged", "unchanged"]
    assert again["indexes"][0]["action"] == "unchanged" and again["indexes"][0]["digest"] == first["indexes"][0]["digest"]
    assert again["indexes"][0]["floating"] == ["latest", "v2.9-base"]  # already there: still the index's
    assert world.reg.writes == [] and again["ok"] is True


def test_an_index_tag_holding_other_images_is_never_overwritten(world: World) -> None:
    world.reg.repo_tags[TAG] = manifest_for("sha256:" + "c" * 64)  # an earlier single-platform image under the tag
    held = world.reg.digest_of(TAG)
    data = world.release(twins())
    assert data["indexes"][0]["action"] == "failed"
    assert data["indexes"][0]["reason"].startswith(f"reg.test:5000/ml/pytorch:{TAG} already exists with other images")
    assert world.reg.digest_of(TAG) == held and data["ok"] is False


def test_platforms_that_measured_different_versions_make_no_index(world: World) -> None:
    data = world.release(twins(arm_torch="2.9.0"))
    assert [t["status"] for t in data["targets"]] == ["failed", "failed"]
    assert data["targets"][1]["error"].startswith("the platforms of one image index measured different versions (linux/amd64 "
                                                  "'2.9.1-cuda12.8-cudnn9-py3.11-ubuntu22.04-base-20261130', linux/arm64 '2.9.0-")
    assert world.engine.pushes == [] and data["indexes"] == []


def test_the_fleet_gate_holding_one_platform_holds_the_index_floating_tags(world: World) -> None:
    items = twins()
    arm64 = manifest_for(items[1].image_id or "").digest  # what the engine double's push of the arm64 image answers

    def gate(digest: str | None) -> str | None:
        return "held back by the fleet: class gh200 has no fleet result" if digest == arm64 else None

    data = world.release(items, floating_gate=gate)
    assert data["indexes"][0]["action"] == "pushed"
    assert {f["tag"]: f["action"] for f in data["floating"]} == {"v2.9-base": "kept", "latest": "kept"}
    assert all("class gh200 has no fleet result" in f["reason"] for f in data["floating"])
    assert "latest" not in world.reg.repo_tags


def test_a_single_platform_tag_stays_a_plain_image(world: World) -> None:
    data = world.release([replace(item("2.9.1"), group="planned-tag")], TagPolicy())
    assert data["indexes"] == [] and world.engine.pushes == [TAG]
    assert data["targets"][0]["index"] is None


def test_release_markdown_names_each_index_and_why_one_was_held(world: World) -> None:
    world.release(twins())
    assert "| latest v2.9-base |" in (world.out / "release.md").read_text()  # the index's floating tags
    world.release(twins(arm_verified=False))
    text = (world.out / "release.md").read_text()
    assert "## Image indexes" in text
    assert f"| `{TAG}` | held | `-` | linux/amd64 sha256:" in text
    assert f"- image index {TAG}: not written: linux/arm64 " in text


def test_targets_of_one_platform_sharing_a_plan_tag_are_no_index(world: World) -> None:
    one, two = item("2.9.1", "base"), item("2.9.1", "cv")
    data = world.release([replace(one, group="g"), replace(two, group="g")], TagPolicy(immutable="{torch}-{date}"))
    assert [t["status"] for t in data["targets"]] == ["pushed", "failed"] and data["indexes"] == []


def test_the_items_of_a_build_carry_each_target_platform_and_its_plan_tag() -> None:
    matrix = load(Path("examples/multiarch.yaml"))
    targets = plan.expand(matrix, DATE).targets
    records = [BuildRecord(t, Release.of(matrix, DATE), "built", f"sha256:{t.id}") for t in targets]
    items = publish.items_from(records, {})
    assert [(i.platform, i.group) for i in items] == [(t.platform, t.tag) for t in targets]
    assert {i.platform for i in items} == set(Platform) and len({i.group for i in items}) == 1  # one index, two platforms


def test_a_platform_tag_docker_cannot_take_fails_that_platform_and_so_the_index(world: World) -> None:
    long = TagPolicy(immutable="{torch}-" + "x" * 109 + "-{date}")  # 124 characters: "-amd64", "-arm64" make 130
    data = world.release(twins(), long)
    assert [t["status"] for t in data["targets"]] == ["failed", "failed"]
    assert "is 130 characters; Docker allows 128" in data["targets"][1]["error"] and data["targets"][1]["error"].endswith(
        "(tags.immutable in the matrix, with the platform's suffix)")
    assert world.engine.pushes == [] and data["indexes"][0]["action"] == "held"


def test_a_verification_of_another_platform_s_image_releases_neither_platform(world: World) -> None:
    """What decides is the platform the verify report (the signed one, in publish) says it ran, not the build record."""
    amd, arm = twins()
    assert arm.evidence is not None
    wrong = replace(arm, evidence=replace(arm.evidence, platform="linux/amd64", host="linux/amd64"))
    data = world.release([amd, wrong])
    assert data["targets"][1]["status"] == "not-verified" and data["targets"][1]["error"] == (
        f"its verification ran a linux/amd64 image, but {ARM} is built for linux/arm64; not released: verify the "
        "linux/arm64 image")
    assert data["indexes"][0]["action"] == "held" and TAG not in world.reg.repo_tags
    native = replace(arm, evidence=replace(arm.evidence, platform="linux/arm64/v8", host="linux/arm64"))
    assert world.release([amd, native])["ok"] is True  # arm64's v8 variant is linux/arm64
