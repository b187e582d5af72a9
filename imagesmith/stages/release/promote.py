"""Promotion: a staged image becomes a release without an engine.

For the staged manifest ``STAGE@sha256:D`` and a release ``REPO:TAG``:

1. read the manifest by digest and check that its bytes hash to ``D``;
2. make every blob it names (config and layers; for an index, each child
   manifest first) present in the release repository: already there; mounted
   from the staging repository (same registry: ``POST
   /v2/REPO/blobs/uploads/?mount=DIGEST&from=STAGE``, no bytes move); or
   copied in chunks (``GET`` with ``Range`` from the source, ``PATCH`` into an
   upload context, ``PUT ?digest=``) where the registry refuses the mount (it
   then answers 202 with an upload context, which the copy uses) or the
   staging repository is on another registry;
3. ``PUT`` the very same manifest bytes under ``TAG``. The registry answers
   with their digest, which must be ``D``: the release is byte-identical to
   what was verified, and no layer was pulled or pushed through an engine.

The registry clients are :class:`imagesmith.edges.registry.Registry` (or doubles
with the same methods); what moved is counted in a :class:`Promotion`.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from imagesmith.edges.credentials import STAGE_FLAG, CredentialStore
from imagesmith.edges.protocols import RegistryProtocol
from imagesmith.edges.registry import INDEXES, entries, manifest_document, sha256_digest
from imagesmith.errors import RegistryError
from imagesmith.model.ref import ImageRef

SHA256 = re.compile(r"sha256:[0-9a-f]{64}")

CHUNK = 64 << 20  # bytes per request when a blob is copied




@dataclass
class Promotion:
    """One promoted image: where from, where to, and what it took."""

    source: str  # host/repository@digest
    reference: str  # host/repository:tag
    digest: str = ""
    blobs: int = 0
    present: int = 0
    mounted: int = 0
    copied: int = 0
    bytes_total: int = 0
    bytes_mounted: int = 0
    bytes_copied: int = 0
    manifest_bytes: int = 0
    seconds: float = 0.0

    @property
    def bytes_moved(self) -> int:
        """Bytes that crossed the network: copied blobs and the manifests."""
        return self.bytes_copied + self.manifest_bytes

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"bytes_moved": self.bytes_moved, "seconds": round(self.seconds, 3)}


def staged_ref(ref: str) -> ImageRef:
    """``host/path@sha256:…``: a reference on a registry, pinned by digest."""
    parsed = ImageRef.maybe(ref)
    if parsed is None or not parsed.host or not parsed.pinned:
        raise RegistryError(f"{ref!r} is not a staged reference (host/repository@sha256:...)")
    return parsed


class Promoter:
    """Copies staged manifests into a release repository through the registry API."""

    def __init__(self, source: RegistryProtocol, target: RegistryProtocol, chunk: int = CHUNK,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source, self.target, self.chunk, self.clock = source, target, chunk, clock

    def __call__(self, source_ref: str, repo: str, tag: str) -> Promotion:
        staged = staged_ref(source_ref)
        src_repo, digest = staged.repository, str(staged.digest)
        if staged.host != self.source.host:
            raise RegistryError(f"{source_ref} is not on {self.source.host}")
        t0 = self.clock()
        p = Promotion(source_ref, f"{self.target.host}/{repo}:{tag}")
        p.digest = self._manifest(src_repo, digest, repo, tag, p)
        if p.digest != digest:
            raise RegistryError(f"promoting {source_ref} to {p.reference}: the registry stored {p.digest}, not {digest}; "
                                f"the release would not be byte-identical to what was verified")
        p.seconds = self.clock() - t0
        return p

    def _manifest(self, src_repo: str, digest: str, repo: str, ref: str, p: Promotion) -> str:
        found = self.source.manifest(src_repo, digest)
        if found is None:
            raise RegistryError(f"{self.source.host}/{src_repo}@{digest} is not in the staging repository (deleted, or "
                                f"garbage-collected?); build that target again with --stage")
        if sha256_digest(found.raw) != digest:
            raise RegistryError(f"{self.source.host}/{src_repo}@{digest}: the registry served a manifest with another digest "
                                f"({sha256_digest(found.raw)}); its storage was changed")
        doc = manifest_document(found.raw, f"{self.source.host}/{src_repo}@{digest}")
        if found.media_type in INDEXES or "manifests" in doc:
            for child in entries(doc, "manifests"):
                self._manifest(src_repo, _digest(child, digest), repo, _digest(child, digest), p)
        else:
            config = doc.get("config")
            for blob in [config if isinstance(config, dict) else {}, *entries(doc, "layers")]:
                size = blob.get("size")
                self._blob(src_repo, repo, _digest(blob, digest), size if isinstance(size, int) and size > 0 else 0, p)
        p.manifest_bytes += len(found.raw)
        return self.target.push_manifest(repo, ref, found.media_type, found.raw).digest

    def _blob(self, src_repo: str, repo: str, digest: str, size: int, p: Promotion) -> None:
        p.blobs, p.bytes_total = p.blobs + 1, p.bytes_total + size
        if self.target.has_blob(repo, digest):
            p.present += 1
            return
        location = self.target.mount_blob(repo, digest, src_repo) if self.target.host == self.source.host \
            else self.target.start_upload(repo)
        if location is None:
            p.mounted, p.bytes_mounted = p.mounted + 1, p.bytes_mounted + size
            return
        try:
            self._copy(src_repo, repo, digest, size, location)
        except BaseException:
            self.target.cancel_upload(repo, location)
            raise
        p.copied, p.bytes_copied = p.copied + 1, p.bytes_copied + size

    def _copy(self, src_repo: str, repo: str, digest: str, size: int, location: str) -> None:
        """Chunk by chunk into the open upload; the bytes are hashed on the way and checked."""
        h, offset = hashlib.sha256(), 0
        while offset < size:
            data = self.source.blob_range(src_repo, digest, offset, min(size, offset + self.chunk) - 1)
            if not data:
                raise RegistryError(f"{self.source.host}/{src_repo}@{digest}: the blob ended at {offset} of {size} bytes")
            h.update(data)
            location = self.target.append_upload(repo, location, data, offset)
            offset += len(data)
        if "sha256:" + h.hexdigest() != digest:
            raise RegistryError(f"{self.source.host}/{src_repo}@{digest}: the bytes served hash to sha256:{h.hexdigest()}; "
                                f"the staging registry's storage was changed")
        self.target.finish_upload(repo, location, digest)


def _digest(descriptor: dict[str, Any], parent: str) -> str:
    """A descriptor's sha256 digest (what a staging manifest names is untrusted: a path in a URL otherwise)."""
    found = descriptor.get("digest")
    if not isinstance(found, str) or not SHA256.fullmatch(found):
        raise RegistryError(f"the staged manifest {parent} names {str(found)[:80]!r}, not a sha256 digest; build that target again")
    return found


def registry_promoter(target: Any, store: CredentialStore | None = None,
                      ca_file: Path | None = None) -> Callable[[str, str, str], Promotion]:
    """``promote(source_ref, repo, tag)`` into ``target`` (a :class:`~imagesmith.edges.registry.Registry`): a staging
    repository on the same registry shares its client (and mounts); another registry gets its own client (and
    blobs are copied), with the store's login only when that is the staging host the operator declared (--stage):
    ``source_ref`` comes from a build artifact, so an undeclared host is read anonymously and another host than
    the declared one is refused before anything is sent."""
    from imagesmith.edges.runcontext import RunContext

    store = store or CredentialStore()
    context = RunContext(store)
    clients: dict[str, Any] = {target.host: target}

    def promote(source_ref: str, repo: str, tag: str) -> Promotion:
        host = staged_ref(source_ref).host
        if host not in clients:
            creds = store.for_artifact(host, store.declared.staging, f"the staged image {source_ref}", "staged repository",
                                       STAGE_FLAG)
            clients[host] = context.registry(host, creds, ca_file=ca_file,
                                     anonymous_hint=store.anonymous_hint(host, store.declared.staging, STAGE_FLAG))
        return Promoter(clients[host], target)(source_ref, repo, tag)
    return promote
