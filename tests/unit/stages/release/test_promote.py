"""Promotion (pure half): which blobs are mounted, copied or already there; a mount the
registry refuses falls back to a chunked copy through the session it opened; every byte is
checked. The registries are in-memory doubles with the client's methods; the real
docker-registry runs in tests/integration/test_staging.py."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

import pytest

from imagesmith.edges.registry import DOCKER_V2, OCI_INDEX, Credentials, Manifest, PushedManifest, Registry
from imagesmith.errors import RegistryError
from imagesmith.stages.release.promote import Promoter, staged_ref
from tests.doubles import RegistryBase
from tests.unit.stages.release.test_publish import Reply


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class MemRegistry(RegistryBase):
    host: str
    blobs: dict[tuple[str, str], bytes] = field(default_factory=dict)
    manifests: dict[tuple[str, str], tuple[str, bytes]] = field(default_factory=dict)
    uploads: dict[str, bytearray] = field(default_factory=dict)
    refuse_mount: bool = False
    tampered: set[str] = field(default_factory=set)  # blob digests served with other bytes
    store_other_digest: bool = False
    log: list[str] = field(default_factory=list)

    def manifest(self, repo: str, ref: str) -> Manifest | None:
        found = self.manifests.get((repo, ref))
        return Manifest(sha(found[1]), found[0], None, found[1]) if found else None

    def has_blob(self, repo: str, digest: str) -> bool:
        return (repo, digest) in self.blobs

    def mount_blob(self, repo: str, digest: str, from_repo: str) -> str | None:
        self.log.append(f"mount {digest[:13]}")
        if self.refuse_mount or (from_repo, digest) not in self.blobs:
            return self.start_upload(repo)  # 202: an upload session instead
        self.blobs[(repo, digest)] = self.blobs[(from_repo, digest)]
        return None

    def start_upload(self, repo: str) -> str:
        location = f"/v2/{repo}/blobs/uploads/{len(self.uploads) + len(self.log)}"
        self.uploads[location] = bytearray()
        return location

    def cancel_upload(self, repo: str, location: str) -> None:
        self.log.append("cancel")
        self.uploads.pop(location, None)

    def blob_range(self, repo: str, digest: str, start: int, end: int) -> bytes:
        data = self.blobs[(repo, digest)]
        return (b"X" * len(data) if digest in self.tampered else data)[start:end + 1]

    def append_upload(self, repo: str, location: str, data: bytes, offset: int) -> str:
        assert offset == len(self.uploads[location])
        self.uploads[location] += data
        self.log.append(f"patch {len(data)}")
        return location

    def finish_upload(self, repo: str, location: str, digest: str) -> None:
        data = bytes(self.uploads.pop(location))
        assert sha(data) == digest
        self.blobs[(repo, digest)] = data

    def push_manifest(self, repo: str, ref: str, media_type: str, data: bytes) -> PushedManifest:
        self.manifests[(repo, ref)] = (media_type, data)
        self.manifests[(repo, sha(data))] = (media_type, data)
        return PushedManifest("sha256:" + "0" * 64 if self.store_other_digest else sha(data), None)


def image(reg: MemRegistry, repo: str, *layers: bytes) -> str:
    """An image in ``reg``: its blobs and manifest; the manifest digest."""
    config = json.dumps({"config": {"Labels": {"a": "b"}}}).encode()
    for blob in (config, *layers):
        reg.blobs[(repo, sha(blob))] = blob
    raw = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_V2,
                      "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": sha(config), "size": len(config)},
                      "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "digest": sha(b), "size": len(b)}
                                 for b in layers]}, indent=3).encode()
    reg.manifests[(repo, sha(raw))] = (DOCKER_V2, raw)
    return sha(raw)


LAYERS = (b"a" * 100, b"b" * 37)


def test_same_registry_mounts_every_blob_and_copies_the_manifest_bytes() -> None:
    reg = MemRegistry("reg.test")
    digest = image(reg, "staging", *LAYERS)
    p = Promoter(reg, reg)(f"reg.test/staging@{digest}", "release", "v1")
    assert (p.digest, p.mounted, p.copied, p.present, p.bytes_copied) == (digest, 3, 0, 0, 0)
    assert p.bytes_mounted == p.bytes_total == sum(len(b) for (repo, _), b in reg.blobs.items() if repo == "staging")
    assert reg.manifests[("release", "v1")] == reg.manifests[("staging", digest)]  # byte-identical
    assert p.bytes_moved == p.manifest_bytes == len(reg.manifests[("staging", digest)][1])


def test_a_refused_mount_is_copied_in_chunks_through_the_session_the_registry_opened() -> None:
    reg = MemRegistry("reg.test", refuse_mount=True)
    digest = image(reg, "staging", *LAYERS)
    p = Promoter(reg, reg, chunk=40)(f"reg.test/staging@{digest}", "release", "v1")
    assert (p.mounted, p.copied, p.bytes_copied) == (0, 3, p.bytes_total)
    assert [e for e in reg.log if e.startswith("patch")][-4:] == ["patch 40", "patch 40", "patch 20", "patch 37"]  # 100 B, 37 B
    assert reg.uploads == {} and reg.manifests[("release", "v1")][1] == reg.manifests[("staging", digest)][1]


def test_another_registry_gets_a_copy_and_what_it_has_is_not_sent_again() -> None:
    src, dst = MemRegistry("staging.test"), MemRegistry("release.test")
    digest = image(src, "ml/staging", *LAYERS)
    dst.blobs[("ml/release", sha(LAYERS[0]))] = LAYERS[0]
    p = Promoter(src, dst)(f"staging.test/ml/staging@{digest}", "ml/release", "v1")
    assert (p.present, p.copied, p.mounted) == (1, 2, 0) and not any(e.startswith("mount") for e in dst.log)
    assert p.bytes_copied == p.bytes_total - len(LAYERS[0])


def test_bytes_that_do_not_hash_to_their_digest_stop_the_promotion() -> None:
    reg = MemRegistry("reg.test", refuse_mount=True)
    digest = image(reg, "staging", *LAYERS)
    reg.tampered.add(sha(LAYERS[1]))
    with pytest.raises(RegistryError, match=f"reg.test/staging@{sha(LAYERS[1])}: the bytes served hash to sha256:"):
        Promoter(reg, reg)(f"reg.test/staging@{digest}", "release", "v1")
    assert "cancel" in reg.log and reg.uploads == {} and ("release", "v1") not in reg.manifests


def test_a_manifest_served_with_other_bytes_or_stored_under_another_digest_is_refused() -> None:
    reg = MemRegistry("reg.test")
    digest = image(reg, "staging", *LAYERS)
    media, raw = reg.manifests[("staging", digest)]
    reg.manifests[("staging", digest)] = (media, raw + b" ")
    with pytest.raises(RegistryError, match="served a manifest with another digest"):
        Promoter(reg, reg)(f"reg.test/staging@{digest}", "release", "v1")
    reg.manifests[("staging", digest)] = (media, raw)
    reg.store_other_digest = True
    with pytest.raises(RegistryError, match="the release would not be byte-identical to what was verified"):
        Promoter(reg, reg)(f"reg.test/staging@{digest}", "release", "v1")
    with pytest.raises(RegistryError, match="is not in the staging repository"):
        Promoter(reg, reg)(f"reg.test/staging@sha256:{'9' * 64}", "release", "v1")


def test_an_index_promotes_each_manifest_it_lists_first() -> None:
    reg = MemRegistry("reg.test")
    children = [image(reg, "staging", b"amd64" * 9), image(reg, "staging", b"arm64" * 9)]
    index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": DOCKER_V2, "digest": d, "size": len(reg.manifests[("staging", d)][1])} for d in children]}).encode()
    reg.manifests[("staging", sha(index))] = (OCI_INDEX, index)
    p = Promoter(reg, reg)(f"reg.test/staging@{sha(index)}", "release", "v1")
    assert p.digest == sha(index) and all(("release", d) in reg.manifests for d in children)
    assert (p.blobs, p.mounted, p.present) == (4, 3, 1)  # both children share their config blob


@pytest.mark.parametrize("ref", ["reg.test/staging:tag", "reg.test@sha256:" + "1" * 64, "staging@md5:1"])
def test_only_staged_references_by_digest_are_promoted(ref: str) -> None:
    with pytest.raises(RegistryError, match="is not a staged reference"):
        staged_ref(ref)


@dataclass
class HarborLike:
    """A token-auth registry: a mount needs one token with push on the target and pull on the source."""

    token_params: list[Any] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)

    def get(self, url: str, **kw: Any) -> Reply:
        return self.request("GET", url, **kw)

    def request(self, method: str, url: str, headers: Mapping[str, str] | None = None, params: Any = None, **kw: Any) -> Reply:
        if url.endswith("/service/token"):
            self.token_params.append(params)
            scopes = params["scope"] if isinstance(params["scope"], list) else [params["scope"]]
            return Reply(200, content=json.dumps({"token": "tok:" + " ".join(scopes)}).encode())
        self.requests.append((method, url))
        wanted = "Bearer tok:repository:ml/release:pull,push repository:ml/staging:pull"
        if (headers or {}).get("Authorization") != wanted:
            return Reply(401, {"WWW-Authenticate": 'Bearer realm="https://h.test/service/token",service="harbor-registry"'})
        return Reply(201, {"Location": "/v2/ml/release/blobs/" + "sha256:" + "a" * 64})


def test_a_mount_asks_the_token_service_for_push_here_and_pull_there() -> None:
    session = HarborLike()
    reg = Registry("h.test", Credentials("robot$ml+ci", "secret"), session=session)  # type: ignore[arg-type]
    assert reg.mount_blob("ml/release", "sha256:" + "a" * 64, "ml/staging") is None
    assert session.token_params == [{"service": "harbor-registry",
                                     "scope": ["repository:ml/release:pull,push", "repository:ml/staging:pull"]}]
    assert session.requests[-1] == ("POST", f"https://h.test/v2/ml/release/blobs/uploads/?mount=sha256%3A{'a' * 64}&from=ml%2Fstaging")
