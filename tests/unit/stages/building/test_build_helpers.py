"""build.py's pure parts: the context hash that keys the cache, owner tags, the
comparison of a measured image with its plan, redaction, the failure summary."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from imagesmith.edges.protocols import ImageInfo
from imagesmith.errors import Redactor
from imagesmith.model import matrix, plan
from imagesmith.model.buildreport import REPORT_SCHEMA, BuildReport, TargetResult
from imagesmith.stages.building import buildreport, cache, measured
from tests.conftest import LOCAL_ROOTS, ROOT

FILES = {"Dockerfile": b"FROM x\n", "files/a.sh": b"echo a\n"}
ARGS = {"PIP_INDEX_URL": "https://pypi.org/simple", "PIP_FIND_LINKS": ""}
PARENT = "sha256:" + "1" * 64
HASH = cache.context_hash(FILES, ARGS, PARENT)


def targets() -> dict[str, plan.Target]:
    m = matrix.load(ROOT / "examples" / "local.yaml", allowed_roots=LOCAL_ROOTS)
    return {t.id: t for t in plan.expand(m, "20261130").targets}


CPU = "2.13.0-cpu-py3.11-debian12-base"
CUDA = "2.14.1-cu130-py3.11-debian12-base"


def test_context_hash_is_stable_and_names_its_algorithm() -> None:
    assert cache.context_hash(dict(reversed(list(FILES.items()))), dict(reversed(list(ARGS.items()))), PARENT) == HASH
    assert HASH.startswith("sha256:") and len(HASH) == len("sha256:") + 64


@pytest.mark.parametrize("files, args, parent", [
    ({**FILES, "Dockerfile": b"FROM y\n"}, ARGS, PARENT),  # a file's content
    ({**FILES, "files/b.sh": b""}, ARGS, PARENT),  # an empty file added
    ({"Dockerfile": b"FROM x\n", "files/a.s": b"hecho a\n"}, ARGS, PARENT),  # bytes moved from name to content
    (FILES, {**ARGS, "PIP_FIND_LINKS": "/w"}, PARENT),  # a build argument
    (FILES, {**ARGS, "EXTRA": ""}, PARENT),  # an empty build argument added
    (FILES, ARGS, "sha256:" + "2" * 64),  # the parent image
])
def test_context_hash_changes_with_whatever_decides_the_image(files: dict[str, bytes], args: dict[str, str],
                                                              parent: str) -> None:
    assert cache.context_hash(files, args, parent) != HASH


@pytest.mark.parametrize("target_id", ["2.14.1-cu130-py3.11-debian12-base", "_x", "a" * 128])
def test_owner_tag_keeps_a_target_id_that_is_a_valid_tag(target_id: str) -> None:
    assert cache.owner_tag(target_id) == target_id


@pytest.mark.parametrize("target_id", ["a" * 129, "-leading-dash", ".dot", "has/slash", "with space", ""])
def test_owner_tag_hashes_any_other_id_into_a_valid_distinct_tag(target_id: str) -> None:
    tag = cache.owner_tag(target_id)
    assert tag.startswith("t-") and len(tag) == 42 and tag != cache.owner_tag(target_id + "x")
    assert cache.owner_tag(tag) == tag  # the result is itself a valid tag


def test_owner_id_differs_per_matrix_and_output_folder(tmp_path: Path) -> None:
    a = cache.owner_id(tmp_path / "m.yaml", tmp_path / "out")
    assert a == cache.owner_id(tmp_path / "." / "m.yaml", tmp_path / "out")
    assert len({a, cache.owner_id(tmp_path / "n.yaml", tmp_path / "out"), cache.owner_id(tmp_path / "m.yaml", tmp_path / "o")}) == 3


def facts_of(t: plan.Target, **changes: Any) -> dict[str, Any]:
    v = t.versions
    facts: dict[str, Any] = {"torch": v.torch + ("+cpu" if v.cuda == "cpu" else "+cu130"), "python": v.python + ".7",
                             "os": v.os, "cuda": None if v.cuda == "cpu" else v.cuda + ".2",
                             "cudnn": ".".join((v.cudnn or "").split(".")[:3]) or None, "nccl": v.nccl,
                             "packages": {"einops": "0.8.1", "typing-extensions": "4.12.2"}}
    return facts | changes


@pytest.mark.parametrize("target, changes, declared, mismatches", [
    (CPU, {}, [], []),
    (CUDA, {}, ["einops==0.8.1", "typing_extensions==4.12.2"], []),
    (CUDA, {}, ["einops==0.8"], []),  # the plan's version is a prefix of the measured one
    (CPU, {"torch_error": "libcudart.so.13: cannot open"}, [], ["torch does not import: libcudart.so.13: cannot open"]),
    (CPU, {"torch": "2.12.0+cpu"}, [], ["torch: plan says 2.13.0, image has 2.12.0+cpu"]),
    (CPU, {"python": "3.12.1"}, [], ["python: plan says 3.11, image has 3.12.1"]),
    (CPU, {"cuda": "13.0"}, [], ["cuda: plan says none, image has 13.0"]),
    (CUDA, {"cuda": None}, [], ["cuda: plan says 13.0, image has none"]),
    (CUDA, {"cudnn": "9.23.0", "nccl": None}, [],
     ["cudnn: plan says 9.24.0.43, image has 9.23.0", "nccl: plan says 2.30.7, image has none"]),
    (CPU, {"os": "debian13"}, [], ["os: plan says debian12, image has debian13"]),
    (CPU, {}, ["einops==0.9"], ["package einops: plan says 0.9, image has 0.8.1"]),
    (CPU, {}, ["absent==1.0"], ["package absent: plan says 1.0, image has none"]),
])
def test_compare_facts(target: str, changes: dict[str, Any], declared: list[str], mismatches: list[str]) -> None:
    t = targets()[target]
    assert measured.compare_facts(t, facts_of(t, **changes), declared) == mismatches


@pytest.mark.parametrize("secrets, line, clean", [
    ([], "token abc", "token abc"),
    (["abc"], "token abc and abc", "token **** and ****"),
    (["abc", "abcdef"], "key abcdef", "key ****"),  # the longer secret first: no tail of it is left
    (["", "s3cret"], "user:s3cret@host", "user:****@host"),  # an empty secret redacts nothing
])
def test_redactor(secrets: list[str], line: str, clean: str) -> None:
    assert Redactor(secrets)(line) == clean


def report(*results: TargetResult) -> BuildReport:
    return BuildReport("local.yaml", "2026-11-30T00:00:00+00:00", 12.345, {"b:1": "sha256:b"}, results)


def test_a_report_is_ok_only_when_every_target_is() -> None:
    built, cached = TargetResult("a", "built"), TargetResult("b", "cached")
    assert report(built, cached).ok and not report(built, TargetResult("c", "skipped")).ok
    doc = report(built).to_json()
    assert (doc["schema"], doc["seconds"], doc["ok"], doc["targets"][0]["status"]) == (REPORT_SCHEMA, 12.35, True, "built")
    assert buildreport.not_ok(doc)["ok"] is False and doc["ok"] is True


def test_failure_summary_names_the_dockerfile_and_the_last_log_lines(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    failed = TargetResult("a", "failed", error="exit 1", dockerfile="out/a/Dockerfile", log=str(log))
    nolog = dataclasses.replace(failed, target="b", log=str(tmp_path / "missing.log"))
    lines = buildreport.failure_summary(report(TargetResult("ok", "built"), failed, nolog))
    assert lines[:3] == ["FAILED a: exit 1", "  Dockerfile: out/a/Dockerfile", f"  log: {log}"]
    assert lines[3].startswith("  | line ") and lines[-3] == "  | line 99"
    assert lines[-2:] == ["FAILED b: exit 1", "  Dockerfile: out/a/Dockerfile"]  # failed before a build began: no log to name


ARM_BASE = "2.9.1-cu128-py3.12-debian12-arm64-base"


@pytest.mark.parametrize("os_name, arch, variant, from_os, found", [
    ("linux", "arm64", "", True, None),
    ("linux", "arm64", "v8", True, None),  # how some registries' arm64 images say it
    ("", "", "", True, None),  # the engine says no architecture: the build's own check judges the image
    ("linux", "amd64", "", True, "linux/amd64"),
    ("linux", "arm", "v7", True, "linux/arm/v7"),
    ("windows", "arm64", "", True, "windows/arm64"),
    ("linux", "amd64", "", False, "linux/amd64"),
])
def test_a_base_is_judged_by_the_platform_its_config_names(os_name: str, arch: str, variant: str, from_os: bool,
                                                            found: str | None) -> None:
    p = plan.expand(matrix.load(ROOT / "examples" / "multiarch.yaml"), "20261130")
    t = p.by_id()[ARM_BASE]
    why = measured.base_mismatch(t, ImageInfo("sha256:" + "e" * 64, (), {}, 0, "", os=os_name, architecture=arch, variant=variant), from_os)
    if found is None:
        assert why is None
        return
    assert why is not None and why.startswith(f"base {t.base_image} named for linux/arm64 is {found}: the engine's copy "
                                              f"(sha256:eeeeeeeeeeee) says os {os_name}, architecture {arch}")
    assert why.endswith("or build this cell on a native arm64 runner" if from_os else
                        "fix: build this cell on a native arm64 runner (an engine holds one platform's image under a tag)")
