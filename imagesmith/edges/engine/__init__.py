"""The only module that imports docker: build, run, inspect, import, tag, push.

``docker.from_env()`` honours ``DOCKER_HOST`` (unix://, tcp://, ssh://),
``DOCKER_TLS_VERIFY`` and ``DOCKER_CERT_PATH``, so remote engines work.
Everything here speaks in plain values (ids, dicts, lines) so that callers and
tests never touch docker objects, and every docker SDK exception (and its
transport's, requests) leaves as one of ours (:func:`engine_error`): the
engine's own words in the message, cases a caller must tell apart as types
(:class:`GpuRuntimeMissing`, :class:`CommandNotFound`, :class:`RegistryHTTPError`
with its HTTP status). No caller reads docker's messages.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import tarfile
import threading
import warnings
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import docker
import docker.auth
import docker.errors
import requests
import urllib3.exceptions
from docker.types import DeviceRequest, LogConfig, Mount
from docker.utils import parse_bytes

from imagesmith.edges.protocols import BuildOutcome as BuildOutcome  # re-exported: the engine's plain values live with its protocol
from imagesmith.edges.protocols import ImageConfig as ImageConfig
from imagesmith.edges.protocols import ImageInfo as ImageInfo
from imagesmith.edges.protocols import LineSink as LineSink
from imagesmith.edges.protocols import RunResult as RunResult
from imagesmith.edges.protocols import RunSpec as RunSpec
from imagesmith.edges.registry import ENV_PASSWORD, ENV_USER, RegistryHTTPError, RegistryUnreachable, is_loopback, registry_hint
from imagesmith.edges.registry import registry_host as registry_host  # re-exported: the engine's callers name hosts through it
from imagesmith.errors import (
    CommandNotFound,
    ContainerRefused,
    EngineConnectionLost,
    EngineError,
    GpuRequestDropped,
    GpuRuntimeMissing,
    ImagesmithError,
    RegistryError,
    UserError,
    one_line,
)
from imagesmith.model import engines
from imagesmith.model.cdi import BindMount, Symlink
from imagesmith.model.engines import EngineKind
from imagesmith.model.ref import DOCKER_HUB, ImageRef

RUN_LABEL = "io.imagesmith.run"  # on every container imagesmith starts: which run made it
# A build step as each engine's builder writes it: Docker's classic builder "Step 3/15 : RUN ...", Podman's (buildah)
# "[1/2] STEP 3/15: RUN ..." in a multi-stage build (stage 1 of 2, its step 3 of 15) and "STEP 3/15: RUN ..." in one
# stage. The image a step made (or found in cache): Docker " ---> d504a664cb0f", Podman "--> d504a664cb0".
STEP = re.compile(r"^(?:\[(\d+)/(\d+)\] )?(?:Step (\d+)/(\d+) :|STEP (\d+)/(\d+):)( FROM )?", re.I)
STEP_IMAGE = re.compile(r"^(?: --->|-->) ([0-9a-f]{11,64})$")


OUTPUT_LIMIT = 64 << 20  # bytes of a container's stdout kept (the tail: the payload's report is its last line)
STDERR_LIMIT = 1 << 20
LINE_LIMIT = 64 << 10  # a progress line longer than this is cut
# The engine keeps at most this much of a container's output on disk, whatever it prints.
LOG_CONFIG = LogConfig(type=LogConfig.types.JSON, config={"max-size": "64m", "max-file": "2"})
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


class Engine:
    """A Docker engine. ``client`` is a seam for tests; default: from the environment."""

    def __init__(self, client: Any = None, timeout: int = 600) -> None:
        self._client = client
        self._timeout = timeout
        self._kind: EngineKind | None = None

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                self._client = docker.from_env(timeout=self._timeout)
                self._client.ping()
            except (docker.errors.DockerException, requests.exceptions.RequestException, ValueError) as exc:  # ValueError: a DOCKER_HOST that is no URL
                self._client = None
                raise EngineError(unreachable(os.environ.get("DOCKER_HOST", ""), _socket_reason(exc))) from None
        return self._client

    # -- facts ---------------------------------------------------------------
    def version(self) -> dict[str, Any]:
        with docker_errors("asking the engine for its version"):
            return dict(self.client.version())

    def info(self) -> dict[str, Any]:
        with docker_errors("asking the engine for its facts (docker info)"):
            return dict(self.client.info())

    def kind(self) -> EngineKind:
        """Docker or Podman, its version, rootless or not (asked once): what decides the engine's own ways and fixes."""
        if self._kind is None:
            self._kind = EngineKind.of(self.info(), self.version())
        return self._kind

    def image(self, ref: str) -> ImageInfo | None:
        with docker_errors(f"inspecting {ref}"):
            try:
                img = self.client.images.get(ref)
            except docker.errors.ImageNotFound:
                return None
            except docker.errors.APIError as exc:
                if exc.status_code in (400, 404):  # 400: no valid reference, so no such image
                    return None
                raise
            return _info(img.attrs, self.kind().podman)

    def images_with_label(self, key: str, value: str | None = None) -> list[ImageInfo]:
        """Tagged images with this label (children inherit labels, so this
        also finds descendants)."""
        flt = f"{key}={value}" if value is not None else key
        with docker_errors(f"listing the images labelled {flt}"):
            images = self.client.images.list(filters={"label": flt})
        return [_info(i.attrs, self.kind().podman) for i in images]

    def history(self, ref: str) -> list[dict[str, Any]]:
        with docker_errors(f"reading the history of {ref}"):
            return list(self.client.api.history(ref))

    # -- images ----------------------------------------------------------------
    def tag(self, image_id: str, repository: str, tag: str) -> None:
        with docker_errors(f"tagging {image_id[:19]} as {repository}:{tag}"):
            if not self.client.api.tag(image_id, repository, tag, force=True):
                raise EngineError(f"could not tag {image_id[:19]} as {repository}:{tag}")

    def untag(self, ref: str) -> None:
        """Remove one tag; the image stays while other tags or children use it."""
        self._remove_image(ref, f"removing {ref}", force=False, noprune=False, keep=(404, 409))

    def tags_in(self, repository: str) -> list[str]:
        """Every ``repository:tag`` reference in the engine."""
        with docker_errors(f"listing {repository}"):
            images = self.client.api.images(name=repository)
        podman = self.kind().podman
        tags = (familiar(t, podman) for i in images for t in i.get("RepoTags") or ())
        return sorted(t for t in tags if _name_of(t) == repository)

    def remove_unused(self, image_id: str) -> bool:
        """Remove an image (and its untagged parents) unless it is tagged, has children or
        is in use; True when it went."""
        return self._remove_image(image_id, f"removing {image_id[:19]}", force=False, noprune=False, keep=(404, 409))

    def remove_image(self, ref: str, force: bool = True, keep_parents: bool = False) -> None:
        """Remove an image; ``keep_parents``: not its untagged parents (other builds may stand on them)."""
        self._remove_image(ref, f"removing {ref}", force=force, noprune=keep_parents, keep=(404,))

    def _remove_image(self, ref: str, doing: str, force: bool, noprune: bool, keep: tuple[int, ...]) -> bool:
        """True when it went; False when the engine answered a status in ``keep`` (404: not there;
        409: in use by a container, a child or another tag)."""
        with docker_errors(doing):
            try:
                self.client.api.remove_image(ref, force=force, noprune=noprune)
            except docker.errors.APIError as exc:
                if exc.status_code in keep:
                    return False
                raise
        return True

    def import_rootfs(self, tar_path: Path, repository: str, tag: str, changes: list[str]) -> str:
        """``docker import``: a root file system tarball becomes an image."""
        with docker_errors(f"docker import of {tar_path} as {repository}:{tag}"):
            out = self.client.api.import_image_from_file(str(tar_path), repository=repository, tag=tag, changes=changes)
        status = json.loads(out.strip().splitlines()[-1]) if isinstance(out, str) else out
        if "error" in status:
            raise EngineError(f"docker import failed: {status['error']}")
        info = self.image(f"{repository}:{tag}")
        if info is None:
            raise EngineError(f"docker import reported {status} but {repository}:{tag} is not there")
        return info.id

    def image_config(self, ref: str) -> dict[str, Any]:
        """An image's config exactly as stored (the JSON whose sha256 is its ID),
        read from ``docker save`` (layers are skipped, not kept)."""
        info = self.image(ref)
        if info is None:
            raise EngineError(f"image {ref} is not in the engine")
        name = info.id.split(":", 1)[1] + ".json"
        with docker_errors(f"reading the config of {ref}"), \
                tarfile.open(fileobj=_ChunkReader(self.client.api.get_image(info.id)), mode="r|") as tar:
            for member in tar:
                if member.name == name:
                    data = tar.extractfile(member)
                    return _config_document(data.read(MAX_CONFIG + 1) if data else b"{}", ref)
        raise EngineError(f"docker save of {ref} holds no {name}")

    def load(self, chunks: Iterable[bytes]) -> list[str]:
        """``docker load`` of an archive streamed from ``chunks``; the images it loaded."""
        loaded = []
        with docker_errors("docker load failed"):
            for event in self.client.api.load_image(chunks):
                if "error" in event or "errorDetail" in event:
                    raise EngineError(f"docker load failed: {event.get('error') or event.get('errorDetail')}")
                text = str(event.get("stream", ""))
                if text.startswith("Loaded image"):
                    loaded.append(familiar(text.split(":", 1)[1].strip(), self.kind().podman))
        return loaded

    def pull(self, ref: str, auth: Mapping[str, str] | None = None) -> ImageInfo:
        parsed = ImageRef.parse(ref)
        repo, tag = (str(parsed), None) if parsed.digest else (parsed.name, parsed.tag or "latest")  # a digest stays whole
        with docker_errors(f"pulling {ref}"):
            try:
                self.client.api.pull(repo, tag=tag, auth_config=dict(auth) if auth else None)
            except docker.errors.APIError as exc:
                status = exc.status_code if exc.status_code in (401, 403, 404) else _status_of(said(exc), {})
                login = self.kind().login_fix(registry_host(ref))
                raise RegistryError(registry_hint(ref, status, said(exc), "pull", login=login)) from None
        info = self.image(ref)
        if info is None:
            raise RegistryError(f"pulled {ref} but it is not in the engine")
        return info

    def push(self, repository: str, tag: str, auth: Mapping[str, str] | None, on_line: LineSink) -> str:
        """Push; return the manifest digest the registry answered with."""
        digest, ref = "", f"{repository}:{tag}"
        with docker_errors(f"push {ref}"):
            try:
                if self.kind().podman and is_loopback(registry_host(ref)):
                    stream = self._podman_push(repository, tag, auth)
                else:
                    stream = self.client.api.push(repository, tag=tag, auth_config=dict(auth) if auth else None, stream=True, decode=True)
            except docker.errors.APIError as exc:  # refused before it started (no such tag here, a bad name)
                raise push_error(ref, said(exc), {"code": exc.status_code} if exc.status_code else {}, self.kind()) from None
            digest = _push_stream(stream, ref, on_line, self.kind())
        if not digest:
            raise RegistryError(f"push of {ref} ended without a digest from the registry")
        return str(digest)


    def _podman_push(self, repository: str, tag: str, auth: Mapping[str, str] | None) -> Any:
        """A push through Podman's Docker API to a registry on this machine, over plain HTTP as Docker allows for
        127.0.0.0/8 without configuration: Podman's ``tlsVerify=false`` (the SDK's push has no such parameter)."""
        api = self.client.api
        headers = {"X-Registry-Auth": docker.auth.encode_header(dict(auth))} if auth else {}
        response = api._post(api._url("/images/{0}/push", repository), params={"tag": tag, "tlsVerify": "false"},
                             headers=headers, stream=True, timeout=None)
        api._raise_for_status(response)
        return api._stream_helper(response, decode=True)

    # -- build -------------------------------------------------------------------
    def build(self, context: Path, tag: str, buildargs: Mapping[str, str], labels: Mapping[str, str],
              network_mode: str | None, on_line: LineSink, cancel: threading.Event | None = None,
              target: str | None = None, platform: str | None = None) -> BuildOutcome:
        """Build ``context`` (up to stage ``target``; for ``platform``, e.g. ``linux/arm64``, under emulation when
        it is not this host's) with the classic builder, streaming each log line. The classic builder can pick a
        cached base of another architecture (moby/moby#47823): callers check the built image's architecture."""
        outcome = BuildOutcome(image_id=None)
        kind = self.kind()
        if kind.podman and platform == kind.platform:  # given a platform, Podman declares TARGETARCH, TARGETOS and
            platform = None  # TARGETPLATFORM as build args and warns that the Dockerfile did not consume them
        try:
            stream = self.client.api.build(
                path=str(context), tag=tag, buildargs=dict(buildargs), labels=dict(labels), network_mode=network_mode,
                rm=True, forcerm=True, pull=False, decode=True, timeout=None, target=target, platform=platform,
            )
            for event in stream:
                if cancel is not None and cancel.is_set():
                    stream.close()  # the engine cancels a build whose client went away
                    outcome.error = "cancelled"
                    return outcome
                self._build_event(event, outcome, on_line)
        except docker.errors.APIError as exc:
            outcome.error = said(exc)
        except FOREIGN as exc:
            raise engine_error(exc, f"building {context}") from None
        if outcome.image_id is None and outcome.error is None:
            outcome.error = "the engine reported no image"
        return outcome

    @staticmethod
    def _build_event(event: Mapping[str, Any], outcome: BuildOutcome, on_line: LineSink) -> None:
        if "stream" in event:
            for line in str(event["stream"]).splitlines():
                build_line(line, outcome)
                on_line(line)
        elif "error" in event:
            outcome.error = str(event["error"]).strip()
            on_line(f"ERROR: {outcome.error}")
        elif "aux" in event and "ID" in event["aux"]:
            outcome.image_id = str(event["aux"]["ID"])

    # -- containers ----------------------------------------------------------------
    def run(self, spec: RunSpec) -> RunResult:
        """Create, copy files in, start, wait (with a timeout), collect logs, always remove.
        ``spec.command`` is what runs: its first word replaces the image's ENTRYPOINT.
        Raises :class:`ContainerRefused` (:class:`GpuRuntimeMissing`, :class:`CommandNotFound`)
        when the engine would not create or start it."""
        container = self._create_or_clean(spec)
        try:
            self._start(container, spec, self.kind())
            if spec.on_stderr is not None:
                _follow(container, spec.on_stderr)
            with docker_errors(f"waiting for a container of {spec.image[:19]}"):
                return self._wait(container, spec.timeout_s)
        finally:
            _remove(container)

    def _create_or_clean(self, spec: RunSpec) -> Any:
        """:meth:`_create`, then ``spec.on_created`` told its ID; interrupted (Ctrl-C, SIGTERM from scancel) while
        the engine was creating it, the container may exist without our knowing its ID: every container of this
        run's own labels is removed."""
        try:
            container = self._create(spec)
        except KeyboardInterrupt:
            for key, value in spec.labels.items():
                self.remove_containers(key, value)
            raise
        if spec.on_created is not None:
            try:
                spec.on_created(str(container.id))
            except BaseException:
                _remove(container)
                raise
        return container

    def _create(self, spec: RunSpec) -> Any:
        """The container for ``spec``; the image's ENTRYPOINT runs only where ``spec.entrypoint`` names it. A GPU
        request the engine took but did not honour (:func:`dropped`) removes it and raises :class:`GpuRequestDropped`."""
        if not spec.command:
            raise EngineError(f"nothing to run in {spec.image[:19]}: empty command")
        entrypoint, args = (spec.command[:1], spec.command[1:]) if spec.entrypoint is None else (spec.entrypoint, spec.command)
        kind, doing = self.kind(), f"creating a container of {spec.image[:19]}"
        with docker_errors(doing, ContainerRefused, kind):
            if spec.cdi_devices and kind.podman:
                container = self._create_libpod(libpod_spec(spec, entrypoint, args))
            else:
                container = self.client.containers.create(
                    spec.image, args, entrypoint=entrypoint, detach=True, environment=dict(spec.environment),
                    device_requests=device_requests(spec.gpus) + cdi_requests(spec.cdi_devices), shm_size=spec.shm_size,
                    mem_limit=spec.mem_limit, nano_cpus=spec.nano_cpus, labels=dict(spec.labels), user=spec.user or "",
                    log_config=LOG_CONFIG, pids_limit=spec.pids_limit,
                    **network_of(spec),
                    **({"devices": [d.docker() for d in spec.devices]} if spec.devices else {}),
                    **({"mounts": bind_mounts(spec.mounts)} if spec.mounts else {}),
                )
        problem = dropped(container.attrs, spec, kind, doing)
        if problem is not None:
            _remove(container)
            raise problem
        return container

    def _create_libpod(self, body: Mapping[str, Any]) -> Any:
        """A container made by Podman's own API (:func:`libpod_spec`), as the SDK's container object. Podman serves
        its own endpoints under any API version prefix, the Docker API's included."""
        api = self.client.api
        answer = api._result(api._post_json(api._url("/libpod/containers/create"), data=dict(body)), json=True)
        return self.client.containers.get(str(answer["Id"]))

    @staticmethod
    def _start(container: Any, spec: RunSpec, kind: EngineKind | None = None) -> None:
        """Copy ``spec.files`` and ``spec.links`` in and start it (the engine checks the command and devices here;
        Podman resolves CDI names here)."""
        with docker_errors(f"starting a container of {spec.image[:19]}", ContainerRefused, kind):
            if spec.files:
                container.put_archive("/", tar_files(spec.files, spec.files_dir))
            if spec.links:
                container.put_archive("/", tar_links(spec.links))
            container.start()

    @contextlib.contextmanager
    def started(self, spec: RunSpec) -> Iterator["Running"]:
        """A container left running (services probed with ``exec``); always removed."""
        container = self._create_or_clean(spec)
        try:
            self._start(container, spec, self.kind())
            yield Running(container)
        finally:
            _remove(container)

    @staticmethod
    def _wait(container: Any, timeout_s: float) -> RunResult:
        timed_out = False
        try:
            status = container.wait(timeout=timeout_s)
            code = int(status.get("StatusCode", -1))
        except requests.exceptions.RequestException:  # ReadTimeout/ConnectionError: the container outlived its time
            timed_out, code = True, -1
            _kill(container)
        out, total = _tail_logs(container, OUTPUT_LIMIT, stdout=True)
        err, _ = _tail_logs(container, STDERR_LIMIT, stdout=False)
        return RunResult(code, out, err, timed_out, container.id, total)

    def remove_containers(self, label: str, value: str) -> int:
        """Remove every container (running or not) with ``label=value``."""
        with docker_errors(f"listing the containers labelled {label}={value}"):
            found = self.client.containers.list(all=True, filters={"label": f"{label}={value}"})
        for container in found:
            _remove(container)
        return len(found)

    def containers_with_label(self, label: str, value: str | None = None) -> list[str]:
        flt = f"{label}={value}" if value is not None else label
        with docker_errors(f"listing the containers labelled {flt}"):
            return [c.id for c in self.client.containers.list(all=True, filters={"label": flt})]


class _ChunkReader(io.RawIOBase):
    """A readable file over an iterator of byte chunks (docker's streamed archives)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self.chunks: Iterator[bytes] = iter(chunks)
        self.view, self.pos = memoryview(b""), 0

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        while self.pos >= len(self.view):
            chunk = next(self.chunks, b"")
            if not chunk:
                return 0
            self.view, self.pos = memoryview(chunk), 0
        n = min(len(target), len(self.view) - self.pos)
        target[:n] = self.view[self.pos:self.pos + n]
        self.pos += n
        return n


class Running:
    """A started container: is it still running, and run a command inside it."""

    def __init__(self, container: Any) -> None:
        self._container = container

    def running(self) -> bool:
        with docker_errors(f"inspecting container {str(self._container.id)[:12]}"):
            try:
                self._container.reload()
            except docker.errors.NotFound:
                return False
        return self._container.status in ("created", "running", "restarting")

    def exit_code(self) -> int | None:
        state = self._container.attrs.get("State") or {}
        return None if self.running() else int(state.get("ExitCode", -1))

    def logs(self, limit: int = STDERR_LIMIT) -> str:
        out, _ = _tail_logs(self._container, limit, stdout=True, stderr=True)
        return out

    def exec(self, argv: list[str], timeout_s: float, user: str | None = None) -> tuple[int | None, str]:
        """(exit code, stdout) of ``argv`` run inside; (None, why) when it could not run or
        outlived ``timeout_s`` (the caller removes the container, which ends it)."""
        result: list[tuple[int | None, str]] = []

        def call() -> None:
            api = self._container.client.api
            try:
                exec_id = api.exec_create(self._container.id, argv, user=user or "", stdout=True, stderr=True)["Id"]
                keep = bytearray()
                for chunk in api.exec_start(exec_id, stream=True):  # bounded: the image may print anything
                    keep += chunk
                    del keep[:-STDERR_LIMIT]
                result.append((api.exec_inspect(exec_id).get("ExitCode"), bytes(keep).decode(errors="replace")))
            except FOREIGN as exc:
                result.append((None, said(exc)))

        worker = threading.Thread(target=call, name="container-exec", daemon=True)
        worker.start()
        worker.join(timeout_s)
        return result[0] if result else (None, f"no answer within {timeout_s:.0f} s")


def _tail_logs(container: Any, limit: int, stdout: bool, stderr: bool | None = None) -> tuple[str, int]:
    """The last ``limit`` bytes of a container's stdout (or stderr) and how many it wrote;
    read as a stream so that a container printing gigabytes costs no memory."""
    keep, total = bytearray(), 0
    try:
        chunks = container.logs(stdout=stdout, stderr=(not stdout) if stderr is None else stderr, stream=True, follow=False)
        for chunk in chunks:
            total += len(chunk)
            keep += chunk
            if len(keep) > 2 * limit:
                del keep[:-limit]
    except (*FOREIGN, OSError):
        pass  # what was read so far is what there is
    return bytes(keep[-limit:]).decode(errors="replace"), total


def build_step(line: str) -> tuple[int, int, int, int, bool] | None:
    """A build log line that starts a step, as (stage, stages, step, steps, is FROM), in either engine's words
    (:data:`STEP`); Docker's classic builder numbers steps across stages: stage 1 of 1. None for any other line."""
    found = STEP.match(line)
    if found is None:
        return None
    stage, stages = int(found.group(1) or 1), int(found.group(2) or 1)
    step, steps = int(found.group(3) or found.group(5)), int(found.group(4) or found.group(6))
    return stage, stages, step, steps, bool(found.group(7))


def build_progress(line: str) -> str | None:
    """What the progress table shows for a step line: ``step 3/15``; ``stage 1/2 step 3/15`` where the engine
    (Podman) numbers steps per stage. None for any other line."""
    found = build_step(line)
    if found is None:
        return None
    stage, stages, step, steps, _ = found
    return f"stage {stage}/{stages} step {step}/{steps}" if stages > 1 else f"step {step}/{steps}"


def build_line(line: str, outcome: BuildOutcome) -> None:
    """What one build log line tells: the steps (all stages'), cache hits, the image each step made, and at each
    FROM the end of the stage before it (its last image, if this build made it, is the stage's result; a FROM's
    own image is the base, never this build's)."""
    step = build_step(line)
    if step is not None:
        stage, _, _, steps, is_from = step
        outcome._stage_steps[stage] = steps
        outcome.steps = sum(outcome._stage_steps.values())
        if is_from and outcome._last is not None and not outcome._last[1]:
            outcome.stages.append(outcome._last[0])
        outcome._cached = is_from
    if "Using cache" in line:
        outcome.cached_steps += 1
        outcome._cached = True
    made = STEP_IMAGE.match(line)
    if made:
        outcome._last = (made.group(1), outcome._cached)
        if not outcome._cached:
            outcome.made.append(made.group(1))


def _follow(container: Any, sink: LineSink) -> None:
    """Stream the container's stderr lines to ``sink`` on a daemon thread."""
    def pump() -> None:
        buf = b""
        try:
            for chunk in container.logs(stream=True, follow=True, stdout=False, stderr=True):
                buf += chunk
                *lines, buf = buf.split(b"\n")
                if len(buf) > LINE_LIMIT:  # a line without end: show its start, drop the rest
                    lines, buf = [*lines, buf[:LINE_LIMIT]], b""
                for line in lines:
                    sink(line[:LINE_LIMIT].decode(errors="replace"))
        except Exception:  # noqa: BLE001 - the container went away: nothing more to show
            return

    threading.Thread(target=pump, name="container-logs", daemon=True).start()


def _remove(container: Any) -> None:
    with docker_errors(f"removing container {str(container.id)[:12]}"):
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: removal already in progress
                raise


def _kill(container: Any) -> None:
    """Stop a container that outlived its time (it may have ended meanwhile: then nothing to do)."""
    with docker_errors(f"stopping container {str(container.id)[:12]}"):
        try:
            container.kill()
        except docker.errors.APIError as exc:
            if exc.status_code not in (404, 409):  # gone, or no longer running
                raise


PUSHED = re.compile(r"\bdigest: (sha256:[0-9a-f]{64})\b")  # "t1: digest: sha256:... size: 528": Docker's and Podman's last line


def _push_stream(stream: Any, ref: str, on_line: LineSink, engine: EngineKind | None = None) -> str:
    """The digest a push stream ends with (Docker's ``aux``; Podman sends only its status line); its lines to
    ``on_line``; its error as a :class:`RegistryHTTPError`."""
    digest = ""
    try:
        for event in stream:
            if "error" in event:
                raise push_error(ref, str(event["error"]), event.get("errorDetail") or {}, engine)
            pushed = PUSHED.search(str(event.get("status") or ""))
            digest = event.get("aux", {}).get("Digest", digest or (pushed.group(1) if pushed else ""))
            if event.get("status") and not event.get("progressDetail"):
                on_line(f"{event.get('id', '')} {event['status']}".strip())
    finally:
        stream.close()  # interrupted (Ctrl-C): the engine stops a push whose client went away
    return str(digest)


SOCKET_REASONS = re.compile(r"Connection refused|No such file or directory|Permission denied|Name or service not known"
                            r"|Temporary failure in name resolution|timed out|Connection reset by peer|Network is unreachable")


def _socket_reason(exc: BaseException) -> str:
    found = SOCKET_REASONS.search(str(exc))
    return found.group(0) if found else said(exc)


def unreachable(docker_host: str, why: str) -> str:
    """Why the engine is not there and what to do, naming the DOCKER_HOST that was tried (Podman's socket: how to
    start Podman's Docker API there)."""
    if engines.guessed(docker_host).podman:
        return f"cannot reach the Podman engine at DOCKER_HOST={docker_host} ({why}); {engines.start_fix(docker_host)}"
    if docker_host:
        return (f"cannot reach the Docker engine at DOCKER_HOST={docker_host} ({why}); start the engine there, "
                "fix DOCKER_HOST, or unset it to use the local engine (unix:///var/run/docker.sock)")
    return (f"cannot reach the Docker engine at unix:///var/run/docker.sock ({why}); start it "
            "(sudo systemctl start docker, or dockerd &) or set DOCKER_HOST")


def familiar(ref: str, podman: bool = False) -> str:
    """A reference as the engine lists it, in the short form Docker lists and imagesmith names (Docker's "familiar"
    form): Docker Hub's ``docker.io/`` and ``docker.io/library/`` dropped; on Podman also ``localhost/``, its name
    for a local image named without a registry (a ``podman load`` of ``imagesmith/debian:bookworm``)."""
    for prefix in (f"{DOCKER_HUB}/library/", f"{DOCKER_HUB}/") + (("localhost/",) if podman else ()):
        if ref.startswith(prefix):
            return ref[len(prefix):]
    return ref


def _info(attrs: Mapping[str, Any], podman: bool = False) -> ImageInfo:
    config = attrs.get("Config") or {}
    return ImageInfo(
        id=str(attrs["Id"]),
        tags=tuple(familiar(str(t), podman) for t in attrs.get("RepoTags") or ()),
        labels=dict(config.get("Labels") or {}),
        size=int(attrs.get("Size", 0)),
        created=str(attrs.get("Created", "")),
        repo_digests=tuple(familiar(str(d), podman) for d in attrs.get("RepoDigests") or ()),
        parent=str(attrs.get("Parent") or ""),
        layers=tuple((attrs.get("RootFS") or {}).get("Layers") or ()),
        os=str(attrs.get("Os") or "linux"), architecture=str(attrs.get("Architecture") or ""),
        variant=str(attrs.get("Variant") or ""),
        config=ImageConfig(
            user=str(config.get("User") or ""), entrypoint=_strings(config.get("Entrypoint")),
            cmd=_strings(config.get("Cmd")), env=_strings(config.get("Env")),
            exposed_ports=tuple(sorted(str(p) for p in (config.get("ExposedPorts") or {})))),
    )


def _strings(value: Any) -> tuple[str, ...]:
    """An inspect list (None, a list, or a lone string) as a tuple of strings."""
    if value is None:
        return ()
    return (str(value),) if isinstance(value, str) else tuple(str(v) for v in value)


# -- docker's errors as ours ---------------------------------------------------------------------
# The engine's words are read here and nowhere else: what they mean becomes a type or an HTTP status.

# What the SDK lets through: its own errors and its transport's (requests, and urllib3 while a stream is read).
FOREIGN = (docker.errors.DockerException, requests.exceptions.RequestException, urllib3.exceptions.HTTPError)
CONNECTION_LOST = (requests.exceptions.ConnectionError, requests.exceptions.Timeout, requests.exceptions.ChunkedEncodingError,
                   urllib3.exceptions.ProtocolError, urllib3.exceptions.TimeoutError)
NO_GPU_RUNTIME = "could not select device driver"  # --gpus on an engine without the NVIDIA runtime
NO_CDI_DEVICE = "unresolvable CDI devices"  # Podman: a CDI name no spec of its host offers
COMMAND_NOT_FOUND = re.compile(r'exec: "([^"]+)": (?:executable file not found|no such file or directory)', re.I)
# The status a registry answered, as the engine quotes it in a push error (its push stream has no code).
HTTP_STATUS = re.compile(r"(?:HTTP status:?|HTTP)\s+(\d{3})\b", re.I)
STATUS_WORDS = (("unauthorized", 401), ("authentication required", 401), ("no basic auth credentials", 401),
                ("denied", 403), ("forbidden", 403), ("not found", 404),
                ("toomanyrequests", 429), ("too many requests", 429), ("internal server error", 500),
                ("bad gateway", 502), ("service unavailable", 503), ("gateway time", 504))
# The engine's words for a registry that did not answer at all (refused, reset, timed out).
NO_ANSWER = re.compile(r"connection refused|connection reset|broken pipe|\bEOF\b|i/o timeout|timed? ?out|TLS handshake timeout"
                       r"|temporarily unavailable", re.I)


def said(exc: BaseException) -> str:
    """What the engine (or the SDK) said, on one line: an API error's explanation (the daemon's own
    words, without the SDK's "500 Server Error for http+docker://..."), else the exception's cause."""
    return one_line(_words(exc), type(exc).__name__)


def _words(exc: BaseException) -> str:
    return str(getattr(exc, "explanation", None) or exc)


def engine_error(exc: BaseException, doing: str, kind: type[EngineError] = EngineError,
                 engine: EngineKind | None = None) -> EngineError:
    """A docker SDK exception (or one of requests, its transport) as one of ours: ``doing`` and the
    engine's words. The cases a caller must tell apart are types: the engine stopped answering
    (:class:`EngineConnectionLost`), no GPUs to give (:class:`GpuRuntimeMissing`: no runtime, or a CDI name
    no spec offers), a command not in the image (:class:`CommandNotFound`); ``kind`` for the rest
    (:class:`ContainerRefused` when a container was being created or started). ``engine`` (Docker or Podman)
    picks the fix said: that engine's own."""
    words, answer = said(exc), _words(exc) if isinstance(exc, docker.errors.APIError) else ""
    engine = engine or engines.guessed(os.environ.get("DOCKER_HOST", ""))  # not asked yet: the one DOCKER_HOST names
    name, cli = engine.name, engine.cli
    if isinstance(exc, CONNECTION_LOST):
        return EngineConnectionLost(f"{doing}: the {name} engine stopped answering ({_socket_reason(exc)}); "
                                    f"check that it runs ({cli} info), then try again")
    if NO_GPU_RUNTIME in answer:
        fix = engine.gpu_fix if engine.podman else GpuRuntimeMissing.fix
        return GpuRuntimeMissing(f"{doing}: {words} ({fix})", fix=fix)
    if NO_CDI_DEVICE in answer:  # Podman: a CDI name no spec of its host offers
        fix = engines.FIX_PODMAN_GPU
        return GpuRuntimeMissing(f"{doing}: {words} ({fix})", fix=fix)
    missing = COMMAND_NOT_FOUND.search(answer)
    if missing:
        return CommandNotFound(f"{doing}: {words}", missing.group(1))
    limits = engines.rlimit_hint(answer, engine)
    if limits:  # the engine's words are long and end in what the hint quotes
        return kind(f"{doing}: {limits}")
    return kind(f"{doing}: {words}")


@contextlib.contextmanager
def docker_errors(doing: str, kind: type[EngineError] = EngineError, engine: EngineKind | None = None) -> Iterator[None]:
    """Inside: every docker SDK or requests exception leaves as :func:`engine_error`'s (ours pass)."""
    try:
        yield
    except ImagesmithError:
        raise
    except FOREIGN as exc:
        raise engine_error(exc, doing, kind, engine) from None


def _status_of(message: str, detail: Mapping[str, Any]) -> int:
    """The HTTP status behind the engine's words: the error detail's code, a quoted status, else the words."""
    if "code" in detail:
        return int(detail["code"])
    quoted = HTTP_STATUS.search(message)
    if quoted:
        return int(quoted.group(1))
    lowered = message.lower()
    return next((code for needle, code in STATUS_WORDS if needle in lowered), 0)


def push_error(ref: str, message: str, detail: Mapping[str, Any], engine: EngineKind | None = None) -> RegistryHTTPError:
    """What the engine said about a failed push as a :class:`RegistryHTTPError` with the HTTP status
    it quotes (its ``transient`` follows the status), or :class:`RegistryUnreachable` when the
    registry did not answer at all; a 401's hint names ``engine``'s own login."""
    status = _status_of(message, detail) or None
    hint = registry_hint(ref, status, message, "push", login=engine.login_fix(registry_host(ref)) if engine else None)
    if status is None and NO_ANSWER.search(message):
        return RegistryUnreachable(hint, said=message.strip())
    return RegistryHTTPError(hint, status, said=message.strip())


def docker_login(host: str, config: Mapping[str, Any], what: str = "docker config",
                 cli: str = "docker") -> tuple[str, str, str | None] | None:
    """(user, secret, credential helper or None) for ``host`` from a docker config, resolved as the
    docker SDK resolves it: ``credHelpers``/``credsStore`` (running ``docker-credential-<name>``)
    before ``auths``; Docker Hub's aliases understood. An identity token (an OAuth refresh token)
    cannot log in here and counts as none."""
    if not config:
        return None  # the SDK would read the default config file instead
    try:
        with warnings.catch_warnings():  # the SDK warns when a helper is missing; the error below says it
            warnings.simplefilter("ignore")
            auth = docker.auth.load_config(config_dict=json.loads(json.dumps(config)))
            found = auth.resolve_authconfig(host)
            helper = auth.get_credential_store(host) if found and "Username" in found else None
    except (docker.errors.DockerException, ValueError, TypeError) as exc:
        raise UserError(f"{what}: the login for {host} cannot be read ({said(exc)}); "
                        f"run {cli} login {host} again (install its credential helper if the config names one), "
                        f"or set {ENV_USER}/{ENV_PASSWORD}") from None
    user = (found or {}).get("Username") or (found or {}).get("username")
    secret = (found or {}).get("Password") or (found or {}).get("password")
    return (str(user), str(secret), helper) if user and secret else None


def _name_of(ref: str) -> str | None:
    """``host/repository`` of a reference the engine lists (None for ``<none>:<none>``)."""
    parsed = ImageRef.maybe(ref)
    return parsed.name if parsed else None


MAX_CONFIG = 16 << 20  # an image config: a few KiB, with a long history a few hundred


def _config_document(data: bytes, ref: str) -> dict[str, Any]:
    """An image config read back from ``docker save``, through the one strict reader (the image may come from
    a staging registry another job pushed to)."""
    from imagesmith.model import loader

    try:
        doc = loader.parse_json(data[:MAX_CONFIG + 1], f"the config of {ref}") if len(data) <= MAX_CONFIG else None
    except loader.LoadError as exc:
        raise EngineError(str(exc)) from None
    if not isinstance(doc, dict):
        raise EngineError(f"the config of {ref} is not a JSON object of at most {MAX_CONFIG:,} bytes")
    return doc
