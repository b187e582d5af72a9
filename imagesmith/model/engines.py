"""Which container engine imagesmith talks to, and the fixes that are that engine's own (pure: no I/O).

Both Docker and Podman answer the Docker API (Podman through ``podman system service``); what tells them apart
is what the engine says of itself:

* ``GET /version``: ``Components[].Name`` is ``Engine`` for Docker, ``Podman Engine`` for Podman (its
  ``Platform.Name`` is Docker's product name, or Podman's ``linux/amd64/debian-12``);
* ``GET /info``: Podman adds ``BuildahVersion`` and ``Rootless``; a rootless Docker lists ``name=rootless`` in
  ``SecurityOptions``.

:class:`EngineKind` is parsed once from those answers. Every fix imagesmith prints that names an engine's own
command (start it, log in, prune, GPUs, ulimits) comes from here, so Docker users read Docker's and Podman users
Podman's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

DOCKER, PODMAN = "Docker", "Podman"
PODMAN_SOCKET = "unix:///run/podman/podman.sock"  # `podman system service` as root; rootless: $XDG_RUNTIME_DIR/podman/podman.sock
# The GPU fix of each engine. Podman's Docker API drops --gpus (a device request of the capability gpu), every
# version: it takes GPUs by CDI names only, which it resolves from the specs in /etc/cdi and /var/run/cdi.
FIX_CDI_SPEC = "sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
FIX_DOCKER_TOOLKIT = ("sudo apt-get install -y nvidia-container-toolkit && sudo nvidia-ctk runtime configure --runtime=docker"
                      " && sudo systemctl restart docker")
FIX_PODMAN_GPU = f"{FIX_CDI_SPEC}   (Podman takes GPUs by CDI; nvidia-ctk comes with nvidia-container-toolkit)"
# runc sets each container's rlimits; above the hard limits it runs with (and without CAP_SYS_RESOURCE) it fails
# with "error setting rlimit type 7" (RLIMIT_NOFILE; 6 is RLIMIT_NPROC). Podman asks for 1048576 unless told less.
ULIMITS_FILE = "/etc/containers/containers.conf.d/imagesmith-ulimits.conf"
FIX_PODMAN_ULIMITS = (f'set default_ulimits at or below this host\'s hard limits (ulimit -Hn, ulimit -Hu) in containers.conf, e.g. '
                      f'{ULIMITS_FILE}: [containers] default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"], then restart '
                      'the Podman service (bash scripts/ensure-host.sh writes it)')
FIX_DOCKER_ULIMITS = ('set "default-ulimits" at or below this host\'s hard limits (ulimit -Hn, ulimit -Hu) in /etc/docker/daemon.json, '
                      'then: sudo systemctl restart docker')
RLIMIT_NAMES = {"6": "nproc", "7": "nofile"}
# Podman's words when the conmon it starts for a container exits before taking it: a service whose working
# folder was deleted (started in a checkout since removed) fails every container so, while still answering.
CONMON_GONE = "write child: broken pipe"


@dataclass(frozen=True)
class EngineKind:
    """An engine as it describes itself: Docker or Podman, its version, its API version, rootless or not
    (None: it did not say)."""

    name: str = DOCKER
    version: str = "?"
    api: str = "?"
    rootless: bool | None = None
    platform: str = ""  # os/arch of the engine's host (linux/amd64); "" when it did not say

    @classmethod
    def of(cls, info: Mapping[str, Any] | None, version: Mapping[str, Any] | None = None) -> EngineKind:
        """From ``docker info`` and (when asked) ``docker version``; either may be None or partial."""
        info, version = info or {}, version or {}
        name = _name(version) or (PODMAN if "BuildahVersion" in info or "Rootless" in info else DOCKER)
        return cls(name, str(version.get("Version") or info.get("ServerVersion") or "?"), str(version.get("ApiVersion") or "?"),
                   _rootless(info), _platform(version, info))

    @property
    def podman(self) -> bool:
        return self.name == PODMAN

    @property
    def cli(self) -> str:
        """The engine's own command line tool: ``docker`` or ``podman``."""
        return "podman" if self.podman else "docker"

    def describe(self) -> str:
        """``Podman 4.3.1 (API 1.41, rootful)``: what doctor, reports and errors call it."""
        mode = "" if self.rootless is None else ", rootless" if self.rootless else ", rootful"
        return f"{self.name} {self.version} (API {self.api}{mode})"

    def record(self) -> dict[str, Any]:
        """The reports' ``engine`` block."""
        return {"name": self.name, "version": self.version, "api": self.api, "rootless": self.rootless}

    def login_fix(self, host: str) -> str:
        return f"{self.cli} login {host}"

    @property
    def gpu_fix(self) -> str:
        """What gives this engine's containers GPUs."""
        return FIX_PODMAN_GPU if self.podman else FIX_DOCKER_TOOLKIT

    @property
    def ulimits_fix(self) -> str:
        return FIX_PODMAN_ULIMITS if self.podman else FIX_DOCKER_ULIMITS

    @property
    def prune_fix(self) -> str:
        if self.podman:
            return "podman image prune -a && podman builder prune   (or move graphroot in /etc/containers/storage.conf to a larger disk)"
        return "docker image prune -a && docker builder prune   (or move data-root in /etc/docker/daemon.json to a larger disk)"


def _name(version: Mapping[str, Any]) -> str:
    components = version.get("Components")
    names = [str(c.get("Name") or "") for c in components if isinstance(c, Mapping)] if isinstance(components, list) else []
    platform = version.get("Platform")
    product = str(platform.get("Name") or "") if isinstance(platform, Mapping) else ""
    if any(n.lower().startswith("podman") for n in names) or "podman" in product.lower():
        return PODMAN
    return DOCKER if names or product else ""


def _rootless(info: Mapping[str, Any]) -> bool | None:
    if isinstance(info.get("Rootless"), bool):  # Podman says so
        return bool(info["Rootless"])
    options = info.get("SecurityOptions")
    if isinstance(options, list):
        return any(str(o).startswith("name=rootless") for o in options)
    return None


def _platform(version: Mapping[str, Any], info: Mapping[str, Any]) -> str:
    os_name, arch = str(version.get("Os") or info.get("OSType") or ""), str(version.get("Arch") or "")
    return f"{os_name}/{arch}" if os_name and arch else ""


def guessed(docker_host: str) -> EngineKind:
    """The engine a ``DOCKER_HOST`` most likely names, for words said before (or without) asking it: a socket
    path with ``podman`` in it is Podman's (``podman system service`` listens there)."""
    return EngineKind(PODMAN if "podman" in docker_host.lower() else DOCKER)


def start_fix(docker_host: str) -> str:
    """How to start the engine ``DOCKER_HOST`` names (the local Docker socket when unset)."""
    if guessed(docker_host).podman:
        where = docker_host or PODMAN_SOCKET
        return (f"start Podman's Docker API there: podman system service --time=0 {where} &   (systemd: sudo systemctl "
                "start podman.socket; rootless: systemctl --user start podman.socket)")
    if docker_host:
        return f"check that the engine at DOCKER_HOST={docker_host} is up, or: unset DOCKER_HOST"
    return "sudo systemctl start docker   (not installed: sudo apt-get install -y docker.io)"


def rlimit_hint(words: str, kind: EngineKind) -> str:
    """runc's "error setting rlimit type N: operation not permitted" in plain words, with the fix (``""`` when
    ``words`` do not say that)."""
    at = words.find("error setting rlimit type ")
    if at < 0 or "operation not permitted" not in words[at:]:
        return ""
    number = words[at + len("error setting rlimit type "):].split(":", 1)[0].strip()
    limit = RLIMIT_NAMES.get(number, f"rlimit {number}")
    return (f"{kind.name}'s default ulimits exceed this host's hard limits (runc could not set {limit}: error setting rlimit "
            f"type {number}: operation not permitted); {kind.ulimits_fix}")


def conmon_hint(words: str, kind: EngineKind, docker_host: str = "") -> str:
    """Podman's "write child: broken pipe" in plain words, with the fix (``""`` for other words or engines)."""
    if not kind.podman or CONMON_GONE not in words:
        return ""
    return (f"Podman's service could not hand the container to conmon, which exited at once ({CONMON_GONE}); a service "
            "started in a folder that has since been deleted fails every container so: restart it from /   "
            f"(cd / && podman system service --time=0 {docker_host or PODMAN_SOCKET} &)")
