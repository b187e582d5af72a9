"""The two seams to the outside, as Protocols: :class:`EngineProtocol` (what the stages ask a container engine)
and :class:`RegistryProtocol` (what they ask an OCI registry), with the engine's plain values (ids, dicts, lines,
these dataclasses) that cross them.

Stages and the pipeline take these types, so they need neither docker nor a live registry: the real
:class:`~imagesmith.edges.engine.Engine` and :class:`~imagesmith.edges.registry.Registry` satisfy them (mypy
--strict checks it: tests/unit/edges/test_protocols.py), and so does every test double. Nothing here imports docker.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterable, Mapping, Protocol, Sequence

from imagesmith.edges.registry import Manifest, PushedManifest
from imagesmith.model.cdi import BindMount, DeviceMapping, Symlink
from imagesmith.model.engines import EngineKind

LineSink = Callable[[str], None]


@dataclass(frozen=True)
class ImageInfo:
    id: str
    tags: tuple[str, ...]
    labels: Mapping[str, str]
    size: int
    created: str
    repo_digests: tuple[str, ...] = ()
    parent: str = ""
    layers: tuple[str, ...] = ()  # RootFS diff IDs, base first
    config: "ImageConfig" = field(default_factory=lambda: ImageConfig())
    os: str = "linux"
    architecture: str = ""  # as the image config says: amd64, arm64 (empty: the engine did not say)
    variant: str = ""

    @property
    def platform(self) -> str:
        """``os/architecture[/variant]`` as OCI writes a platform (``linux/arm64``)."""
        return "/".join(filter(None, (self.os, self.architecture, self.variant)))


@dataclass(frozen=True)
class ImageConfig:
    """What the image runs when started plainly (``docker inspect`` .Config)."""

    user: str = ""
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ()  # KEY=value, as the engine lists them
    exposed_ports: tuple[str, ...] = ()

    @property
    def argv(self) -> list[str]:
        """What ``docker run IMAGE`` executes: ENTRYPOINT + CMD."""
        return [*self.entrypoint, *self.cmd]

    def env_map(self) -> dict[str, str]:
        return dict(item.partition("=")[::2] for item in self.env)


@dataclass
class RunResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    container_id: str = ""
    stdout_bytes: int = 0  # what the container wrote (stdout keeps only the last OUTPUT_LIMIT bytes)


@dataclass
class BuildOutcome:
    image_id: str | None
    error: str | None = None
    steps: int = 0
    cached_steps: int = 0
    stages: list[str] = field(default_factory=list)  # the last image of each earlier stage this build made (not cache)
    made: list[str] = field(default_factory=list)  # every step image this build made (not cache), in order
    _last: tuple[str, bool] | None = None  # the newest step image and whether it came from cache
    _cached: bool = False
    _stage_steps: dict[int, int] = field(default_factory=dict)  # steps of each stage (Podman numbers them per stage)


@dataclass
class RunSpec:
    """How to start a container (verify, inspect)."""

    image: str
    command: list[str]
    gpus: str = "none"  # "all" | "none" | "0,1"
    files: Mapping[str, bytes] = field(default_factory=dict)  # path in container -> bytes
    files_dir: str = "/opt/imagesmith"
    environment: Mapping[str, str] = field(default_factory=dict)
    shm_size: str | None = None
    mem_limit: str | None = None
    nano_cpus: int | None = None
    network_disabled: bool = True
    timeout_s: float = 600.0
    labels: Mapping[str, str] = field(default_factory=dict)
    user: str | None = None  # None: the image's own user
    on_stderr: LineSink | None = None  # live lines of the container's stderr (progress)
    network_mode: str | None = None  # "none": loopback only
    pids_limit: int | None = None
    entrypoint: list[str] | None = None  # None: command[0] replaces the image's ENTRYPOINT; else this runs command
    on_created: Callable[[str], None] | None = None  # told the container's full ID once it exists, before it starts
    # GPUs by CDI (imagesmith.stages.verify.gpus.apply): names an engine with CDI resolves itself, or what imagesmith
    # translated a spec's edits into for an engine without it
    cdi_devices: tuple[str, ...] = ()  # fully-qualified CDI names: nvidia.com/gpu=all (a device request of driver cdi)
    devices: tuple[DeviceMapping, ...] = ()  # host device nodes (docker --device HOST:CONTAINER:PERMISSIONS)
    mounts: tuple[BindMount, ...] = ()  # bind mounts, read-only unless the spec said rw
    links: tuple[Symlink, ...] = ()  # symbolic links placed in the container before it starts (put_archive)


class RunningProtocol(Protocol):
    """A started container (:meth:`EngineProtocol.started`)."""

    def running(self) -> bool: ...
    def exit_code(self) -> int | None: ...
    def logs(self, limit: int = ...) -> str: ...
    def exec(self, argv: list[str], timeout_s: float, user: str | None = None) -> tuple[int | None, str]: ...


class EngineProtocol(Protocol):
    """A container engine, as the stages use it (:class:`imagesmith.edges.engine.Engine` is the real one)."""

    def version(self) -> dict[str, Any]: ...
    def info(self) -> dict[str, Any]: ...
    def kind(self) -> EngineKind: ...
    def image(self, ref: str) -> ImageInfo | None: ...
    def image_config(self, ref: str) -> dict[str, Any]: ...
    def history(self, ref: str) -> list[dict[str, Any]]: ...
    def tag(self, image_id: str, repository: str, tag: str) -> None: ...
    def untag(self, ref: str) -> None: ...
    def tags_in(self, repository: str) -> list[str]: ...
    def remove_unused(self, image_id: str) -> bool: ...
    def remove_image(self, ref: str, force: bool = True, keep_parents: bool = False) -> None: ...
    def import_rootfs(self, tar_path: Path, repository: str, tag: str, changes: list[str]) -> str: ...
    def load(self, chunks: Iterable[bytes]) -> list[str]: ...
    def pull(self, ref: str, auth: Mapping[str, str] | None = None) -> ImageInfo: ...
    def push(self, repository: str, tag: str, auth: Mapping[str, str] | None, on_line: LineSink) -> str: ...
    def build(self, context: Path, tag: str, buildargs: Mapping[str, str], labels: Mapping[str, str],
              network_mode: str | None, on_line: LineSink, cancel: threading.Event | None = None,
              target: str | None = None, platform: str | None = None, cache_from: Sequence[str] = ()) -> BuildOutcome: ...
    def run(self, spec: RunSpec) -> RunResult: ...
    def started(self, spec: RunSpec) -> ContextManager[RunningProtocol]: ...
    def remove_containers(self, label: str, value: str) -> int: ...


class RegistryProtocol(Protocol):
    """An OCI registry's API, as publish, promote and evidence use it (:class:`imagesmith.edges.registry.Registry`
    is the real one): tags and manifests, blobs and uploads, referrers."""

    host: str

    def tags(self, repo: str) -> list[str]: ...
    def manifest(self, repo: str, ref: str) -> Manifest | None: ...
    def manifest_digest(self, repo: str, ref: str) -> str | None: ...
    def config(self, repo: str, digest: str) -> dict[str, Any]: ...
    def labels_of_config(self, repo: str, config_digest: str) -> dict[str, str]: ...
    def put_manifest(self, repo: str, tag: str, manifest: Manifest) -> str: ...
    def push_index(self, repo: str, tag: str, digests: Sequence[str]) -> str: ...
    def push_manifest(self, repo: str, ref: str, media_type: str, data: bytes) -> PushedManifest: ...
    def check_upload(self, repo: str) -> None: ...
    def blob(self, repo: str, digest: str) -> bytes: ...
    def has_blob(self, repo: str, digest: str) -> bool: ...
    def push_blob(self, repo: str, data: bytes) -> tuple[str, bool]: ...
    def mount_blob(self, repo: str, digest: str, from_repo: str) -> str | None: ...
    def blob_range(self, repo: str, digest: str, start: int, end: int) -> bytes: ...
    def start_upload(self, repo: str) -> str: ...
    def append_upload(self, repo: str, location: str, data: bytes, offset: int) -> str: ...
    def stream_upload(self, repo: str, location: str, chunks: Iterable[bytes]) -> str: ...
    def finish_upload(self, repo: str, location: str, digest: str) -> None: ...
    def cancel_upload(self, repo: str, location: str) -> None: ...
    def referrers(self, repo: str, digest: str) -> list[dict[str, Any]] | None: ...

