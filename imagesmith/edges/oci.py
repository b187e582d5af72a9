"""What the Registry HTTP API v2 speaks, as values: media types, manifests and image indexes (parsed strictly,
written canonically), digests, and the errors a registry answers with (which of them retrying may help). Nothing is sent
from here: :class:`imagesmith.edges.registry.Registry` sends and receives them."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import requests

from imagesmith.errors import RegistryError

DOCKER_V2 = "application/vnd.docker.distribution.manifest.v2+json"


DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"


OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


OCI_INDEX = "application/vnd.oci.image.index.v1+json"


ACCEPT = ", ".join((DOCKER_V2, OCI_MANIFEST, DOCKER_LIST, OCI_INDEX))


INDEXES = (DOCKER_LIST, OCI_INDEX)


class RegistryHTTPError(RegistryError):
    """A registry answered with an error (or not at all); ``transient`` errors may be retried.
    ``transient`` follows the HTTP status (:data:`TRANSIENT_STATUS`) unless the caller read more
    in the registry's answer (a 500 saying its storage is full is not transient)."""

    def __init__(self, message: str, status: int | None = None, transient: bool | None = None, said: str = "",
                 hint: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.transient = status in TRANSIENT_STATUS if transient is None else transient
        self.said = said or message  # what the registry (or the engine) said, without our advice
        self.hint = hint  # our advice, when there is some beyond "check the registry"


class RegistryUnreachable(RegistryHTTPError):
    """The registry (or its token service) did not answer at all: refused, reset, timed out.
    Retrying may help."""

    def __init__(self, message: str, said: str = "") -> None:
        super().__init__(message, None, transient=True, said=said)


# What retrying may help: a registry down, overloaded, rate limiting or restarting.
TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


# A 500 whose error body names one of these (distribution's storage driver error) is not
# transient: storage full, over quota, read-only.
STORAGE_ERRNOS = {28: "no space left on device", 122: "disk quota exceeded", 30: "read-only file system"}


STORAGE_WORDS = re.compile(r"no space left on device|disk quota exceeded|read-only file system|insufficient storage", re.I)


@dataclass(frozen=True)
class RegistryAnswer:
    """A registry's own error answer: the HTTP status and its ``errors`` body
    (code, message, detail), as distribution and Harbor send it."""

    status: int
    errors: tuple[Mapping[str, Any], ...] = ()
    reason: str = ""

    def text(self) -> str:
        parts = [_error_text(e) for e in self.errors]
        return "; ".join(p for p in parts if p) or self.reason

    def storage(self) -> str | None:
        """'no space left on device' (and kin) when the body says the registry's storage refused."""
        for err in self.errors:
            errno = _errno(err.get("detail"))
            if errno in STORAGE_ERRNOS:
                return STORAGE_ERRNOS[errno]
        found = STORAGE_WORDS.search(self.text())
        if found:
            return found.group(0).lower()
        return "insufficient storage" if self.status == 507 else None

    @property
    def transient(self) -> bool:
        if self.storage() or any(e.get("code") == "UNSUPPORTED" for e in self.errors):
            return False
        return self.status in TRANSIENT_STATUS

    def hint(self) -> str | None:
        """What to do, when it is not 'wait and retry'."""
        if self.storage():
            return ("the registry's storage is full or refuses writes: free space (garbage-collect, raise the "
                    "project quota) on the registry, then run the release again")
        if self.status in (405, 501) or any(e.get("code") == "UNSUPPORTED" for e in self.errors):
            return "the registry does not support this operation (a read-only mirror or proxy cache?): push to a writable registry"
        return None


def answer_of(resp: requests.Response) -> RegistryAnswer:
    """The registry's error body, whatever shape it came in."""
    try:
        body = manifest_document(resp.content, "the error body")
    except RegistryError:
        body = None
    errors = body.get("errors") if isinstance(body, dict) else None
    kept = tuple(e for e in errors if isinstance(e, Mapping)) if isinstance(errors, list) else ()
    reason = resp.reason or ""
    if not kept and resp.text and not resp.text.lstrip().startswith("<"):
        reason = " ".join(resp.text.split())[:300] or reason
    return RegistryAnswer(resp.status_code, kept, reason)


def _error_text(err: Mapping[str, Any]) -> str:
    head = ": ".join(str(err.get(k) or "") for k in ("code", "message") if err.get(k))
    detail = _detail_text(err.get("detail"))
    return f"{head} ({detail})" if detail and head else head or detail


def _detail_text(detail: Any) -> str:
    """distribution's detail: text, or a storage driver error such as
    {"DriverName": "filesystem", "Enclosed": {"Op": "write", "Path": "...", "Err": 28}}."""
    if not detail:
        return ""
    if isinstance(detail, str):
        return detail[:300]
    errno = _errno(detail)
    if isinstance(detail, Mapping) and errno is not None:
        inner = detail.get("Enclosed") if isinstance(detail.get("Enclosed"), Mapping) else detail
        where = " ".join(str(inner.get(k)) for k in ("Op", "Path") if inner.get(k))  # type: ignore[union-attr]
        driver = f"{detail.get('DriverName')}: " if detail.get("DriverName") else ""
        return f"{driver}{where}: {os.strerror(errno)} (errno {errno})".replace(" : ", ": ")[:300]
    return json.dumps(detail, sort_keys=True)[:300]


def _errno(detail: Any, depth: int = 0) -> int | None:
    """The numeric ``Err`` (an errno) somewhere in a storage driver's error detail."""
    if not isinstance(detail, Mapping) or depth > 4:
        return None
    err = detail.get("Err")
    if isinstance(err, int) and not isinstance(err, bool):
        return err
    return next((e for e in (_errno(v, depth + 1) for v in detail.values()) if e is not None), None)


@dataclass(frozen=True)
class Manifest:
    digest: str
    media_type: str
    config_digest: str | None
    raw: bytes = field(repr=False)


MAX_BLOB = 16 << 20  # an SBOM of thousands of packages is a few MB


def manifest_document(body: bytes, where: str) -> dict[str, Any]:
    """A manifest or index a registry served, through the one strict reader (bounded, strict JSON, an object):
    the staging registry holds what build jobs pushed, so its documents are untrusted input. RegistryError
    naming ``where`` otherwise."""
    from imagesmith.model import loader

    if len(body) > loader.MANIFEST_CAP:
        raise RegistryHTTPError(f"{where}: a manifest of {len(body):,} bytes, over the {loader.MANIFEST_CAP:,}-byte limit")
    try:
        doc = loader.parse_json(body, where)
    except loader.LoadError as exc:
        raise RegistryHTTPError(f"{exc}; nothing read from it is used") from None
    if not isinstance(doc, dict):
        raise RegistryHTTPError(f"{where}: the manifest is not a JSON object; nothing read from it is used")
    return doc


def entries(doc: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    """The objects of a manifest's list ``key`` (``manifests``, ``layers``); anything else in it is skipped."""
    found = doc.get(key)
    return [e for e in found if isinstance(e, dict)] if isinstance(found, list) else []


def as_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class PushedManifest:
    digest: str
    subject: str | None  # the OCI-Subject header: the registry indexed the subject itself


@dataclass(frozen=True)
class IndexEntry:
    """One platform's image manifest in an image index: its digest, media type and size, and the platform its
    config names (``linux``, ``arm64``)."""

    digest: str
    media_type: str
    size: int
    os: str
    architecture: str
    variant: str = ""

    @property
    def platform(self) -> str:
        return "/".join(filter(None, (self.os, self.architecture, self.variant)))

    def to_json(self) -> dict[str, Any]:
        platform = {"architecture": self.architecture, "os": self.os} | ({"variant": self.variant} if self.variant else {})
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size, "platform": platform}


def index_document(entries: Sequence[IndexEntry]) -> bytes:
    """An OCI image index (canonical JSON, platforms in a fixed order) of ``entries``: one manifest per platform,
    each pinned by digest; two manifests for one platform are a ValueError."""
    platforms = [e.platform for e in entries]
    twice = sorted({p for p in platforms if platforms.count(p) > 1})
    if twice:
        raise ValueError(f"an index holds one manifest per platform; {', '.join(twice)} came more than once")
    doc = {"schemaVersion": 2, "mediaType": OCI_INDEX,
           "manifests": [e.to_json() for e in sorted(entries, key=lambda e: e.platform)]}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def is_loopback(host: str) -> bool:
    """``host[:port]`` names this machine: localhost, 127.0.0.0/8, ::1 (the one loopback rule)."""
    if host.startswith("["):
        name = host[1:host.find("]")]
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
