"""engine.py as the boundary: a docker SDK exception (or one of requests, its transport) becomes
one of ours, the engine's own words in the message, the cases a caller tells apart as types.
The SDK's exceptions are built here exactly as the SDK builds them from the daemon's answer
(a requests.Response with its status code and the daemon's explanation): pure functions, no daemon."""

from __future__ import annotations

import docker.errors
import pytest
import requests
import urllib3.exceptions

from imagesmith.edges import engine
from imagesmith.edges.engine import docker_errors, engine_error, push_error, said
from imagesmith.edges.registry import RegistryHTTPError, RegistryUnreachable
from imagesmith.errors import (
    CommandNotFound,
    ContainerRefused,
    EngineConnectionLost,
    EngineError,
    GpuRuntimeMissing,
    ImagesmithError,
    RegistryError,
)
from imagesmith.model.engines import EngineKind

NO_RUNTIME = 'could not select device driver "" with capabilities: [[gpu]]'
NO_PYTHON = ("failed to create task for container: failed to create shim task: OCI runtime create failed: runc create "
             'failed: unable to start container process: exec: "python3": executable file not found in $PATH: unknown')


def api_error(status: int, explanation: str, cls: type[docker.errors.APIError] = docker.errors.APIError) -> docker.errors.APIError:
    """What the SDK raises for a daemon's error answer (docker.api.client._raise_for_status)."""
    response = requests.Response()
    response.status_code, response.url = status, "http+docker://localhost/v1.47/containers/create"
    response.reason = {400: "Bad Request", 404: "Not Found", 409: "Conflict", 500: "Internal Server Error"}[status]
    return cls(requests.exceptions.HTTPError(response=response), response=response, explanation=explanation)


CONNECTION_REFUSED = requests.exceptions.ConnectionError(
    "('Connection aborted.', FileNotFoundError(2, 'No such file or directory'))")

CLASSIFIED = [
    # (exception, kind the caller asked for, type raised, message)
    (api_error(500, NO_RUNTIME), ContainerRefused, GpuRuntimeMissing,
     f"creating x: {NO_RUNTIME} ({GpuRuntimeMissing.fix})"),
    (api_error(400, NO_PYTHON), ContainerRefused, CommandNotFound, f"creating x: {NO_PYTHON[:200]}"),  # cut; the type says it all
    (api_error(500, "failed to create shim task: cgroup: no space left on device"), ContainerRefused, ContainerRefused,
     "creating x: failed to create shim task: cgroup: no space left on device"),
    (api_error(404, "No such image: img:1", docker.errors.ImageNotFound), EngineError, EngineError,
     "creating x: No such image: img:1"),
    (api_error(409, "conflict: unable to remove repository reference"), EngineError, EngineError,
     "creating x: conflict: unable to remove repository reference"),
    (api_error(500, "first line\nthe daemon's last line"), EngineError, EngineError, "creating x: the daemon's last line"),
    (api_error(500, ""), EngineError, EngineError, "creating x: 500 Server Error for http+docker://localhost/v1.47/containers/create: "
                                                   "Internal Server Error"),
    (CONNECTION_REFUSED, ContainerRefused, EngineConnectionLost,
     "creating x: the Docker engine stopped answering (No such file or directory); check that it runs (docker info), then try again"),
    (requests.exceptions.ReadTimeout("UnixHTTPConnectionPool(host='localhost', port=None): Read timed out. (read timeout=60)"),
     EngineError, EngineConnectionLost,
     "creating x: the Docker engine stopped answering (timed out); check that it runs (docker info), then try again"),
    (urllib3.exceptions.ProtocolError("Connection broken: IncompleteRead(10 bytes read)"), EngineError, EngineConnectionLost,
     "creating x: the Docker engine stopped answering (Connection broken: IncompleteRead(10 bytes read)); "
     "check that it runs (docker info), then try again"),
    (docker.errors.DockerException("Error while fetching server API version: ('Connection aborted.', "
                                   "ConnectionRefusedError(111, 'Connection refused'))"), EngineError, EngineError,
     "creating x: Connection refused"),
    # the words alone decide nothing: only the daemon's API answer says the runtime is missing
    (docker.errors.DockerException(NO_RUNTIME), EngineError, EngineError, f"creating x: {NO_RUNTIME}"),
]


@pytest.mark.parametrize("exc, kind, cls, message", CLASSIFIED)
def test_a_docker_error_becomes_ours(exc: Exception, kind: type[EngineError], cls: type[EngineError], message: str) -> None:
    err = engine_error(exc, "creating x", kind)
    assert (type(err), str(err)) == (cls, message)
    assert "docker" not in type(err).__module__ and "http+docker" not in str(err)[:40]


def test_a_command_not_in_the_image_names_it_however_long_the_engines_answer() -> None:
    err = engine_error(api_error(400, "x" * 300 + NO_PYTHON), "starting x", ContainerRefused)
    assert isinstance(err, CommandNotFound) and err.command == "python3"


def test_no_gpu_runtime_is_its_own_type_with_the_fix() -> None:
    err = engine_error(api_error(500, NO_RUNTIME), "creating a container of sha256:abc", ContainerRefused)
    assert isinstance(err, GpuRuntimeMissing) and isinstance(err, ContainerRefused)
    assert str(err).endswith("(the Docker engine has no NVIDIA container runtime: install nvidia-container-toolkit, then "
                             "nvidia-ctk runtime configure --runtime=docker && systemctl restart docker)")


@pytest.mark.parametrize("name, docker_host, hinted", [("Podman", "unix:///srv/podman.sock", True), ("Docker", "", False)])
def test_podmans_conmon_gone_is_said_with_the_restart_from_root(monkeypatch: pytest.MonkeyPatch, name: str, docker_host: str,
                                                                hinted: bool) -> None:
    monkeypatch.setenv("DOCKER_HOST", docker_host)
    err = engine_error(api_error(500, "write child: broken pipe"), "starting x", ContainerRefused, EngineKind(name))
    assert type(err) is ContainerRefused
    fix = "restart it from /   (cd / && podman system service --time=0 unix:///srv/podman.sock &)"
    assert str(err) == (f"starting x: Podman's service could not hand the container to conmon, which exited at once (write "
                        f"child: broken pipe); a service started in a folder that has since been deleted fails every "
                        f"container so: {fix}" if hinted else "starting x: write child: broken pipe")


def test_said_is_the_daemons_explanation_not_the_sdks_wrapping() -> None:
    assert str(api_error(404, "manifest unknown")).startswith("404 Client Error for http+docker://")
    assert said(api_error(404, "manifest unknown")) == "manifest unknown"


@pytest.mark.parametrize("raised, caught", [
    (api_error(500, NO_RUNTIME), GpuRuntimeMissing),
    (CONNECTION_REFUSED, EngineConnectionLost),
    (docker.errors.NotFound("gone"), ContainerRefused),
    (RegistryError("ours pass as they are"), RegistryError),
    (ValueError("not a docker error: a bug, left alone"), ValueError),
])
def test_nothing_from_docker_leaves_the_guard(raised: Exception, caught: type[Exception]) -> None:
    with pytest.raises(caught) as info, docker_errors("starting x", ContainerRefused):
        raise raised
    assert type(info.value) is caught
    if info.value is not raised:  # converted: no docker traceback chained to ours
        assert isinstance(info.value, ImagesmithError) and info.value.__suppress_context__


# -- a push: the engine's words become an HTTP status or a type ---------------------------------


@pytest.mark.parametrize("message, detail, cls, status, transient", [
    ("received unexpected HTTP status: 503 Service Unavailable", {}, RegistryHTTPError, 503, True),
    ("toomanyrequests: rate limit exceeded", {}, RegistryHTTPError, 429, True),
    ("Service Unavailable", {}, RegistryHTTPError, 503, True),
    ("whatever the engine says", {"code": 502}, RegistryHTTPError, 502, True),
    ("unauthorized: authentication required", {}, RegistryHTTPError, 401, False),
    ("denied: requested access to the resource is denied", {}, RegistryHTTPError, 403, False),
    ("received unexpected HTTP status: 400 Bad Request", {}, RegistryHTTPError, 400, False),
    ("repository name not known to registry: not found", {}, RegistryHTTPError, 404, False),
    ('Put "https://r/v2/a/blobs/uploads/x": dial tcp 10.0.0.1:443: i/o timeout', {}, RegistryUnreachable, None, True),
    ("write tcp 127.0.0.1:5000: write: broken pipe", {}, RegistryUnreachable, None, True),
    ("something else entirely", {}, RegistryHTTPError, None, False),
])
def test_a_push_error_is_typed_by_status(message: str, detail: dict[str, int], cls: type[RegistryHTTPError],
                                         status: int | None, transient: bool) -> None:
    err = push_error("reg:5000/a:b", message, detail)
    assert (type(err), err.status, err.transient, err.said) == (cls, status, transient, message)


def test_the_only_module_reading_docker_words_keeps_them_here() -> None:
    assert engine.NO_GPU_RUNTIME in NO_RUNTIME and engine.COMMAND_NOT_FOUND.search(NO_PYTHON)
