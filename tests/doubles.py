"""Bases for the test doubles of the two edges: every method of :class:`EngineProtocol` and
:class:`RegistryProtocol`, each failing the test that calls what it did not expect. A double subclasses one
and overrides what its test uses, so mypy --strict checks it against the protocol the stages take."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ContextManager, Iterable, Mapping, NoReturn, Sequence

from imagesmith.edges.protocols import BuildOutcome, ImageInfo, LineSink, RunningProtocol, RunResult, RunSpec
from imagesmith.edges.registry import Manifest, PushedManifest
from imagesmith.model import schemas, verifyreport
from imagesmith.model.engines import EngineKind


def verify_report(doc: Mapping[str, Any]) -> verifyreport.VerifyReport:
    """A verify report a test writes as a dict, read as the host reads one (a malformed one: a LoadError); the
    schema is the verify report's unless the dict names one."""
    return verifyreport.parse({"schema": schemas.VERIFY_REPORT} | dict(doc), "<test>", "report")


def unexpected(what: str) -> NoReturn:
    raise AssertionError(f"{what} is not expected in this test")


class EngineBase:
    """An engine no test expects to be asked anything (override what yours uses)."""

    def version(self) -> dict[str, Any]: unexpected("engine.version")
    def info(self) -> dict[str, Any]: unexpected("engine.info")
    def kind(self) -> EngineKind: return EngineKind()  # a Docker engine that says nothing more of itself
    def image(self, ref: str) -> ImageInfo | None: unexpected(f"engine.image({ref!r})")
    def image_config(self, ref: str) -> dict[str, Any]: unexpected(f"engine.image_config({ref!r})")
    def history(self, ref: str) -> list[dict[str, Any]]: unexpected(f"engine.history({ref!r})")
    def tag(self, image_id: str, repository: str, tag: str) -> None: unexpected(f"engine.tag({repository}:{tag})")
    def untag(self, ref: str) -> None: unexpected(f"engine.untag({ref!r})")
    def tags_in(self, repository: str) -> list[str]: unexpected(f"engine.tags_in({repository!r})")
    def remove_unused(self, image_id: str) -> bool: unexpected("engine.remove_unused")
    def remove_image(self, ref: str, force: bool = True, keep_parents: bool = False) -> None: unexpected("engine.remove_image")
    def import_rootfs(self, tar_path: Path, repository: str, tag: str, changes: list[str]) -> str: unexpected("engine.import_rootfs")
    def load(self, chunks: Iterable[bytes]) -> list[str]: unexpected("engine.load")
    def pull(self, ref: str, auth: Mapping[str, str] | None = None) -> ImageInfo: unexpected(f"engine.pull({ref!r})")
    def push(self, repository: str, tag: str, auth: Mapping[str, str] | None, on_line: LineSink) -> str: unexpected("engine.push")
    def build(self, context: Path, tag: str, buildargs: Mapping[str, str], labels: Mapping[str, str],
              network_mode: str | None, on_line: LineSink, cancel: threading.Event | None = None,
              target: str | None = None, platform: str | None = None, cache_from: Sequence[str] = ()) -> BuildOutcome: unexpected(f"engine.build({tag!r})")
    def run(self, spec: RunSpec) -> RunResult: unexpected("engine.run")
    def started(self, spec: RunSpec) -> ContextManager[RunningProtocol]: unexpected("engine.started")
    def remove_containers(self, label: str, value: str) -> int: unexpected("engine.remove_containers")


class RegistryBase:
    """A registry no test expects to be asked anything (override what yours uses)."""

    host = "registry.test"

    def tags(self, repo: str) -> list[str]: unexpected("registry.tags")
    def manifest(self, repo: str, ref: str) -> Manifest | None: unexpected("registry.manifest")
    def manifest_digest(self, repo: str, ref: str) -> str | None: unexpected("registry.manifest_digest")
    def config(self, repo: str, digest: str) -> dict[str, Any]: unexpected("registry.config")
    def labels_of_config(self, repo: str, config_digest: str) -> dict[str, str]: unexpected("registry.labels_of_config")
    def put_manifest(self, repo: str, tag: str, manifest: Manifest) -> str: unexpected("registry.put_manifest")
    def push_index(self, repo: str, tag: str, digests: Sequence[str]) -> str: unexpected("registry.push_index")
    def push_manifest(self, repo: str, ref: str, media_type: str, data: bytes) -> PushedManifest: unexpected("registry.push_manifest")
    def check_upload(self, repo: str) -> None: unexpected("registry.check_upload")
    def blob(self, repo: str, digest: str) -> bytes: unexpected("registry.blob")
    def has_blob(self, repo: str, digest: str) -> bool: unexpected("registry.has_blob")
    def push_blob(self, repo: str, data: bytes) -> tuple[str, bool]: unexpected("registry.push_blob")
    def mount_blob(self, repo: str, digest: str, from_repo: str) -> str | None: unexpected("registry.mount_blob")
    def blob_range(self, repo: str, digest: str, start: int, end: int) -> bytes: unexpected("registry.blob_range")
    def start_upload(self, repo: str) -> str: unexpected("registry.start_upload")
    def append_upload(self, repo: str, location: str, data: bytes, offset: int) -> str: unexpected("registry.append_upload")
    def stream_upload(self, repo: str, location: str, chunks: Iterable[bytes]) -> str: unexpected("registry.stream_upload")
    def finish_upload(self, repo: str, location: str, digest: str) -> None: unexpected("registry.finish_upload")
    def cancel_upload(self, repo: str, location: str) -> None: unexpected("registry.cancel_upload")
    def referrers(self, repo: str, digest: str) -> list[dict[str, Any]] | None: unexpected("registry.referrers")


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class MemRegistry(RegistryBase):
    """Blobs, streamed uploads and manifests, in memory."""

    blobs: dict[str, bytes] = field(default_factory=dict)
    manifests: dict[str, Manifest] = field(default_factory=dict)
    uploads: dict[str, bytearray] = field(default_factory=dict)
    chunks: int = 0
    cancelled: list[str] = field(default_factory=list)

    def start_upload(self, repo: str) -> str:
        location = f"/v2/{repo}/blobs/uploads/{len(self.uploads)}"
        self.uploads[location] = bytearray()
        return location

    def stream_upload(self, repo: str, location: str, chunks: Iterable[bytes]) -> str:
        for chunk in chunks:
            self.uploads[location] += chunk
            self.chunks += 1
        return location

    def finish_upload(self, repo: str, location: str, digest: str) -> None:
        data = bytes(self.uploads.pop(location))
        assert sha(data) == digest, "the registry checks the digest it is given"
        self.blobs[digest] = data

    def cancel_upload(self, repo: str, location: str) -> None:
        self.cancelled.append(location)

    def push_blob(self, repo: str, data: bytes) -> tuple[str, bool]:
        self.blobs[sha(data)] = data
        return sha(data), True

    def push_manifest(self, repo: str, ref: str, media_type: str, data: bytes) -> PushedManifest:
        doc = json.loads(data)
        self.manifests[ref] = Manifest(sha(data), media_type, doc["config"]["digest"], data)
        return PushedManifest(sha(data), None)

    def manifest(self, repo: str, ref: str) -> Manifest | None:
        return self.manifests.get(ref)

    def has_blob(self, repo: str, digest: str) -> bool:
        return digest in self.blobs
