"""The engine edge, the only package that imports docker: build, run, inspect, import, tag, push (:class:`Engine`).
Its parts: :mod:`.errors` (docker's errors as ours), :mod:`.output` (what the engine says back, read) and
:mod:`.specs` (what a container starts with, in the engine's terms).

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
import tarfile
import threading
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import docker
import docker.auth
import docker.errors
import requests
from docker.types import LogConfig

from imagesmith.edges.engine.errors import (  # the engine edge's parts, handed on to its callers
    COMMAND_NOT_FOUND,
    FOREIGN,
    NO_GPU_RUNTIME,
    docker_errors,
    docker_login,
    engine_error,
    push_error,
    said,
    socket_reason,
    status_of,
    unreachable,
)
from imagesmith.edges.engine.output import (  # the engine edge's parts, handed on to its callers
    build_line,
    build_progress,
    build_step,
    familiar,
    follow,
    image_info,
    kill_container,
    push_stream,
    remove_container,
    tail_logs,
)
from imagesmith.edges.engine.specs import (  # the engine edge's parts, handed on to its callers
    bind_mounts,
    cdi_requests,
    device_requests,
    dropped,
    libpod_spec,
    network_of,
    tar_files,
    tar_links,
)
from imagesmith.edges.protocols import BuildOutcome as BuildOutcome  # re-exported: the engine's plain values live with its protocol
from imagesmith.edges.protocols import ImageConfig as ImageConfig
from imagesmith.edges.protocols import ImageInfo as ImageInfo
from imagesmith.edges.protocols import LineSink as LineSink
from imagesmith.edges.protocols import RunResult as RunResult
from imagesmith.edges.protocols import RunSpec as RunSpec
from imagesmith.edges.registry import is_loopback, registry_hint
from imagesmith.edges.registry import registry_host as registry_host  # re-exported: the engine's callers name hosts through it
from imagesmith.errors import (
    ContainerRefused,
    EngineError,
    RegistryError,
)
from imagesmith.model.engines import EngineKind
from imagesmith.model.ref import ImageRef

RUN_LABEL = "io.imagesmith.run"  # on every container imagesmith starts: which run made it


OUTPUT_LIMIT = 64 << 20  # bytes of a container's stdout kept (the tail: the payload's report is its last line)
STDERR_LIMIT = 1 << 20
# The engine keeps at most this much of a container's output on disk, whatever it prints.
LOG_CONFIG = LogConfig(type=LogConfig.types.JSON, config={"max-size": "64m", "max-file": "2"})


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
                raise EngineError(unreachable(os.environ.get("DOCKER_HOST", ""), socket_reason(exc))) from None
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
            return image_info(img.attrs, self.kind().podman)

    def images_with_label(self, key: str, value: str | None = None) -> list[ImageInfo]:
        """Tagged images with this label (children inherit labels, so this
        also finds descendants)."""
        flt = f"{key}={value}" if value is not None else key
        with docker_errors(f"listing the images labelled {flt}"):
            images = self.client.images.list(filters={"label": flt})
        return [image_info(i.attrs, self.kind().podman) for i in images]

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
                status = exc.status_code if exc.status_code in (401, 403, 404) else status_of(said(exc), {})
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
            digest = push_stream(stream, ref, on_line, self.kind())
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
              target: str | None = None, platform: str | None = None, cache_from: Sequence[str] = ()) -> BuildOutcome:
        """Build ``context`` (up to stage ``target``; for ``platform``, e.g. ``linux/arm64``, under emulation when
        it is not this host's) with the classic builder, streaming each log line. The classic builder can pick a
        cached base of another architecture (moby/moby#47823): callers check the built image's architecture.

        ``cache_from``: images whose own steps the build takes from the cache, step by step, before any other image
        with the same step. The classic builder otherwise takes the newest image made by an identical step, which
        may be another target's (built beside this one's stage made ahead) whose next step differs: then every
        later step runs again. Docker only (Podman's layer cache reads it as remote repositories)."""
        outcome = BuildOutcome(image_id=None)
        kind = self.kind()
        if kind.podman and platform == kind.platform:  # given a platform, Podman declares TARGETARCH, TARGETOS and
            platform = None  # TARGETPLATFORM as build args and warns that the Dockerfile did not consume them
        try:
            stream = self.client.api.build(
                path=str(context), tag=tag, buildargs=dict(buildargs), labels=dict(labels), network_mode=network_mode,
                rm=True, forcerm=True, pull=False, decode=True, timeout=None, target=target, platform=platform,
                cache_from=list(cache_from) if cache_from and not kind.podman else None,
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
                follow(container, spec.on_stderr)
            with docker_errors(f"waiting for a container of {spec.image[:19]}"):
                return self._wait(container, spec.timeout_s)
        finally:
            remove_container(container)

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
                remove_container(container)
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
            remove_container(container)
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
            remove_container(container)

    @staticmethod
    def _wait(container: Any, timeout_s: float) -> RunResult:
        timed_out = False
        try:
            status = container.wait(timeout=timeout_s)
            code = int(status.get("StatusCode", -1))
        except requests.exceptions.RequestException:  # ReadTimeout/ConnectionError: the container outlived its time
            timed_out, code = True, -1
            kill_container(container)
        out, total = tail_logs(container, OUTPUT_LIMIT, stdout=True)
        err, _ = tail_logs(container, STDERR_LIMIT, stdout=False)
        return RunResult(code, out, err, timed_out, container.id, total)

    def remove_containers(self, label: str, value: str) -> int:
        """Remove every container (running or not) with ``label=value``."""
        with docker_errors(f"listing the containers labelled {label}={value}"):
            found = self.client.containers.list(all=True, sparse=True, filters={"label": f"{label}={value}"})
        for container in found:
            remove_container(container)
        return len(found)

    def containers_with_label(self, label: str, value: str | None = None) -> list[str]:
        flt = f"{label}={value}" if value is not None else label
        with docker_errors(f"listing the containers labelled {flt}"):
            return [c.id for c in self.client.containers.list(all=True, sparse=True, filters={"label": flt})]


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
        out, _ = tail_logs(self._container, limit, stdout=True, stderr=True)
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


# -- references and configs as the engine lists them --------------------------------------------


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


__all__ = [  # what the engine edge's modules (errors, output, specs) hand on through it
    "COMMAND_NOT_FOUND",
    "NO_GPU_RUNTIME",
    "bind_mounts",
    "build_line",
    "build_progress",
    "build_step",
    "cdi_requests",
    "device_requests",
    "docker_errors",
    "docker_login",
    "dropped",
    "engine_error",
    "familiar",
    "image_info",
    "libpod_spec",
    "push_error",
    "push_stream",
    "said",
    "tar_links",
    "unreachable",
]
