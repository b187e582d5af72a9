"""One target's build artifact as frozen records (imagesmith/model/buildreport.py): the release settings a plan
gives it, and the parse's own checks, which refuse what the schema lets through."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from imagesmith.model import buildreport, matrix, plan
from imagesmith.model.buildreport import BuildRecord, Release, Staged
from imagesmith.model.loader import LoadError
from tests.conftest import LOCAL_ROOTS, ROOT

DATE = "20261130"
LOCAL = matrix.load(ROOT / "examples" / "local.yaml", allowed_roots=LOCAL_ROOTS)
PLAN = plan.expand(LOCAL, DATE)
RELEASE = Release.of(LOCAL, DATE)
DIGEST = "sha256:" + "d" * 64
IMAGE = "sha256:" + "1" * 64
STAGED = Staged("harbor.example.com/ml/staging", "ctx-" + "c" * 64, DIGEST, pushed=True)


def record(i: int = 0, **kw: Any) -> BuildRecord:
    t = PLAN.targets[i]
    fields: dict[str, Any] = dict(target=t, release=RELEASE, status="built", image_id=IMAGE, context_hash="sha256:" + "c" * 64,
                                  facts={"torch": "2.13.0+cpu", "packages": {"torch": "2.13.0+cpu"}}, size_bytes=123,
                                  seconds=1.5, staged=STAGED, host="runner-7", written_at="2026-11-30T00:00:00+00:00")
    return BuildRecord(**(fields | kw))


def test_release_settings_come_from_the_matrix_with_floating_rules() -> None:
    assert RELEASE.image.name == "127.0.0.1:5000/imagesmith/local"
    assert RELEASE.tags == LOCAL.tags and RELEASE.date == DATE and RELEASE.matrix == "local.yaml"
    assert ("layer", "base") in next(f.when for f in RELEASE.tags.floating if f.template == "latest")


def set_key(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for key in parents:
            doc = doc[key]
        doc[last] = value
    return change


# the schema (imagesmith/data/schemas/build-1.schema.json) lets these through; the parse refuses each, naming the key
PARSED = [
    (set_key("staged.tag", "-bad tag"), "staged.tag: '-bad tag' is not a valid value"),
    (set_key("staged.repository", "ml/staging"), "staged.repository: 'ml/staging' does not start with a registry host"),
    (set_key("staged.repository", "h.example.com/ML"), "staged.repository: 'h.example.com/ML': 'ML' is not a repository path"),
    (set_key("release.repository", "Bad Repo"), "release.repository: 'Bad Repo' is not a valid value"),
    (set_key("target.versions", {}), "target: not a plan target (TypeError"),
]


@pytest.mark.parametrize("change, message", PARSED, ids=[m.split(":")[0] for _, m in PARSED])
def test_the_parse_checks_what_the_schema_lets_through(change: Callable[[dict[str, Any]], None], message: str) -> None:
    doc = record().to_json()
    change(doc)
    with pytest.raises(LoadError) as err:
        buildreport.parse(doc, "OUT/t/build.json")
    assert str(err.value).startswith(f"OUT/t/build.json: {message}")
    assert str(err.value).endswith("(build again with imagesmith build)")
