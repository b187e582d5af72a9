"""One image reference, parsed once by the reference grammar (pure).

``[host[:port]/]repository[:tag][@digest]`` as github.com/distribution/reference parses it (kept in Python
by ``docker-image-py``); the host is split off by Docker's rule: a first component with a dot or a port, or
``localhost``, is a registry host, anything else is a path on Docker Hub. Every module that needs a part of a
reference asks an :class:`ImageRef` instead of cutting the string at ``@``, ``:`` or ``/``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from docker_image import reference

from imagesmith.errors import UserError
from imagesmith.model.located import printable

DOCKER_HUB = "docker.io"  # the registry a reference names when it names none: Docker Hub's one name here


def names_host(component: str) -> bool:
    """Docker's rule for the first component of a name: a dot, a port or ``localhost`` make it a registry host;
    anything else is a path on Docker Hub."""
    return "." in component or ":" in component or component == "localhost"


def host_of(name: str) -> str:
    """The host of ``host[:port][/path]`` (a registry the operator or an artifact names, with or without its
    repository), as written."""
    return name.split("/", 1)[0]


@dataclass(frozen=True)
class ImageRef:
    host: str  # the registry named in the reference, '' when it names none (Docker Hub)
    repository: str  # the path on that registry
    tag: str | None = None
    digest: str | None = None  # algorithm:hex

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        """``text`` as a reference, or a UserError saying why it is not one and what to write."""
        try:
            parsed = reference.Reference.parse(text)
        except reference.InvalidReference as exc:
            raise UserError(f"{printable(text)} is not an image reference ({exc}); "
                            "write e.g. ubuntu:24.04 or registry.example.com/base/ubuntu@sha256:...") from None
        name = str(parsed["name"])
        first, sep, rest = name.partition("/")
        host, path = (first, rest) if sep and names_host(first) else ("", name)
        return cls(host, path, parsed["tag"] or None, parsed["digest"] or None)

    @classmethod
    def maybe(cls, text: str) -> ImageRef | None:
        """``text`` as a reference, or None (for text read back from an engine or an artifact)."""
        try:
            return cls.parse(text)
        except UserError:
            return None

    @property
    def name(self) -> str:
        """``host/repository`` (``repository`` alone when the reference names no host)."""
        return f"{self.host}/{self.repository}" if self.host else self.repository

    @property
    def basename(self) -> str:
        """The last component of the repository path (``pytorch`` of ``reg/ml/pytorch``): an OCI purl's name."""
        return self.repository.rsplit("/", 1)[-1]

    @property
    def registry(self) -> str:
        """The registry the reference names: its host, else Docker Hub."""
        return self.host or DOCKER_HUB

    @property
    def pinned(self) -> bool:
        """Pinned by a sha256 digest (the one digest a registry and the engine resolve)."""
        return bool(self.digest and self.digest.startswith("sha256:"))

    @property
    def sha256(self) -> str:
        """The digest of a reference pinned by sha256 (a ValueError for any other: a reference that must be
        pinned is parsed by a rule that requires the digest, e.g. the fleet's ``parse_ref``)."""
        if self.digest is None or not self.pinned:
            raise ValueError(f"{self} is not pinned by a sha256 digest")
        return self.digest

    def with_tag(self, tag: str | None) -> ImageRef:
        return replace(self, tag=tag)

    def with_digest(self, digest: str | None) -> ImageRef:
        return replace(self, digest=digest)

    def __str__(self) -> str:
        return self.name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")
