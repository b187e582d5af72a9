"""verify IMAGE on a tag that names an image index: which platform's image of it ran, by digest."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from imagesmith.edges.registry import DOCKER_V2, OCI_INDEX, Manifest
from imagesmith.stages import verify
from tests.doubles import RegistryBase

AMD, ARM, INDEX = ("sha256:" + c * 64 for c in "abc")
REF = "127.0.0.1:5000/ml/pytorch:2.9.1-base-20261201"


class Registry(RegistryBase):
    def __init__(self, docs: dict[str, dict[str, Any]]) -> None:
        self.docs: dict[str, dict[str, Any]] = docs
        self.asked: list[tuple[str, str]] = []

    def manifest(self, repo: str, ref: str) -> Manifest | None:
        self.asked.append((repo, ref))
        doc = self.docs.get(ref)
        return None if doc is None else Manifest(ref, doc.get("mediaType", DOCKER_V2), None, json.dumps(doc).encode())


INDEX_DOC = {"mediaType": OCI_INDEX, "manifests": [
    {"digest": AMD, "platform": {"os": "linux", "architecture": "amd64"}},
    {"digest": ARM, "platform": {"os": "linux", "architecture": "arm64"}}]}


def image(platform: str, *digests: str) -> Any:
    return SimpleNamespace(platform=platform, repo_digests=digests)


def test_the_engine_platform_entry_of_the_index_the_engine_pulled_is_named_by_digest() -> None:
    reg = Registry({INDEX: INDEX_DOC})
    picked = verify.index_pick(reg, REF, image("linux/arm64", "other.example/x@" + AMD, f"127.0.0.1:5000/ml/pytorch@{INDEX}"))
    assert picked == {"index": INDEX, "digest": ARM, "platform": "linux/arm64"}
    assert reg.asked == [("ml/pytorch", INDEX)]  # by the index's digest (immutable), never by the tag that may move


def test_a_plain_image_manifest_or_a_platform_missing_from_the_index_picks_nothing() -> None:
    assert verify.index_pick(Registry({AMD: {"config": {"digest": AMD}}}), REF, image("linux/amd64", f"127.0.0.1:5000/ml/pytorch@{AMD}")) is None
    assert verify.index_pick(Registry({INDEX: INDEX_DOC}), REF, image("linux/ppc64le", f"127.0.0.1:5000/ml/pytorch@{INDEX}")) is None
    assert verify.index_pick(Registry({INDEX: INDEX_DOC}), REF, image("linux/amd64")) is None  # never pulled from a registry
