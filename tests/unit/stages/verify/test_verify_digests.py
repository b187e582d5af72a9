"""The digests a verify report names are ones the registry serves, read back (imagesmith/stages/verify/verify.py:
served_digests), whatever the engine's own bookkeeping says: Podman lists a digest for every image it holds, made
up for images no registry has seen."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from imagesmith.edges.registry import DOCKER_V2, OCI_INDEX, Manifest
from imagesmith.model.engines import EngineKind
from imagesmith.model.ref import ImageRef
from imagesmith.stages.verify import served
from tests.doubles import RegistryBase

IMAGE_ID, OTHER_ID = "sha256:" + "1" * 64, "sha256:" + "2" * 64
SERVED, LOCAL, INDEX = ("sha256:" + c * 64 for c in "abc")
REPO = "127.0.0.1:5000/ml/pytorch"
REF = f"{REPO}:2.9.1-base"
PODMAN, DOCKER = EngineKind("Podman", "4.3.1", "1.41", False), EngineKind("Docker", "20.10.24", "1.41", False)


class Registry(RegistryBase):
    """Serves ``tags`` (tag -> (digest, config digest or None for an index)) and those digests."""

    def __init__(self, tags: dict[str, tuple[str, str | None]]) -> None:
        self.served = tags
        self.asked: list[str] = []

    def manifest(self, repo: str, ref: str) -> Manifest | None:
        assert repo == "ml/pytorch"
        self.asked.append(ref)
        found = self.served.get(ref) or next(((d, c) for d, c in self.served.values() if d == ref), None)
        if found is None:
            return None
        digest, config = found
        kind = OCI_INDEX if config is None else DOCKER_V2
        return Manifest(digest, kind, config, json.dumps({"mediaType": kind}).encode())


def image(*digests: str, image_id: str = IMAGE_ID) -> Any:
    return SimpleNamespace(id=image_id, repo_digests=digests, platform="linux/amd64")


CASES = [
    pytest.param(Registry({"2.9.1-base": (SERVED, IMAGE_ID)}), image(f"{REPO}@{LOCAL}"), PODMAN, [f"{REPO}@{SERVED}"], "",
                 id="podman-load-the-registry-serves-the-image-by-another-digest"),
    pytest.param(Registry({"2.9.1-base": (SERVED, IMAGE_ID)}), image(f"{REPO}@{SERVED}"), DOCKER, [f"{REPO}@{SERVED}"], "",
                 id="docker-pushed-it"),
    pytest.param(Registry({"2.9.1-base": (INDEX, None)}), image(f"{REPO}@{INDEX}", f"{REPO}@{LOCAL}"), PODMAN, [f"{REPO}@{INDEX}"], "",
                 id="pulled-through-an-index-the-registry-serves"),
    pytest.param(Registry({"2.9.1-base": (SERVED, OTHER_ID)}), image(f"{REPO}@{LOCAL}"), PODMAN, [],
                 f"{REPO} serves {SERVED} (image {OTHER_ID}) for 2.9.1-base, not this image ({IMAGE_ID}); the engine's digests "
                 f"{REPO}@{LOCAL} are not recorded", id="the-tag-moved-to-another-image"),
    pytest.param(Registry({}), image(f"{REPO}@{LOCAL}"), PODMAN, [],
                 f"{REPO} serves nothing for 2.9.1-base, not this image ({IMAGE_ID}); the engine's digests {REPO}@{LOCAL} are not "
                 "recorded", id="never-pushed"),
    pytest.param(Registry({}), image(), DOCKER, [], "", id="nothing-anywhere"),
    pytest.param(None, image(f"{REPO}@{LOCAL}", f"other.example/x@{SERVED}"), PODMAN, [],
                 "Podman lists 2 repository digests for this image, none read back from a registry (Podman makes its own for "
                 "images no registry has seen): no digest recorded", id="podman-without-a-registry"),
    pytest.param(None, image(f"{REPO}@{SERVED}", "not a digest"), DOCKER, [f"{REPO}@{SERVED}"], "", id="docker-without-a-registry"),
]


@pytest.mark.parametrize("registry, info, kind, digests, note", CASES)
def test_only_a_digest_the_registry_serves_is_recorded(registry: Registry | None, info: Any, kind: EngineKind, digests: list[str],
                                                       note: str) -> None:
    assert served.served_digests(registry, ImageRef.parse(REF), info, kind) == (digests, note)


def test_a_pinned_reference_is_the_digest_verified() -> None:
    registry = Registry({})
    assert served.served_digests(registry, ImageRef.parse(f"{REPO}@{SERVED}"), image(f"{REPO}@{LOCAL}"), PODMAN) == ([f"{REPO}@{SERVED}"], "")
    assert registry.asked == []  # the engine resolved exactly that manifest
