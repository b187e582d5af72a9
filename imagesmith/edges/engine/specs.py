"""What a container or a build is started with, in the engine's terms (pure but for the SDK's types): GPU device
requests (--gpus, CDI names), bind mounts, the files and links put into a container as tar archives, its network,
and the spec Podman's own API takes."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any, Iterable, Mapping

from docker.types import DeviceRequest, Mount
from docker.utils import parse_bytes

from imagesmith.edges.protocols import RunSpec
from imagesmith.errors import (
    GpuRequestDropped,
)
from imagesmith.model.cdi import BindMount, Symlink
from imagesmith.model.engines import EngineKind

LOG_BYTES = 64 << 20  # the same bound for a container Podman's own API creates (its k8s-file log)


NO_GPUS = ("", "none", "0 gpus")


def device_requests(gpus: str) -> list[DeviceRequest]:
    """``--gpus`` semantics: all, none, or a comma-separated list of indexes/UUIDs."""
    if gpus in NO_GPUS:
        return []
    if gpus == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    return [DeviceRequest(device_ids=[g.strip() for g in gpus.split(",") if g.strip()], capabilities=[["gpu"]])]


def cdi_requests(names: Iterable[str]) -> list[DeviceRequest]:
    """CDI device names (``nvidia.com/gpu=all``) for an engine that resolves them itself: what ``docker run
    --device nvidia.com/gpu=all`` sends to Docker 25 and newer."""
    found = [n for n in names if n]
    return [DeviceRequest(driver="cdi", device_ids=found)] if found else []


def bind_mounts(mounts: Iterable[BindMount]) -> list[Mount]:
    return [Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only) for m in mounts]


def tar_links(links: Iterable[Symlink]) -> bytes:
    """A tar of symbolic links at their absolute paths (the engine makes missing parent folders, root-owned 0755;
    an existing folder is left as it is)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for link in links:
            info = tarfile.TarInfo(link.path.lstrip("/"))
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, link.target, 0o777
            tar.addfile(info)
    return buf.getvalue()


def network_of(spec: RunSpec) -> dict[str, Any]:
    """The container's network: ``spec.network_mode``, else loopback only (Docker's ``none`` network) where the
    network is disabled. Not the API's NetworkDisabled: a container made with it gets an empty /etc/hosts, so
    ``localhost`` does not resolve and torchrun's rendezvous (DDP, NCCL checks) hangs until its timeout."""
    if spec.network_mode:
        return {"network_mode": spec.network_mode}
    return {"network_mode": "none"} if spec.network_disabled else {}


def tar_files(files: Mapping[str, bytes], root: str) -> bytes:
    """A tar of ``files`` under ``root`` (directories included, world-readable)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        leaves = {Path(root, name).parent for name in files} | {Path(root)}
        dirs = sorted({str(p) for leaf in leaves for p in [leaf, *leaf.parents] if str(p) != "/"})
        for d in dirs:
            info = tarfile.TarInfo(d.lstrip("/"))
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(str(Path(root, name)).lstrip("/"))
            info.size, info.mode = len(data), 0o755 if name.endswith((".sh", ".py")) else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def libpod_spec(spec: RunSpec, entrypoint: list[str], args: list[str]) -> dict[str, Any]:
    """``spec`` as Podman's own container-create body (its SpecGenerator, ``POST /libpod/containers/create``): the
    one way to give a Podman container CDI devices by name, which its Docker API does not take before Podman 5.5
    (``HostConfig.Devices`` must be paths there; device requests are dropped). Podman resolves the names from its
    host's specs when the container starts, and refuses one no spec offers."""
    body: dict[str, Any] = {
        "image": spec.image, "entrypoint": entrypoint, "command": args, "env": dict(spec.environment),
        "labels": dict(spec.labels), "log_configuration": {"driver": "k8s-file", "size": LOG_BYTES},
        "devices": [{"path": name} for name in spec.cdi_devices] + [{"path": d.docker()} for d in spec.devices],
    }
    if spec.user:
        body["user"] = spec.user
    if spec.shm_size:
        body["shm_size"] = parse_bytes(spec.shm_size)
    limits: dict[str, Any] = {}
    if spec.mem_limit:
        limits["memory"] = {"limit": parse_bytes(spec.mem_limit)}
    if spec.nano_cpus:
        limits["cpu"] = {"period": 100000, "quota": spec.nano_cpus * 100000 // 10**9}
    if spec.pids_limit:
        limits["pids"] = {"limit": spec.pids_limit}
    if limits:
        body["resource_limits"] = limits
    mode = network_of(spec).get("network_mode")
    if mode:
        body["netns"] = {"nsmode": mode}
    if spec.mounts:
        body["mounts"] = [{"destination": m.target, "source": m.source, "type": "bind",
                           "options": ["rbind", "ro" if m.read_only else "rw"]} for m in spec.mounts]
    return body


def dropped(attrs: Mapping[str, Any], spec: RunSpec, kind: EngineKind, doing: str) -> GpuRequestDropped | None:
    """A GPU request the engine took without a word and did not honour, read from the created container
    (``docker inspect``): device requests that came back empty (Podman's Docker API drops them), device nodes
    that came back empty. None when what was asked is there (or nothing was)."""
    host = attrs.get("HostConfig") or {}
    by_name = () if kind.podman else spec.cdi_devices  # Podman takes CDI names by its own API (libpod_spec)
    asked = ([f"--gpus {spec.gpus}"] if spec.gpus not in NO_GPUS else []) + [f"the CDI devices {', '.join(by_name)}"] * bool(by_name)
    if asked and not host.get("DeviceRequests"):
        why = (f"{kind.name}'s Docker API drops GPU device requests; it takes GPUs by CDI names (verify --gpu-runtime auto "
               "or cdi)" if kind.podman else "the engine ignored them")
        return GpuRequestDropped(f"{doing}: {kind.describe()} created it without the GPUs asked for ({' and '.join(asked)}: "
                                 f"HostConfig.DeviceRequests came back empty): {why}", fix=kind.gpu_fix)
    if spec.devices and not host.get("Devices"):
        return GpuRequestDropped(f"{doing}: {kind.describe()} created it without the {len(spec.devices)} device nodes asked "
                                 "for (HostConfig.Devices came back empty)", fix=kind.gpu_fix)
    return None
