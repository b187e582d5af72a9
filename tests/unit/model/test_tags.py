"""Tag rendering and floating-tag assignment (pure)."""

from __future__ import annotations

import pytest

from imagesmith.errors import ValidationError
from imagesmith.model import tags
from imagesmith.model.tags import FloatingTag, TagPolicy


def fields(torch: str, cuda: str = "12.8", python: str = "3.11", os: str = "ubuntu22.04", layer: str = "base") -> dict[str, str]:
    versions = {"torch": torch, "cuda": cuda, "cudnn": "9.10.2.21", "nccl": "2.27.5", "python": python, "os": os, "variant": "cu128"}
    return tags.facts(versions, layer, "cell", f"cuda{cuda}-cudnn9") | {"date": "20261130"}


def test_immutable_tag_from_the_default_template() -> None:
    template = TagPolicy().immutable
    assert tags.render(template, fields("2.9.1", layer="cv")) == "2.9.1-cuda12.8-cudnn9-py3.11-ubuntu22.04-cv-20261130"


def test_local_version_label_never_reaches_a_tag() -> None:
    assert tags.render("{torch}", fields("2.13.0+cpu")) == "2.13.0"


@pytest.mark.parametrize("tag, problem", [
    ("ok-tag_1.2", []),
    ("-bad", ["tag '-bad' is not a valid Docker tag ([A-Za-z0-9_.-], not starting with . or -)"]),
    ("a" * 129, [f"tag '{'a' * 129}' is 129 characters; Docker allows 128"]),
    ("has/slash", ["tag 'has/slash' is not a valid Docker tag ([A-Za-z0-9_.-], not starting with . or -)"]),
])
def test_tag_problems(tag: str, problem: list[str]) -> None:
    assert tags.tag_problems(tag) == problem


@pytest.mark.parametrize("pep440, semver", [
    ("2.9.1", "2.9.1"), ("2.10.0rc1", "2.10.0-rc.1"), ("2.11.0a0", "2.11.0-a.0"), ("2.11.0b2", "2.11.0-b.2"),
    ("2.11.0-rc.3", "2.11.0-rc.3"), ("2.11.0c1", "2.11.0-rc.1"),  # PEP 440 spellings, normalised by packaging
    ("2.12.0.dev20260101", "2.12.0-dev.20260101"), ("2.12.0rc1.dev3", "2.12.0-rc.1.dev.3"), ("2.9", "2.9.0"), ("3", "3.0.0"),
    ("2.9.1+cu128", "2.9.1+cu128"), ("2.9.1+cpu.cxx11.abi", "2.9.1+cpu.cxx11.abi"),
    ("2.9.1.post1", "2.9.1+post.1"), ("2.9.1.post2+cu130", "2.9.1+post.2.cu130"), ("v2.9.1", "2.9.1"),
])
def test_pep440_to_semver(pep440: str, semver: str) -> None:
    assert str(tags.to_semver(pep440)) == semver


@pytest.mark.parametrize("pep440, message", [
    ("2.9.1.1", "not a release version: '2.9.1.1' (semver has three numbers and no epoch)"),
    ("1!2.9.1", "not a release version: '1!2.9.1' (semver has three numbers and no epoch)"),
    ("nightly", "not a release version: 'nightly'"),
    ("", "not a release version: ''"),
])
def test_not_semver(pep440: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        tags.to_semver(pep440)
    assert str(err.value) == message


def test_semver_order_follows_pep440_for_releases_and_pre_releases() -> None:
    order = ["2.9.0", "2.10.0a0", "2.10.0b1", "2.10.0rc1", "2.10.0rc2", "2.10.0", "2.10.1", "2.11.0"]
    assert sorted(order, key=tags.to_semver) == order
    assert tags.to_semver("2.9.1.post1").compare(tags.to_semver("2.9.1")) == 0  # build metadata does not order


POLICY = TagPolicy(floating=(FloatingTag("v{torch_minor}"), FloatingTag("latest", (("layer", "base"),))))


def test_floating_tags_go_to_the_newest_verified_image() -> None:
    won = tags.assign(POLICY, [tags.Candidate("a", fields("2.9.0")), tags.Candidate("b", fields("2.9.1")),
                               tags.Candidate("c", fields("2.10.0"), verified=False)])
    assert {t: c.ref for t, c in won.items()} == {"v2.9": "b", "latest": "b"}


def test_a_floating_tag_never_moves_backwards_past_what_the_registry_has() -> None:
    in_registry = tags.Candidate("registry:v2.9.1", fields("2.9.1"))
    won = tags.assign(POLICY, [in_registry, tags.Candidate("older", fields("2.9.0"))])
    assert won["v2.9"].ref == "registry:v2.9.1" and won["latest"].ref == "registry:v2.9.1"


def test_prereleases_stay_out_unless_asked() -> None:
    cands = [tags.Candidate("stable", fields("2.9.1")), tags.Candidate("rc", fields("2.10.0rc1"))]
    assert tags.assign(POLICY, cands)["latest"].ref == "stable"
    with_pre = TagPolicy(floating=POLICY.floating, prerelease=True)
    assert tags.assign(with_pre, cands)["latest"].ref == "rc"


def test_when_filters_which_images_a_floating_tag_considers() -> None:
    policy = TagPolicy(floating=(FloatingTag("v{torch_minor}-{layer}", (("cuda", "12.8"), ("python", "3.12"))),))
    cands = [tags.Candidate("py311", fields("2.9.1", python="3.11")), tags.Candidate("py312", fields("2.9.1", python="3.12"))]
    assert {t: c.ref for t, c in tags.assign(policy, cands).items()} == {"v2.9-base": "py312"}


def test_an_ambiguous_floating_tag_is_a_plan_error() -> None:
    items = [("py311", fields("2.9.1", python="3.11")), ("py312", fields("2.9.1", python="3.12"))]
    with pytest.raises(ValidationError) as info:
        tags.plan_floating(POLICY, items)
    assert str(info.value.problems[0]) == (
        "tags.floating: floating tag 'v2.9' would point at 2 images of torch 2.9.1 (py311, py312); "
        "add fields to the tag or narrow it with when: (e.g. when: {cuda: ..., python: ..., os: ...})")


def test_tag_fields_are_what_facts_provides_plus_the_date() -> None:
    assert set(fields("2.9.1")) == set(tags.TAG_FIELDS)
