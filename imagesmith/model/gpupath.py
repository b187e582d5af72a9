"""How GPUs reach a container, chosen by one pure function (:func:`choose`) from what the engine says of itself
(``docker info``), where it is, and what the CDI specs on this host offer.

The paths:

* ``nvidia``: the engine's ``--gpus`` (a device request for the capability ``gpu``), served by the NVIDIA
  container runtime or its hook;
* ``cdi-engine``: the engine resolves CDI device names itself (Docker >= 25 with CDI on lists ``CDISpecDirs`` in
  ``docker info``): imagesmith passes ``nvidia.com/gpu=all``;
* ``cdi-translated``: an engine without CDI (Debian's Docker 20.10): imagesmith reads the specs on this host and
  gives the container their device nodes, mounts, environment and links itself (:func:`imagesmith.model.cdi.translate`);
* ``none``: no GPU (``--gpus none``, or the fallback when nothing gives one).

Podman (:class:`imagesmith.model.engines.EngineKind`) resolves CDI names itself, from ``/etc/cdi`` and
``/var/run/cdi`` (Podman 3.2 and newer), and its Docker API drops ``--gpus`` (every version): on Podman ``auto`` is
always ``cdi-engine``, with the specs of this host when the engine is here (or the names alone, tried, where no spec
offers them: Podman then refuses them, saying why), and ``--gpu-runtime nvidia`` is a request the engine does not
honour, which the engine edge detects after create.

``--gpu-runtime auto`` (the default) takes ``nvidia`` when the engine lists an ``nvidia`` runtime; else CDI when the
engine is on this host and a spec here offers the devices asked for; else it tries ``--gpus`` (a hook may serve it)
and, refused, falls back to the engine's own CDI when it has one, else to CPU mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from imagesmith.errors import UserError
from imagesmith.model.cdi import DEFAULT_DIRS, listed
from imagesmith.model.engines import FIX_CDI_SPEC as FIX_CDI_SPEC  # re-exported: the fix verify and doctor name
from imagesmith.model.engines import EngineKind

NVIDIA, CDI_ENGINE, CDI_TRANSLATED, NONE = "nvidia", "cdi-engine", "cdi-translated", "none"
PATHS = (NVIDIA, CDI_ENGINE, CDI_TRANSLATED, NONE)
RUNTIMES = ("auto", "nvidia", "cdi")
FIX_CDI_ON = 'add "features": {"cdi": true} to /etc/docker/daemon.json (Docker 25 or newer), then: sudo systemctl restart docker'


@dataclass(frozen=True)
class EngineGpu:
    """What the engine says that decides the path: an ``nvidia`` runtime, its CDI folders, and where it is."""

    nvidia_runtime: bool = False
    cdi_dirs: tuple[str, ...] = ()  # CDISpecDirs: set when the engine resolves CDI names itself
    docker_host: str = ""  # DOCKER_HOST ("" or unix://: this host)
    podman: bool = False  # Podman: CDI names only (its Docker API drops --gpus)

    @classmethod
    def of(cls, info: Mapping[str, Any], docker_host: str = "") -> EngineGpu:
        runtimes, dirs = info.get("Runtimes"), info.get("CDISpecDirs")
        folders = tuple(str(d) for d in dirs) if isinstance(dirs, (list, tuple)) else ()
        if EngineKind.of(info).podman:  # an nvidia runtime in containers.conf does not make its Docker API take --gpus
            return cls(False, folders or DEFAULT_DIRS, docker_host, podman=True)
        return cls("nvidia" in runtimes if isinstance(runtimes, Mapping) else False, folders, docker_host)

    @property
    def local(self) -> bool:
        return not self.docker_host or self.docker_host.startswith("unix://")

    @property
    def native_cdi(self) -> bool:
        return bool(self.cdi_dirs)


@dataclass(frozen=True)
class Lookup:
    """The CDI specs on this host against the device names asked for."""

    names: tuple[str, ...] = ()
    dirs: tuple[str, ...] = ()  # the folders read
    files: tuple[str, ...] = ()  # the spec files defining every name (empty: they do not)
    problem: str = ""  # why not: no spec in the folders, or a name no spec offers


@dataclass(frozen=True)
class GpuPath:
    """The path a run takes, why, and (``then``) where it goes when the engine refuses ``--gpus``."""

    path: str
    why: str
    devices: tuple[str, ...] = ()  # CDI device names (the CDI paths)
    specs: tuple[str, ...] = ()  # the spec files they come from (read here)
    then: GpuPath | None = None

    def record(self, notes: tuple[str, ...] = ()) -> dict[str, Any]:
        """The verify report's ``gpu_path`` block."""
        return {"path": self.path, "why": self.why, "devices": list(self.devices), "specs": list(self.specs),
                "notes": list(notes)}


def wants_specs(runtime: str, gpus: str, engine: EngineGpu) -> bool:
    """Whether :func:`choose` needs the specs of this host (they are read only then)."""
    if gpus in ("", "none") or runtime == "nvidia" or not engine.local:
        return False
    return runtime == "cdi" or not engine.nvidia_runtime


def choose(runtime: str, gpus: str, engine: EngineGpu, lookup: Lookup = Lookup()) -> GpuPath:
    """The GPU path for ``--gpu-runtime runtime --gpus gpus`` (see the module docstring); ``cdi`` that cannot be
    had is a UserError saying why and what to do."""
    if gpus in ("", "none"):
        return GpuPath(NONE, "--gpus none: CPU mode")
    if runtime == "nvidia":
        return GpuPath(NVIDIA, "--gpu-runtime nvidia: the engine's --gpus")
    if runtime == "cdi":
        return _cdi(engine, lookup)
    if engine.podman:
        if engine.local and lookup.files:
            return _by_specs(engine, lookup, "Podman takes GPUs by CDI")
        return GpuPath(CDI_ENGINE, f"Podman takes GPUs by CDI only (its Docker API drops --gpus) and {_no_cdi(engine, lookup)}: "
                                   "the names, tried (Podman refuses a name no spec of its host offers)", lookup.names)
    if engine.nvidia_runtime:
        return GpuPath(NVIDIA, "the engine lists an nvidia runtime: its --gpus")
    if engine.local and lookup.files:
        return _by_specs(engine, lookup, "the engine lists no nvidia runtime")
    then = (GpuPath(CDI_ENGINE, f"the engine refused --gpus and resolves CDI devices itself (CDISpecDirs "
                                f"{', '.join(engine.cdi_dirs)})", lookup.names) if engine.native_cdi else None)
    return GpuPath(NVIDIA, f"the engine lists no nvidia runtime and {_no_cdi(engine, lookup)}: its --gpus, tried", then=then)


def _cdi(engine: EngineGpu, lookup: Lookup) -> GpuPath:
    if not engine.local:
        if engine.native_cdi:
            return GpuPath(CDI_ENGINE, f"--gpu-runtime cdi: the engine at DOCKER_HOST={engine.docker_host} resolves CDI "
                                       "devices itself", lookup.names)
        raise UserError(f"--gpu-runtime cdi: the engine at DOCKER_HOST={engine.docker_host} is not on this host and has "
                        "no CDI of its own (docker info lists no CDISpecDirs), and the CDI specs here say nothing of its "
                        f"devices; turn CDI on there ({FIX_CDI_ON}), or run verify on that host")
    if not lookup.files:
        raise UserError(f"--gpu-runtime cdi: {lookup.problem or 'no CDI spec was read'}")
    return _by_specs(engine, lookup, "--gpu-runtime cdi")


def _by_specs(engine: EngineGpu, lookup: Lookup, why: str) -> GpuPath:
    found = f"{listed(lookup.files)} define{'s' if len(lookup.files) == 1 else ''} {listed(lookup.names)}"
    if engine.native_cdi:
        return GpuPath(CDI_ENGINE, f"{why}; {found}, and the engine resolves CDI devices itself", lookup.names, lookup.files)
    return GpuPath(CDI_TRANSLATED, f"{why}; {found}; the engine has no CDI: imagesmith applies the specs' edits itself",
                   lookup.names, lookup.files)


def _no_cdi(engine: EngineGpu, lookup: Lookup) -> str:
    if not engine.local:
        return f"is not on this host (DOCKER_HOST={engine.docker_host}), so the CDI specs here say nothing of it"
    return lookup.problem or "no CDI spec was read"


def no_spec(dirs: tuple[str, ...]) -> str:
    """Lookup.problem when the folders hold no spec."""
    return f"no CDI spec in {' or '.join(dirs) or 'no folder'}; write NVIDIA's: {FIX_CDI_SPEC}"
