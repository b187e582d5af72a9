"""verify IMAGE on a tag that names an image index: which platform's image of it ran, by digest."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from imagesmith.edges.registry import DOCKER_V2, OCI_INDEX, Manifest, RegistryHTTPError, sha256_digest
from imagesmith.edges.registry import Registry as RealRegistry
from imagesmith.model.ref import ImageRef
from imagesmith.stages.verify import served
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
    picked = served.index_pick(reg, ImageRef.parse(REF), image("linux/arm64", "other.example/x@" + AMD, f"127.0.0.1:5000/ml/pytorch@{INDEX}"))
    assert picked == {"index": INDEX, "digest": ARM, "platform": "linux/arm64"}
    assert reg.asked == [("ml/pytorch", INDEX)]  # by the index's digest (immutable), never by the tag that may move


def test_a_plain_image_manifest_or_a_platform_missing_from_the_index_picks_nothing() -> None:
    assert served.index_pick(Registry({AMD: {"config": {"digest": AMD}}}), ImageRef.parse(REF), image("linux/amd64", f"127.0.0.1:5000/ml/pytorch@{AMD}")) is None
    assert served.index_pick(Registry({INDEX: INDEX_DOC}), ImageRef.parse(REF), image("linux/ppc64le", f"127.0.0.1:5000/ml/pytorch@{INDEX}")) is None
    assert served.index_pick(Registry({INDEX: INDEX_DOC}), ImageRef.parse(REF), image("linux/amd64")) is None  # never pulled from a registry


def test_an_index_entry_that_names_no_sha256_digest_is_not_recorded() -> None:
    hostile = {"mediaType": OCI_INDEX, "manifests": [{"digest": "sha256:x\n| forged |", "platform": {"os": "linux", "architecture": "amd64"}}]}
    assert served.index_pick(Registry({INDEX: hostile}), ImageRef.parse(REF), image("linux/amd64", f"127.0.0.1:5000/ml/pytorch@{INDEX}")) is None


class Served:
    """A registry that answers every manifest GET with ``body`` (and a Docker-Content-Digest naming what was asked)."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def get(self, url: str, **kw: Any) -> Any:
        return self.request("GET", url, **kw)

    def request(self, method: str, url: str, **kw: Any) -> Any:
        asked = url.rpartition("/")[2]
        return SimpleNamespace(status_code=200, content=self.body, reason="OK", json=lambda: json.loads(self.body),
                               headers={"Content-Type": DOCKER_V2, "Docker-Content-Digest": asked})


def test_a_manifest_fetched_by_digest_must_hash_to_it() -> None:
    body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_V2, "config": {"digest": AMD}}).encode()
    good = sha256_digest(body)
    client = RealRegistry("127.0.0.1:5000", session=Served(body))  # type: ignore[arg-type]
    found = client.manifest("ml/pytorch", good)
    assert found is not None and found.digest == good
    with pytest.raises(RegistryHTTPError, match=f"the registry served a document whose digest is {good}"):
        client.manifest("ml/pytorch", INDEX)  # the header repeats what was asked; the bytes say otherwise
