"""The matrix as frozen records: what matrix.yaml becomes once it is validated (pure).

:mod:`imagesmith.model.matrix.sections` builds them from the located YAML; nothing
downstream indexes raw dicts. Functions here read records only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from imagesmith.errors import Problem
from imagesmith.model import platform as platforms
from imagesmith.model import vulns
from imagesmith.model.located import KeyPath, dotted, line_of
from imagesmith.model.paths import Roots
from imagesmith.model.platform import Platform
from imagesmith.model.tags import TagPolicy
from imagesmith.model.versions import matches, version_key

AXES = ("torch", "cuda", "python", "os")
PLATFORM = "platform"  # the fifth axis: optional (default linux/amd64), so a cell is named by the four above
BUILTIN_PARENTS = {"base": None, "cv": "base", "nlp": "base", "project": "cv"}
TIERS = ("quick", "standard", "soak")

# --------------------------------------------------------------------------
# records


@dataclass(frozen=True)
class Cell:
    """One combination of the axes, as written in the matrix."""

    torch: str
    cuda: str
    python: str
    os: str
    cudnn: str | None = None
    origin: tuple[KeyPath, ...] = field(default=(), compare=False)  # where torch, cuda, python, os (, platform) were written
    platform: Platform = platforms.DEFAULT

    def label(self) -> str:
        words = [f"{a}={getattr(self, a)}" for a in AXES]
        return " ".join(words + ([f"platform={self.platform}"] if self.platform is not platforms.DEFAULT else []))

    def where(self) -> dict[str, KeyPath]:
        """Axis -> where it was written (``platform`` where it was written at all)."""
        return dict(zip((*AXES, PLATFORM), self.origin)) if len(self.origin) >= len(AXES) else {}


@dataclass(frozen=True)
class Jupyter:
    enabled: bool = False
    bind: str = "127.0.0.1"
    port: int = 8888
    version: str = "4.4.10"


@dataclass(frozen=True)
class Sshd:
    enabled: bool = False
    port: int = 2222


@dataclass(frozen=True)
class Layer:
    name: str
    parent: str | None
    packages: tuple[str, ...] = ()
    apt: tuple[str, ...] = ()
    requirements: Path | None = None
    requirements_data: bytes = b""  # the bytes validate checked; render copies these, never re-reads the path
    requirements_pins: tuple[str, ...] = ()  # its pinned lines, name==version
    env: tuple[tuple[str, str], ...] = ()
    base_from: str = "os"
    toolchain: bool = True
    cuda_libs: str = "shared"
    template: str = ""
    template_path: Path | None = None  # a template of the user's (trusted code, rendered sandboxed)
    jupyter: Jupyter = Jupyter()
    sshd: Sshd = Sshd()
    when: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def applies_to(self, cell: "Cell") -> bool:
        """Whether this layer is built for ``cell`` (``when:`` filter; a platform is matched whole)."""
        return all(str(cell.platform) in values if axis == PLATFORM else matches_any(getattr(cell, axis), values)
                   for axis, values in self.when)


def matches_any(value: str, wanted: Sequence[str]) -> bool:
    return any(matches(w, value) for w in wanted)


@dataclass(frozen=True)
class VerifyPolicy:
    tier: str = "quick"
    gpus: str = "all"
    # None: true for CUDA cells (a CUDA image is verified on a GPU), false for CPU cells.
    # false lets a CUDA image pass verification in CPU mode; floating tags still need a GPU.
    require_gpu: bool | None = None
    shm_size: str = "8g"
    memory: str | None = None
    timeout_s: int = 900
    thresholds: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Credential:
    host: str
    username_env: str | None = None
    password_env: str | None = None
    file: Path | None = None


@dataclass(frozen=True)
class Sources:
    torch_index_url: str | None = None
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()
    ca_bundle: Path | None = None
    ca_bundle_data: bytes = b""
    http_proxy: str | None = None
    https_proxy: str | None = None
    no_proxy: str | None = None
    network: str = "default"
    credentials: tuple[Credential, ...] = ()
    advisories: tuple[str, ...] = ()  # OSV snapshots: a zip (all.zip) or folder inside the roots, or an http(s) URL

    @property
    def ca_on_loopback(self) -> bool:
        """The build fetches the CA bundle from imagesmith's loopback server (reached only with ``network: host``)."""
        return self.ca_bundle is not None and self.network == "host"


@dataclass(frozen=True)
class ImageSpec:
    repository: str
    registry: str | None = None
    user: str = "ml"
    uid: int = 1000
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.repository}" if self.registry else self.repository


@dataclass(frozen=True)
class Matrix:
    file: Path
    image: ImageSpec
    cells: tuple[Cell, ...]
    layers: tuple[Layer, ...]  # parents before children
    base_images: Mapping[str, str]
    tags: TagPolicy
    verify: VerifyPolicy
    sources: Sources
    warnings: tuple[Problem, ...] = ()
    vulnerabilities: vulns.Policy = field(default_factory=vulns.Policy)
    lines: Mapping[KeyPath, int] = field(default_factory=dict, compare=False, repr=False)
    roots: Roots | None = field(default=None, compare=False, repr=False)

    def problem(self, path: KeyPath, message: str) -> Problem:
        """A problem found after loading (at plan time), located at the line of ``path``."""
        return Problem(message, self.file.name, line_of(self.lines, path), dotted(path))

    def layer(self, name: str) -> Layer:
        return next(layer for layer in self.layers if layer.name == name)


def base_image_for(base_images: Mapping[str, str], os_key: str, platform: str) -> str | None:
    """The plain base an OS key names for ``platform``: its per-platform entry, else its one for every platform."""
    return base_images.get(f"{os_key}@{platform}") or base_images.get(os_key)


def sort_cells(cells: Iterable[Cell]) -> list[Cell]:
    """A stable order for cells: torch, cuda, python, os by version."""
    def key(c: Cell) -> tuple[Any, ...]:
        cuda = (0,) if c.cuda == "cpu" else version_key(c.cuda)
        return (version_key(c.torch), cuda, version_key(c.python), c.os, list(Platform).index(c.platform))
    return sorted(cells, key=key)
