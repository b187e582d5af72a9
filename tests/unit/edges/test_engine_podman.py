"""The engine edge on Podman as well as Docker (imagesmith/edges/engine.py), with engine doubles: a GPU request the
engine dropped is found after create; CDI names go to Podman's own create; build logs of both builders; names
and digests as the engines list them; Podman's errors with Podman's fixes. The real Podman:
tests/integration/test_podman.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import docker.errors
import pytest
import requests

from imagesmith.edges import engine as edge
from imagesmith.edges.engine import Engine, RunSpec
from imagesmith.edges.protocols import BuildOutcome
from imagesmith.errors import ContainerRefused, EngineConnectionLost, GpuRequestDropped, GpuRuntimeMissing
from imagesmith.model import engines
from imagesmith.model.cdi import BindMount, DeviceMapping
from imagesmith.model.engines import EngineKind

PODMAN = EngineKind("Podman", "4.3.1", "1.41", False, "linux/amd64")
DOCKER = EngineKind("Docker", "20.10.24", "1.41", False, "linux/amd64")
DOING = "creating a container of sha256:1111111111"
IMAGE = "sha256:" + "1" * 64

# -- a GPU request the engine took without a word ------------------------------------------------------------

DROPPED = [
    pytest.param({"HostConfig": {"DeviceRequests": None, "Devices": []}}, RunSpec(IMAGE, ["x"], gpus="all"), PODMAN,
                 f"{DOING}: Podman 4.3.1 (API 1.41, rootful) created it without the GPUs asked for (--gpus all: HostConfig."
                 "DeviceRequests came back empty): Podman's Docker API drops GPU device requests; it takes GPUs by CDI names "
                 "(verify --gpu-runtime auto or cdi)", id="podman-drops-gpus"),
    pytest.param({"HostConfig": {}}, RunSpec(IMAGE, ["x"], gpus="0,1", cdi_devices=("nvidia.com/gpu=0",)), DOCKER,
                 f"{DOING}: Docker 20.10.24 (API 1.41, rootful) created it without the GPUs asked for (--gpus 0,1 and the CDI "
                 "devices nvidia.com/gpu=0: HostConfig.DeviceRequests came back empty): the engine ignored them", id="docker-ignored"),
    pytest.param({"HostConfig": {"Devices": None}}, RunSpec(IMAGE, ["x"], devices=(DeviceMapping("/dev/null", "/dev/gpu0"),)), DOCKER,
                 f"{DOING}: Docker 20.10.24 (API 1.41, rootful) created it without the 1 device nodes asked for "
                 "(HostConfig.Devices came back empty)", id="device-nodes-dropped"),
    pytest.param({"HostConfig": {"DeviceRequests": [{"Count": -1}]}}, RunSpec(IMAGE, ["x"], gpus="all"), DOCKER, None, id="honoured"),
    pytest.param({"HostConfig": {}}, RunSpec(IMAGE, ["x"], cdi_devices=("nvidia.com/gpu=all",)), PODMAN, None,
                 id="podman-cdi-names-are-resolved-at-start"),
    pytest.param({}, RunSpec(IMAGE, ["x"], gpus="none"), PODMAN, None, id="nothing-asked"),
]


@pytest.mark.parametrize("attrs, spec, kind, message", DROPPED)
def test_a_gpu_request_the_engine_did_not_honour_is_found_in_inspect(attrs: dict[str, Any], spec: RunSpec, kind: EngineKind,
                                                                     message: str | None) -> None:
    found = edge.dropped(attrs, spec, kind, DOING)
    assert (str(found) if found else None) == message
    if found is not None:
        assert isinstance(found, GpuRuntimeMissing) and found.fix == kind.gpu_fix


class Container:
    def __init__(self, attrs: dict[str, Any]) -> None:
        self.id, self.attrs, self.removed = "c0", attrs, False

    def remove(self, force: bool = False) -> None:
        self.removed = True


class Api:
    """The low-level client: Podman's own create (``/libpod/containers/create``) and the one push it takes."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, Any]] = []

    def _url(self, path: str, *args: str) -> str:
        return "http+docker://localhost/v1.41" + path.format(*args)

    def _post_json(self, url: str, data: Any) -> Any:
        self.posted.append((url, data))
        return {"Id": "c0"}

    def _result(self, response: Any, json: bool = False) -> Any:
        return response


class Containers:
    def __init__(self, attrs: dict[str, Any]) -> None:
        self.container = Container(attrs)
        self.created: list[dict[str, Any]] = []

    def create(self, image: str, args: Any, **kw: Any) -> Container:
        self.created.append(kw)
        return self.container

    def get(self, cid: str) -> Container:
        return self.container


class Client:
    def __init__(self, kind: EngineKind, attrs: dict[str, Any]) -> None:
        self.containers, self.api, self.kind = Containers(attrs), Api(), kind

    def version(self) -> dict[str, Any]:
        name = "Podman Engine" if self.kind.podman else "Engine"
        return {"Components": [{"Name": name}], "Version": self.kind.version, "ApiVersion": "1.41", "Os": "linux", "Arch": "amd64"}

    def info(self) -> dict[str, Any]:
        return {"ServerVersion": self.kind.version} | ({"BuildahVersion": "1.28.2", "Rootless": False} if self.kind.podman else {})


def test_a_dropped_request_removes_the_container_before_anything_starts() -> None:
    client = Client(PODMAN, {"HostConfig": {"DeviceRequests": None}})
    with pytest.raises(GpuRequestDropped, match=r"^creating a container of sha256:111111111111: Podman 4.3.1 \(API 1.41, rootful\) "
                                                r"created it without the GPUs asked for \(--gpus all: "):
        Engine(client=client)._create(RunSpec(IMAGE, ["python3", "run.py"], gpus="all"))
    assert client.containers.container.removed and client.containers.created[0]["device_requests"]


def test_cdi_names_go_to_podmans_own_create_and_never_as_a_device_request() -> None:
    client = Client(PODMAN, {"HostConfig": {}})
    spec = RunSpec(IMAGE, ["python3", "run.py"], cdi_devices=("nvidia.com/gpu=all",), environment={"A": "b"}, labels={"io.imagesmith.run": "r1"},
                   user="1000", shm_size="8g", mem_limit="4g", nano_cpus=2_500_000_000, pids_limit=1024,
                   mounts=(BindMount("/opt/x", "/opt/x"), BindMount("/run/y", "/run/y", read_only=False)))
    assert Engine(client=client)._create(spec) is client.containers.container
    assert client.containers.created == []  # not through the Docker API, which would stat the name as a path
    ((url, body),) = client.api.posted
    assert url == "http+docker://localhost/v1.41/libpod/containers/create"
    assert body == {
        "image": IMAGE, "entrypoint": ["python3"], "command": ["run.py"], "env": {"A": "b"}, "labels": {"io.imagesmith.run": "r1"},
        "log_configuration": {"driver": "k8s-file", "size": 64 << 20}, "devices": [{"path": "nvidia.com/gpu=all"}],
        "user": "1000", "shm_size": 8 << 30, "netns": {"nsmode": "none"},
        "resource_limits": {"memory": {"limit": 4 << 30}, "cpu": {"period": 100000, "quota": 250000}, "pids": {"limit": 1024}},
        "mounts": [{"destination": "/opt/x", "source": "/opt/x", "type": "bind", "options": ["rbind", "ro"]},
                   {"destination": "/run/y", "source": "/run/y", "type": "bind", "options": ["rbind", "rw"]}]}


def test_podmans_own_create_keeps_the_images_entrypoint_when_asked_and_the_hosts_network_when_named() -> None:
    spec = RunSpec(IMAGE, ["serve"], entrypoint=["/entry.sh"], network_mode="host", cdi_devices=("v.example/gpu=0",),
                   devices=(DeviceMapping("/dev/null", "/dev/x", "rw"),))
    body = edge.libpod_spec(spec, ["/entry.sh"], ["serve"])
    assert (body["entrypoint"], body["command"], body["netns"]) == (["/entry.sh"], ["serve"], {"nsmode": "host"})
    assert body["devices"] == [{"path": "v.example/gpu=0"}, {"path": "/dev/null:/dev/x:rw"}]
    assert "resource_limits" not in body and "user" not in body and "mounts" not in body


def test_on_docker_cdi_names_stay_a_device_request_of_driver_cdi() -> None:
    client = Client(DOCKER, {"HostConfig": {"DeviceRequests": [{"Driver": "cdi"}]}})
    Engine(client=client)._create(RunSpec(IMAGE, ["python3"], cdi_devices=("nvidia.com/gpu=all",)))
    (created,) = client.containers.created
    assert [(r["Driver"], r["DeviceIDs"]) for r in created["device_requests"]] == [("cdi", ["nvidia.com/gpu=all"])]
    assert client.api.posted == []


# -- the engines' words as ours, with that engine's fix ------------------------------------------------------


def api_error(status: int, explanation: str) -> docker.errors.APIError:
    return docker.errors.APIError("500 Server Error", response=None, explanation=explanation)


RLIMIT7 = ("runc: runc create failed: unable to start container process: error during container init: error setting rlimits for "
           "ready process: error setting rlimit type 7: operation not permitted: OCI permission denied")
ERRORS = [
    (api_error(500, "setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all"), PODMAN, GpuRuntimeMissing,
     f"starting x: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all ({engines.FIX_PODMAN_GPU})"),
    (api_error(500, RLIMIT7), PODMAN, ContainerRefused,
     f"starting x: Podman's default ulimits exceed this host's hard limits (runc could not set nofile: error setting rlimit type 7: "
     f"operation not permitted); {engines.FIX_PODMAN_ULIMITS}"),
    (api_error(500, 'could not select device driver "" with capabilities: [[gpu]]'), DOCKER, GpuRuntimeMissing,
     f'starting x: could not select device driver "" with capabilities: [[gpu]] ({GpuRuntimeMissing.fix})'),
    (requests.exceptions.ConnectionError("Connection refused"), PODMAN, EngineConnectionLost,
     "starting x: the Podman engine stopped answering (Connection refused); check that it runs (podman info), then try again"),
]


@pytest.mark.parametrize("exc, kind, type_, message", ERRORS)
def test_an_engine_error_says_the_engines_own_fix(exc: BaseException, kind: EngineKind, type_: type, message: str) -> None:
    err = edge.engine_error(exc, "starting x", ContainerRefused, kind)
    assert type(err) is type_ and str(err) == message
    if isinstance(err, GpuRuntimeMissing):
        assert message.endswith(f"({err.fix})")


UNREACHABLE = [
    ("unix:///run/podman/podman.sock", "cannot reach the Podman engine at DOCKER_HOST=unix:///run/podman/podman.sock (Connection "
     f"refused); {engines.start_fix('unix:///run/podman/podman.sock')}"),
    ("", "cannot reach the Docker engine at unix:///var/run/docker.sock (Connection refused); start it (sudo systemctl start docker, "
     "or dockerd &) or set DOCKER_HOST"),
]


@pytest.mark.parametrize("docker_host, message", UNREACHABLE)
def test_an_unreachable_engine_is_named_as_docker_host_names_it(docker_host: str, message: str) -> None:
    assert edge.unreachable(docker_host, "Connection refused") == message


# -- build logs: Docker's classic builder and Podman's (buildah) -------------------------------------------

DOCKER_LOG = """Step 1/6 : ARG BASE
Step 2/6 : FROM ${BASE} AS builder
 ---> 197d4a332ff0
Step 3/6 : RUN echo hi > /a
 ---> Running in 0c1d2e3f4a5b
Removing intermediate container 0c1d2e3f4a5b
 ---> 9caa6f40da8c
Step 4/6 : FROM ${BASE}
 ---> 197d4a332ff0
Step 5/6 : COPY --from=builder /a /a
 ---> Using cache
 ---> 64831a244419
Step 6/6 : LABEL x=y
 ---> 3a35c64b7eb9
Successfully built 3a35c64b7eb9"""
# podman 4.3.1 building the same Dockerfile through its Docker API (the first stage's RUN steps made here)
PODMAN_LOG = """[1/2] STEP 1/3: FROM imagesmith/debian:bookworm AS builder
[1/2] STEP 2/3: RUN echo hi > /a
--> Using cache 9caa6f40da8c3e4b576934e9f886a24e99d0c710d98123fedfb0a03b72a2f781
--> 9caa6f40da8
[1/2] STEP 3/3: RUN echo two > /b
--> 593e9149098
[2/2] STEP 1/4: FROM imagesmith/debian:bookworm
[2/2] STEP 2/4: COPY --from=builder /a /a
--> 64831a24441
[2/2] STEP 3/4: LABEL x=y
--> 3a35c64b7eb
[2/2] STEP 4/4: LABEL "l"="1"
[2/2] COMMIT docker.io/imagesmith-probe/x:1
--> 6d0f0955536
Successfully tagged docker.io/imagesmith-probe/x:1"""
ONE_STAGE = """STEP 1/2: FROM imagesmith/debian:bookworm
STEP 2/2: RUN echo x > /x
COMMIT docker.io/imagesmith-probe/y:1
--> 9c887b32c8a"""

LOGS = [
    pytest.param(DOCKER_LOG, 6, 1, ["9caa6f40da8c"], ["9caa6f40da8c", "3a35c64b7eb9"],
                 ["step 1/6", "step 2/6", "step 3/6", "step 4/6", "step 5/6", "step 6/6"], id="docker"),
    pytest.param(PODMAN_LOG, 7, 1, ["593e9149098"], ["593e9149098", "64831a24441", "3a35c64b7eb", "6d0f0955536"],
                 ["stage 1/2 step 1/3", "stage 1/2 step 2/3", "stage 1/2 step 3/3", "stage 2/2 step 1/4", "stage 2/2 step 2/4",
                  "stage 2/2 step 3/4", "stage 2/2 step 4/4"], id="podman"),
    pytest.param(ONE_STAGE, 2, 0, [], ["9c887b32c8a"], ["step 1/2", "step 2/2"], id="podman-one-stage"),
]


@pytest.mark.parametrize("log, steps, cached, stages, made, progress", LOGS)
def test_both_builders_logs_give_steps_cache_hits_stages_and_progress(log: str, steps: int, cached: int, stages: list[str],
                                                                      made: list[str], progress: list[str]) -> None:
    outcome = BuildOutcome(image_id=None)
    for line in log.splitlines():
        edge.build_line(line, outcome)
    assert (outcome.steps, outcome.cached_steps, outcome.stages, outcome.made) == (steps, cached, stages, made)
    assert [p for p in map(edge.build_progress, log.splitlines()) if p] == progress


def test_podman_is_given_no_platform_of_its_own_so_it_declares_no_unused_build_args() -> None:
    """Nor the images to take cached steps from, which Podman would read as remote repositories; Docker is."""
    asked: list[Any] = []

    class BuildApi(Api):
        def build(self, **kw: Any) -> Any:
            asked.append((kw["platform"], kw["cache_from"]))
            return iter([{"stream": "STEP 1/1: FROM x\n"}, {"aux": {"ID": "sha256:" + "2" * 64}}])

    for kind, platform, sent, cache_from in ((PODMAN, "linux/amd64", None, None), (PODMAN, "linux/arm64", "linux/arm64", None),
                                             (DOCKER, "linux/amd64", "linux/amd64", ["stage:1"])):
        client = Client(kind, {})
        client.api = BuildApi()
        outcome = Engine(client=client).build(Path("/ctx"), "t:1", {}, {}, None, lambda line: None, platform=platform,
                                              cache_from=["stage:1"])
        assert outcome.image_id == "sha256:" + "2" * 64 and asked.pop() == (sent, cache_from)


FAMILIAR = [
    ("docker.io/imagesmith/local:2.9-base", False, "imagesmith/local:2.9-base"),
    ("docker.io/library/imagesmith-cache:abc", False, "imagesmith-cache:abc"),
    ("localhost/imagesmith/debian:bookworm", True, "imagesmith/debian:bookworm"),
    ("localhost/imagesmith/debian:bookworm", False, "localhost/imagesmith/debian:bookworm"),  # Docker: a registry named localhost
    ("127.0.0.1:5000/ml/x@sha256:" + "a" * 64, True, "127.0.0.1:5000/ml/x@sha256:" + "a" * 64),
    ("docker.io/imagesmith-probe/y@sha256:" + "b" * 64, True, "imagesmith-probe/y@sha256:" + "b" * 64),
]


@pytest.mark.parametrize("listed, podman, name", FAMILIAR)
def test_names_the_engine_lists_come_back_as_imagesmith_named_them(listed: str, podman: bool, name: str) -> None:
    assert edge.familiar(listed, podman) == name
    info = edge.image_info({"Id": "sha256:x", "RepoTags": [listed], "RepoDigests": [listed]}, podman)
    assert info.tags == (name,) and info.repo_digests == (name,)


PUSHES = [
    pytest.param([{"status": "The push refers to repository [127.0.0.1:5917/probe/x:t1]"}, {"status": "Pushed", "id": "29fa1390e8ce"},
                  {"status": f"t1: digest: sha256:{'c' * 64} size: 1234"}], f"sha256:{'c' * 64}", id="podman-status-line-only"),
    pytest.param([{"status": f"t1: digest: sha256:{'d' * 64} size: 528"}, {"aux": {"Tag": "t1", "Digest": f"sha256:{'d' * 64}", "Size": 528}}],
                 f"sha256:{'d' * 64}", id="docker-aux"),
    pytest.param([{"status": "Pushed"}], "", id="no-digest-said"),
]


class Stream(list):  # type: ignore[type-arg]
    def close(self) -> None:
        pass


@pytest.mark.parametrize("events, digest", PUSHES)
def test_the_pushed_digest_from_either_engines_push_stream(events: list[dict[str, Any]], digest: str) -> None:
    assert edge.push_stream(Stream(events), "127.0.0.1:5917/probe/x:t1", lambda line: None, PODMAN) == digest


def test_a_401_on_podman_says_podman_login() -> None:
    err = edge.push_error("harbor.example.com/ml/x:1", "unauthorized: authentication required", {}, PODMAN)
    assert err.status == 401 and "podman login harbor.example.com, or set IMAGESMITH_REGISTRY_USER" in str(err)
    docker_err = edge.push_error("harbor.example.com/ml/x:1", "unauthorized: authentication required", {}, DOCKER)
    assert "docker login harbor.example.com, or set" in str(docker_err)


def test_what_podman_loaded_is_named_as_it_was_saved() -> None:
    class LoadApi(Api):
        def load_image(self, chunks: Any) -> Any:
            return iter([{"stream": "Loaded image: localhost/imagesmith/debian:bookworm\n"}])

    client = Client(PODMAN, {})
    client.api = LoadApi()
    assert Engine(client=client).load(iter([b"tar"])) == ["imagesmith/debian:bookworm"]


def test_an_engine_not_asked_yet_is_named_as_docker_host_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    lost = requests.exceptions.ConnectionError("Connection reset by peer")
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/user/1000/podman/podman.sock")
    assert str(edge.engine_error(lost, "push x")) == ("push x: the Podman engine stopped answering (Connection reset by peer); check "
                                                      "that it runs (podman info), then try again")
    monkeypatch.delenv("DOCKER_HOST")
    assert "the Docker engine stopped answering" in str(edge.engine_error(lost, "push x"))
