"""imagesmith doctor: host situations (through a double of the Host seam) ->
statuses, details and the exact fix lines."""

from __future__ import annotations

import json
import os
import textwrap
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence, TypeVar

import pytest

from imagesmith.edges.hostinfo import HostGpu, HostInfo
from imagesmith.errors import EngineError
from imagesmith.model import gpupath
from imagesmith.model.gpupath import Lookup
from imagesmith.model.loader import LoadError
from imagesmith.stages.tools import doctor
from imagesmith.stages.tools.doctor import FAIL, GB, OK, WARN, Disk, Facts, Needs, Result
from tests.doubles import EngineBase

T = TypeVar("T")

H200 = HostGpu(0, "NVIDIA H200", "GPU-0", "0000:19:00.0", 143771, "9.0")
TWO_H200 = HostInfo("580.126.20", "13.0", (H200, replace(H200, index=1, uuid="GPU-1")))
NO_GPU = HostInfo(None, None, (), "NVML unavailable (NVMLError_LibraryNotFound: NVML Shared Library Not Found); no NVIDIA driver on this host?")
ENGINE_DOWN = EngineError("cannot reach the Docker engine (Connection refused); start it (sudo systemctl start docker, or dockerd &) or set DOCKER_HOST")
VERSION = {"Version": "27.5.1", "ApiVersion": "1.47"}
INFO = {"DockerRootDir": "/var/lib/docker", "Runtimes": {"runc": {"path": "runc"}}, "DefaultRuntime": "runc", "CDISpecDirs": None}
NVIDIA_RUNTIME = {**INFO, "Runtimes": {"runc": {}, "nvidia": {"path": "nvidia-container-runtime"}}}
CDI_ON = {**INFO, "CDISpecDirs": ["/etc/cdi", "/var/run/cdi"]}
# podman 4.3.1 `system service` as it answers on this machine (trimmed)
PODMAN_VERSION = {"Platform": {"Name": "linux/amd64/debian-12"}, "Components": [{"Name": "Podman Engine", "Version": "4.3.1"}],
                  "Version": "4.3.1", "ApiVersion": "1.41", "Os": "linux", "Arch": "amd64"}
PODMAN_INFO = {"DockerRootDir": "/var/lib/containers/storage", "Runtimes": {"runc": {"path": "/usr/bin/runc"}, "crun": {}},
               "DefaultRuntime": "runc", "BuildahVersion": "1.28.2", "Rootless": False, "ServerVersion": "4.3.1"}
PODMAN_SOCKET = {"DOCKER_HOST": "unix:///run/podman/podman.sock"}
FIX_PODMAN_CDI = "sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"


def podman(**kw: Any) -> FakeHost:
    return FakeHost(**{"version": PODMAN_VERSION, "info": PODMAN_INFO, "environ": PODMAN_SOCKET, **kw})


@dataclass
class FakeHost:
    """The Host seam with canned answers; an exception as an answer is raised."""

    version: Mapping[str, Any] | BaseException = field(default_factory=lambda: VERSION)
    info: Mapping[str, Any] | BaseException | None = field(default_factory=lambda: INFO)  # None: never asked
    gpus: HostInfo = TWO_H200
    disk: Disk | BaseException = field(default_factory=lambda: Disk("/var/lib/docker", 2000 * GB, 500 * GB))
    config: Mapping[str, Any] | BaseException = field(default_factory=dict)
    specs: Sequence[str] = ()  # spec files offering nvidia.com/gpu=all
    refused: LoadError | None = None  # a spec the strict reader refuses
    hook: str | None = None
    environ: Mapping[str, str] = field(default_factory=dict)
    asked_cdi: list[tuple[str, ...]] = field(default_factory=list)

    @staticmethod
    def _answer(value: T | BaseException) -> T:
        if isinstance(value, BaseException):
            raise value
        return value

    def engine_version(self) -> Mapping[str, Any]:
        return self._answer(self.version)

    def engine_info(self) -> Mapping[str, Any]:
        info = self._answer(self.info)
        assert info is not None, "this case says the engine is never asked for its info"
        return info

    def nvml(self) -> HostInfo:
        return self.gpus

    def disk_usage(self, path: str) -> Disk:
        return self._answer(self.disk)

    def docker_config(self) -> Mapping[str, Any]:
        return self._answer(self.config)

    def cdi_lookup(self, names: tuple[str, ...], dirs: Sequence[str]) -> Lookup:
        self.asked_cdi.append(tuple(dirs))
        if self.refused is not None:
            raise self.refused
        files = tuple(s for s in self.specs if any(s.startswith(d + "/") for d in dirs))
        return Lookup(names, tuple(dirs), files, "" if files else gpupath.no_spec(tuple(dirs)))

    def which(self, program: str) -> str | None:
        return self.hook if program == doctor.GPU_HOOK else None


NEEDS = Needs(matrix="matrix.yaml", cuda=("12.8", "13.0"), registry="harbor.example.com", planned_bytes=100 * GB, targets=12)


def results(host: FakeHost, needs: Needs = NEEDS, check: Any = None) -> list[Result]:
    facts = doctor.gather(host)
    return doctor.run(facts, needs, [check] if check else doctor.CHECKS)


def one(host: FakeHost, check: Any, needs: Needs = NEEDS) -> Result:
    (result,) = results(host, needs, check)
    return result


# -- engine ------------------------------------------------------------------------------------------

ENGINE = [
    pytest.param(FakeHost(), Result("engine", OK, "Docker 27.5.1 (API 1.47) at the local socket"), id="ok"),
    pytest.param(FakeHost(environ={"DOCKER_HOST": "tcp://10.0.0.5:2376"}),
                 Result("engine", OK, "Docker 27.5.1 (API 1.47) at tcp://10.0.0.5:2376"), id="remote-ok"),
    pytest.param(FakeHost(version=ENGINE_DOWN, info=ENGINE_DOWN),
                 Result("engine", FAIL, "cannot reach the Docker engine (Connection refused)",
                        "sudo systemctl start docker   (not installed: sudo apt-get install -y docker.io)"), id="down"),
    pytest.param(FakeHost(version=EngineError("cannot reach the Docker engine (Permission denied); start it"), info=None),
                 Result("engine", FAIL, "cannot reach the Docker engine (Permission denied)",
                        "sudo usermod -aG docker $USER && newgrp docker"), id="no-permission"),
    pytest.param(FakeHost(version=ENGINE_DOWN, environ={"DOCKER_HOST": "tcp://10.0.0.5:2376"}),
                 Result("engine", FAIL, "cannot reach the Docker engine (Connection refused)",
                        "check that the engine at DOCKER_HOST=tcp://10.0.0.5:2376 is up, or: unset DOCKER_HOST"), id="remote-down"),
    pytest.param(FakeHost(version={"Version": "18.09.1", "ApiVersion": "1.39"}),
                 Result("engine", FAIL, "Docker 18.09.1 (API 1.39) at the local socket: too old to pass GPUs to containers (API < 1.40)",
                        "upgrade Docker to 19.03 or newer: sudo apt-get install -y docker.io (or docker-ce from Docker's repository)"),
                 id="too-old"),
    pytest.param(FakeHost(version=ValueError("garbage")),
                 Result("engine", FAIL, "ValueError: garbage",
                        "sudo systemctl start docker   (not installed: sudo apt-get install -y docker.io)"), id="nonsense"),
    pytest.param(podman(), Result("engine", OK, "Podman 4.3.1 (API 1.41, rootful) at unix:///run/podman/podman.sock"), id="podman"),
    pytest.param(podman(info={**PODMAN_INFO, "Rootless": True}, environ={"DOCKER_HOST": "unix:///run/user/1000/podman/podman.sock"}),
                 Result("engine", OK, "Podman 4.3.1 (API 1.41, rootless) at unix:///run/user/1000/podman/podman.sock"), id="podman-rootless"),
    pytest.param(podman(version=EngineError("cannot reach the Podman engine at DOCKER_HOST=unix:///run/podman/podman.sock "
                                            "(Connection refused); start Podman's Docker API there")),
                 Result("engine", FAIL, "cannot reach the Podman engine at DOCKER_HOST=unix:///run/podman/podman.sock (Connection "
                        "refused)", "start Podman's Docker API there: podman system service --time=0 "
                        "unix:///run/podman/podman.sock &   (systemd: sudo systemctl start podman.socket; rootless: systemctl --user "
                        "start podman.socket)"), id="podman-down"),
    pytest.param(podman(version=EngineError("cannot reach the Podman engine at DOCKER_HOST=unix:///run/podman/podman.sock "
                                            "(Permission denied); start it"), info=None),
                 Result("engine", FAIL, "cannot reach the Podman engine at DOCKER_HOST=unix:///run/podman/podman.sock (Permission "
                        "denied)", "use your own Podman: systemctl --user start podman.socket && export "
                        "DOCKER_HOST=unix://$XDG_RUNTIME_DIR/podman/podman.sock"), id="podman-not-yours"),
]


@pytest.mark.parametrize("host, expected", ENGINE)
def test_engine(host: FakeHost, expected: Result) -> None:
    assert one(host, doctor.engine_check) == expected


# -- GPU runtime ---------------------------------------------------------------------------------------

FIX_TOOLKIT = ("sudo apt-get install -y nvidia-container-toolkit && sudo nvidia-ctk runtime configure --runtime=docker"
               " && sudo systemctl restart docker")
FIX_CDI = f"sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml   (or install the NVIDIA container toolkit: {FIX_TOOLKIT})"
REMOTE = {"DOCKER_HOST": "tcp://10.0.0.5:2376"}
HOSTILE = LoadError("/etc/cdi/nvidia.yaml", "is not a regular file (a folder, FIFO, socket or device)", fix="give the file itself")
TRANSLATED = ("CDI translated by imagesmith from /etc/cdi/nvidia.yaml (nvidia.com/gpu=all): this Docker has no CDI, so verify "
              "gives containers the spec's device nodes, mounts and environment itself and emulates its create-symlinks and "
              "update-ldcache hooks")
RUNTIME = [
    pytest.param(FakeHost(info=NVIDIA_RUNTIME), Result("gpu runtime", OK, "nvidia runtime registered (default runtime: runc): docker --gpus"),
                 id="nvidia-runtime"),
    pytest.param(FakeHost(info=NVIDIA_RUNTIME, refused=HOSTILE),
                 Result("gpu runtime", OK, "nvidia runtime registered (default runtime: runc): docker --gpus"),
                 id="nvidia-runtime-needs-no-spec"),
    pytest.param(FakeHost(info=CDI_ON, specs=["/etc/cdi/nvidia.yaml"]),
                 Result("gpu runtime", OK, "engine CDI (CDISpecDirs /etc/cdi, /var/run/cdi): /etc/cdi/nvidia.yaml offers "
                                           "nvidia.com/gpu=all"), id="engine-cdi"),
    pytest.param(FakeHost(info=CDI_ON, specs=["/var/run/cdi/nvidia.json"]),
                 Result("gpu runtime", OK, "engine CDI (CDISpecDirs /etc/cdi, /var/run/cdi): /var/run/cdi/nvidia.json offers "
                                           "nvidia.com/gpu=all"), id="engine-cdi-run-dir"),
    pytest.param(FakeHost(specs=["/etc/cdi/nvidia.yaml"]), Result("gpu runtime", OK, TRANSLATED), id="cdi-translated"),
    pytest.param(FakeHost(specs=["/etc/cdi/nvidia.yaml"], hook="/usr/bin/nvidia-container-runtime-hook"),
                 Result("gpu runtime", OK, TRANSLATED), id="cdi-before-hook"),
    pytest.param(FakeHost(hook="/usr/bin/nvidia-container-runtime-hook"),
                 Result("gpu runtime", OK, "/usr/bin/nvidia-container-runtime-hook present: docker --gpus works"), id="hook"),
    pytest.param(FakeHost(info=CDI_ON, environ=REMOTE),
                 Result("gpu runtime", OK, "engine CDI (CDISpecDirs /etc/cdi, /var/run/cdi): verify passes nvidia.com/gpu=all "
                                           "where the engine refuses --gpus"), id="remote-engine-cdi"),
    pytest.param(FakeHost(specs=["/etc/cdi/nvidia.yaml"], environ=REMOTE),
                 Result("gpu runtime", FAIL, "Docker at DOCKER_HOST=tcp://10.0.0.5:2376 lists no nvidia runtime and no CDI of "
                        "its own (the CDI specs of this host say nothing of it): containers cannot see the GPUs",
                        f"on that host: {FIX_TOOLKIT}"), id="remote-no-runtime"),
    pytest.param(FakeHost(refused=HOSTILE),
                 Result("gpu runtime", FAIL, "a CDI spec is refused: /etc/cdi/nvidia.yaml: is not a regular file (a folder, "
                                             "FIFO, socket or device); give the file itself", FIX_CDI), id="hostile-spec"),
    pytest.param(FakeHost(),
                 Result("gpu runtime", FAIL, "Docker has no nvidia runtime or nvidia-container-runtime-hook, and no CDI spec in "
                        "/etc/cdi or /var/run/cdi: containers cannot see the GPUs", FIX_CDI), id="nothing-with-gpus"),
    pytest.param(FakeHost(gpus=NO_GPU),
                 Result("gpu runtime", WARN, "Docker has no nvidia runtime or nvidia-container-runtime-hook, and no CDI spec in "
                        "/etc/cdi or /var/run/cdi (no GPU here either: verification runs in CPU mode)", FIX_CDI), id="nothing-no-gpu"),
    pytest.param(FakeHost(version=ENGINE_DOWN), Result("gpu runtime", WARN, "not checked: the engine is unreachable"),
                 id="engine-down"),
    pytest.param(podman(specs=["/etc/cdi/nvidia.yaml"]),
                 Result("gpu runtime", OK, "Podman resolves CDI devices itself (from /etc/cdi, /var/run/cdi): /etc/cdi/nvidia.yaml "
                                           "offers nvidia.com/gpu=all"), id="podman-cdi"),
    pytest.param(podman(info={**PODMAN_INFO, "Runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}, hook="/usr/bin/nvidia-container-runtime-hook"),
                 Result("gpu runtime", FAIL, "Podman takes GPUs by CDI only (its Docker API drops --gpus), and no CDI spec in /etc/cdi "
                        "or /var/run/cdi: containers cannot see the GPUs", FIX_PODMAN_CDI), id="podman-no-spec-nvidia-runtime-or-not"),
    pytest.param(podman(gpus=NO_GPU),
                 Result("gpu runtime", WARN, "Podman takes GPUs by CDI only (its Docker API drops --gpus), and no CDI spec in /etc/cdi "
                        "or /var/run/cdi (no GPU here either: verification runs in CPU mode)", FIX_PODMAN_CDI), id="podman-no-gpu"),
    pytest.param(podman(refused=HOSTILE),
                 Result("gpu runtime", FAIL, "a CDI spec is refused: /etc/cdi/nvidia.yaml: is not a regular file (a folder, "
                                             "FIFO, socket or device); give the file itself", FIX_PODMAN_CDI), id="podman-hostile-spec"),
    pytest.param(podman(environ={"DOCKER_HOST": "ssh://gpu1"}),
                 Result("gpu runtime", OK, "Podman at DOCKER_HOST=ssh://gpu1 resolves CDI devices itself: verify passes "
                                           "nvidia.com/gpu=all (the specs on that host decide; it refuses a name they lack)"),
                 id="podman-remote"),
]


@pytest.mark.parametrize("host, expected", RUNTIME)
def test_gpu_runtime(host: FakeHost, expected: Result) -> None:
    assert one(host, doctor.runtime_check) == expected


def test_cdi_specs_are_looked_for_where_the_engine_reads_them() -> None:
    host = FakeHost(info={**INFO, "CDISpecDirs": ["/opt/cdi"]})
    doctor.gather(host)
    assert host.asked_cdi == [("/opt/cdi",)]
    host = FakeHost()
    doctor.gather(host)
    assert host.asked_cdi == [("/etc/cdi", "/var/run/cdi")]


# -- GPUs and driver ---------------------------------------------------------------------------------

FIX_DRIVER = "install the NVIDIA driver: sudo apt-get install -y cuda-drivers (NVIDIA's CUDA apt repository), then reboot"
GPUS = [
    pytest.param(TWO_H200, Result("gpus", OK, "2 × NVIDIA H200 (140 GiB, sm_90); driver 580.126.20 (CUDA 13.0)"), id="two-h200"),
    pytest.param(HostInfo("570.211.01", "12.8", (replace(H200, name="NVIDIA L4", memory_total_mib=23034, capability="8.9"), H200)),
                 Result("gpus", OK, "1 × NVIDIA L4 (22 GiB, sm_89), 1 × NVIDIA H200 (140 GiB, sm_90); driver 570.211.01 (CUDA 12.8)"),
                 id="mixed"),
    pytest.param(NO_GPU, Result("gpus", WARN, "no NVIDIA GPU: verification will run in CPU mode (NVML unavailable "
                                "(NVMLError_LibraryNotFound: NVML Shared Library Not Found); no NVIDIA driver on this host?)", FIX_DRIVER),
                 id="no-driver"),
    pytest.param(HostInfo("580.126.20", "13.0", ()),
                 Result("gpus", WARN, "no NVIDIA GPU: verification will run in CPU mode (NVML reports no GPU)", FIX_DRIVER),
                 id="driver-without-gpu"),
]


@pytest.mark.parametrize("gpus, expected", GPUS)
def test_gpus(gpus: HostInfo, expected: Result) -> None:
    assert one(FakeHost(gpus=gpus), doctor.gpu_check) == expected


def with_driver(version: str) -> HostInfo:
    return HostInfo(version, "13.0", (H200,))


DRIVER = [
    pytest.param("580.126.20", ("12.8", "13.0"), [
        Result("driver for CUDA 12.8", OK, "driver 580.126.20 >= 570.211.01"),
        Result("driver for CUDA 13.0", OK, "driver 580.126.20 >= 580.126.20")], id="new"),
    pytest.param("580.65.06", ("13.0",), [
        Result("driver for CUDA 13.0", WARN, "driver 580.65.06 < 580.126.20: CUDA 13.0 images run under minor-version "
               "compatibility (no PTX JIT of newer kernels)", "install driver >= 580.126.20: sudo apt-get install -y cuda-drivers-580")],
        id="minor-compat"),
    pytest.param("575.57.08", ("12.8", "13.0"), [
        Result("driver for CUDA 12.8", OK, "driver 575.57.08 >= 570.211.01"),
        Result("driver for CUDA 13.0", FAIL, "driver 575.57.08 is older than 580.65.06, the oldest that runs CUDA 13.0",
               "install driver >= 580.126.20: sudo apt-get install -y cuda-drivers-580")], id="too-old-for-13"),
    pytest.param("535.54.03", ("12.8",), [
        Result("driver for CUDA 12.8", WARN, "driver 535.54.03 < 570.211.01: CUDA 12.8 images run under minor-version "
               "compatibility (no PTX JIT of newer kernels)", "install driver >= 570.211.01: sudo apt-get install -y cuda-drivers-570")],
        id="12.x-on-535"),
    pytest.param("580.126.20", ("99.9",), [
        Result("driver for CUDA 99.9", WARN, "CUDA 99.9 is not in the knowledge base",
               "imagesmith compat  (update imagesmith, or set IMAGESMITH_COMPAT)")], id="unknown-cuda"),
    pytest.param("580.126.20", (), [], id="cpu-only-matrix"),
]


@pytest.mark.parametrize("driver, cuda, expected", DRIVER)
def test_driver_against_every_cuda_of_the_matrix(driver: str, cuda: tuple[str, ...], expected: list[Result]) -> None:
    assert results(FakeHost(gpus=with_driver(driver)), replace(NEEDS, cuda=cuda), doctor.driver_check) == expected


def test_no_driver_rows_without_a_gpu() -> None:
    assert results(FakeHost(gpus=NO_GPU), NEEDS, doctor.driver_check) == []


# -- disk --------------------------------------------------------------------------------------------

FIX_PRUNE = "docker image prune -a && docker builder prune   (or move data-root in /etc/docker/daemon.json to a larger disk)"
DISK = [
    pytest.param(500, NEEDS, Result("disk", OK, "500.0 GB free on /var/lib/docker; 12 planned images need about 100.0 GB"), id="room"),
    pytest.param(120, NEEDS, Result("disk", WARN, "120.0 GB free on /var/lib/docker; 12 planned images need about 100.0 GB, "
                                    "little room for build layers", FIX_PRUNE), id="tight"),
    pytest.param(54, NEEDS, Result("disk", FAIL, "54.0 GB free on /var/lib/docker; 12 planned images need about 100.0 GB", FIX_PRUNE),
                 id="too-little"),
    pytest.param(54, Needs(), Result("disk", OK, "54.0 GB free on /var/lib/docker"), id="no-matrix"),
    pytest.param(6, Needs(), Result("disk", WARN, "6.0 GB free on /var/lib/docker", FIX_PRUNE), id="no-matrix-nearly-full"),
]


@pytest.mark.parametrize("free_gb, needs, expected", DISK)
def test_disk_against_planned_images(free_gb: int, needs: Needs, expected: Result) -> None:
    host = FakeHost(disk=Disk("/var/lib/docker", 1000 * GB, free_gb * GB))
    assert one(host, doctor.disk_check, needs) == expected


def test_disk_of_a_remote_engine_cannot_be_measured() -> None:
    host = FakeHost(disk=FileNotFoundError(2, "No such file or directory"), info={**INFO, "DockerRootDir": "/srv/docker"})
    assert one(host, doctor.disk_check) == Result(
        "disk", WARN, "cannot measure /srv/docker here (No such file or directory; a remote engine?); the matrix needs about 100.0 GB")


PLANNED = [
    ("base", "13.0", 6.0), ("base", "cpu", 1.3), ("cv", "12.8", 0.6), ("nlp", "cpu", 0.3), ("project", "12.8", 0.1),
    ("tools", "12.8", 0.5),
]


@pytest.mark.parametrize("layer, cuda, gb", PLANNED)
def test_layer_size_table(layer: str, cuda: str, gb: float) -> None:
    assert doctor.layer_bytes(layer, cuda) == int(gb * GB)


# -- registry ----------------------------------------------------------------------------------------

LOGIN_FIX = ("docker login harbor.example.com   (or export IMAGESMITH_REGISTRY_USER=... IMAGESMITH_REGISTRY_PASSWORD=..., "
             "e.g. a Harbor robot account)")
HUB = replace(NEEDS, registry=None)
REGISTRY = [
    pytest.param(FakeHost(environ={"IMAGESMITH_REGISTRY_USER": "robot$ci", "IMAGESMITH_REGISTRY_PASSWORD": "x"}), NEEDS,
                 Result("registry", OK, "harbor.example.com: environment (IMAGESMITH_REGISTRY_USER, for harbor.example.com)"), id="env"),
    pytest.param(FakeHost(environ={"IMAGESMITH_REGISTRY_USER": "robot$ci"}), NEEDS,
                 Result("registry", FAIL, "harbor.example.com: IMAGESMITH_REGISTRY_USER is set but IMAGESMITH_REGISTRY_PASSWORD is not: "
                        "set both, or neither", LOGIN_FIX), id="env-half"),
    pytest.param(FakeHost(config={"auths": {"harbor.example.com": {"auth": "cm9ib3Q6eA=="}}}), NEEDS,
                 Result("registry", OK, "harbor.example.com: docker config"), id="auths"),
    pytest.param(FakeHost(config={"auths": {"https://harbor.example.com/v2/": {"auth": "cm9ib3Q6eA=="}}}), NEEDS,
                 Result("registry", OK, "harbor.example.com: docker config"), id="auths-url-key"),
    pytest.param(FakeHost(config={"auths": {"harbor.example.com": {"auth": "eA=="}}}), NEEDS,
                 Result("registry", FAIL, "harbor.example.com: docker config: the login for harbor.example.com cannot be read "
                        "(not enough values to unpack (expected 2, got 1)); run docker login harbor.example.com again "
                        "(install its credential helper if the config names one), or set "
                        "IMAGESMITH_REGISTRY_USER/IMAGESMITH_REGISTRY_PASSWORD", LOGIN_FIX), id="auth-not-user-password"),
    pytest.param(FakeHost(config={"credHelpers": {"harbor.example.com": "imagesmith-absent"}}), NEEDS,
                 Result("registry", FAIL, "harbor.example.com: docker config: the login for harbor.example.com cannot be read "
                        "(Credentials store error: StoreError('docker-credential-imagesmith-absent not installed or not available "
                        "in PATH')); run docker login harbor.example.com again (install its credential helper if the config "
                        "names one), or set IMAGESMITH_REGISTRY_USER/IMAGESMITH_REGISTRY_PASSWORD", LOGIN_FIX), id="helper-missing"),
    pytest.param(FakeHost(config={"auths": {"harbor.example.com": {}}}), NEEDS,
                 Result("registry", WARN, "harbor.example.com: no login found: building works, publishing cannot push", LOGIN_FIX),
                 id="empty-entry"),
    pytest.param(FakeHost(config={"auths": {"harbor.example.com": {"identitytoken": "refresh"}}}), NEEDS,
                 Result("registry", WARN, "harbor.example.com: no login found: building works, publishing cannot push", LOGIN_FIX),
                 id="identity-token"),  # an OAuth refresh token cannot log in a push here
    pytest.param(FakeHost(config={"auths": {"other.example.com": {"auth": "cm9ib3Q6eA=="}}}), NEEDS,
                 Result("registry", WARN, "harbor.example.com: no login found: building works, publishing cannot push", LOGIN_FIX),
                 id="other-registry"),
    pytest.param(FakeHost(), replace(NEEDS, publish=True),
                 Result("registry", FAIL, "harbor.example.com: no login found: publishing cannot push", LOGIN_FIX), id="release"),
    pytest.param(FakeHost(config=ValueError("Expecting value: line 1 column 1 (char 0)")), NEEDS,
                 Result("registry", WARN, "harbor.example.com: no login found (ValueError: Expecting value: line 1 column 1 (char 0)): "
                        "building works, publishing cannot push", LOGIN_FIX), id="broken-config"),
    pytest.param(FakeHost(config={"auths": {"https://index.docker.io/v1/": {"auth": "cm9ib3Q6eA=="}}}), HUB,
                 Result("registry", OK, "docker.io: docker config"), id="docker-hub"),
    pytest.param(FakeHost(), replace(NEEDS, registry="127.0.0.1:5000"),
                 Result("registry", OK, "127.0.0.1:5000: a local registry; no login found (fine if it has no auth)"), id="loopback"),
    pytest.param(FakeHost(), replace(NEEDS, registry="localhost"),
                 Result("registry", OK, "localhost: a local registry; no login found (fine if it has no auth)"), id="localhost"),
    pytest.param(FakeHost(), replace(NEEDS, registry="127.0.0.2:5000"),  # all of 127.0.0.0/8, as the registry client sees it
                 Result("registry", OK, "127.0.0.2:5000: a local registry; no login found (fine if it has no auth)"), id="loopback-net"),
]


@pytest.mark.parametrize("host, needs, expected", REGISTRY)
def test_registry_login(host: FakeHost, needs: Needs, expected: Result) -> None:
    assert one(host, doctor.registry_check, needs) == expected


def test_the_credentials_file_comes_before_the_environment_and_the_docker_config(tmp_path: Path) -> None:
    file = tmp_path / "robot"
    file.write_text("robot$ml+ci:SECRET\n")
    host = FakeHost(environ={"IMAGESMITH_REGISTRY_USER": "u", "IMAGESMITH_REGISTRY_PASSWORD": "p"},
                    config={"auths": {"harbor.example.com": {"auth": "cm9ib3Q6eA=="}}})
    assert one(host, doctor.registry_check, replace(NEEDS, credentials_file=file)) == Result("registry", OK, f"harbor.example.com: file {file} (line 1, for harbor.example.com)")


def test_a_credential_helper_is_run_as_publish_would_run_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    helper = tmp_path / "docker-credential-imagesmith-test"
    helper.write_text('#!/bin/sh\nread host\n[ "$host" = harbor.example.com ] && echo \'{"Username": "robot", "Secret": "s"}\' && exit 0\n'
                      'echo "credentials not found in native keychain"; exit 1\n')
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    host = FakeHost(config={"credHelpers": {"harbor.example.com": "imagesmith-test"}})
    assert one(host, doctor.registry_check, NEEDS) == Result("registry", OK, "harbor.example.com: docker credential helper imagesmith-test")
    other = replace(NEEDS, registry="other.example.com")
    host = FakeHost(config={"credsStore": "imagesmith-test"})
    assert one(host, doctor.registry_check, other).status == WARN  # the helper knows no login for it


def test_no_registry_row_without_a_matrix() -> None:
    assert results(FakeHost(), Needs(), doctor.registry_check) == []


# -- the matrix --------------------------------------------------------------------------------------

MATRIX = textwrap.dedent("""\
    version: 1
    image: {registry: harbor.example.com, repository: ml/pytorch}
    matrix:
      torch: ["2.9"]
      cuda: ["12.8", cpu]
      python: ["3.11"]
      os: [ubuntu22.04]
    layers:
      base: {}
      cv: {packages: [torchvision]}
      nlp: {packages: ["tokenizers==0.22.1"]}
""")


def test_needs_from_a_matrix(write_matrix: Any) -> None:
    needs = doctor.load_needs(write_matrix(MATRIX))
    # CUDA: base 6 + cv 0.6 + nlp 0.3; cpu: base 1.3 + cv 0.6 + nlp 0.3
    assert (needs.cuda, needs.registry, needs.targets, needs.planned_bytes, needs.problem) == (
        ("12.8",), "harbor.example.com", 6, 9_100_000_000, None)


def test_an_invalid_matrix_is_a_failed_row(write_matrix: Any) -> None:
    path = write_matrix(MATRIX.replace('cuda: ["12.8", cpu]', 'cuda: ["11.1"]'))
    needs = doctor.load_needs(path)
    assert doctor.matrix_check(Facts(), needs) == [Result(
        "matrix", FAIL, f"{path}: matrix.yaml:5 matrix.cuda[0]: torch 2.9 has no CUDA 11.1 wheels; it has 12.6, 12.8, 13.0",
        f"imagesmith matrix validate {path}")]


def test_without_a_matrix_doctor_says_how_to_give_one(tmp_path: Path) -> None:
    needs = doctor.load_needs(None, cwd=tmp_path)
    assert needs == Needs()
    assert doctor.matrix_check(Facts(), needs) == [Result(
        "matrix", WARN, "no matrix.yaml here: driver, disk and registry are checked without one",
        "imagesmith doctor --matrix path/to/matrix.yaml")]


def test_matrix_yaml_in_the_working_folder_is_used(tmp_path: Path) -> None:
    (tmp_path / "matrix.yaml").write_text(MATRIX)
    needs = doctor.load_needs(None, cwd=tmp_path)
    assert needs.matrix == str(tmp_path / "matrix.yaml") and needs.targets == 6
    assert doctor.matrix_check(Facts(), needs) == [Result("matrix", OK, f"{tmp_path / 'matrix.yaml'}: 6 targets, CUDA 12.8")]


# -- whole runs: the two situations a new user meets ----------------------------------------------------


def test_no_engine_and_no_gpu_is_not_ready() -> None:
    found = results(FakeHost(version=ENGINE_DOWN, info=ENGINE_DOWN, gpus=NO_GPU))
    assert [(r.id, r.status) for r in found] == [
        ("matrix", OK), ("engine", FAIL), ("gpu runtime", WARN), ("gpus", WARN), ("disk", WARN), ("registry", WARN)]
    assert doctor.exit_code(found) == 1
    assert doctor.verdict(found) == "NOT READY: 1 problem to fix, 4 warnings"
    assert doctor.fix_lines(found) == [
        "  engine: sudo systemctl start docker   (not installed: sudo apt-get install -y docker.io)",
        f"  gpus: {FIX_DRIVER}",
        f"  registry: {LOGIN_FIX}",
    ]


def test_an_engine_without_gpu_is_ready_for_cpu_mode() -> None:
    found = results(FakeHost(gpus=NO_GPU, config={"auths": {"harbor.example.com": {"auth": "cm9ib3Q6eA=="}}}))
    assert [(r.id, r.status) for r in found] == [
        ("matrix", OK), ("engine", OK), ("gpu runtime", WARN), ("gpus", WARN), ("disk", OK), ("registry", OK)]
    assert doctor.exit_code(found) == 0 and doctor.verdict(found) == "ready (2 warnings)"


def test_a_full_gpu_host_is_ready() -> None:
    host = FakeHost(info=NVIDIA_RUNTIME, environ={"IMAGESMITH_REGISTRY_USER": "u", "IMAGESMITH_REGISTRY_PASSWORD": "p"})
    found = results(host)
    assert all(r.status == OK for r in found) and [r.id for r in found] == [
        "matrix", "engine", "gpu runtime", "gpus", "driver for CUDA 12.8", "driver for CUDA 13.0", "disk", "registry"]
    assert doctor.verdict(found) == "ready" and doctor.fix_lines(found) == []


def test_json_form() -> None:
    found = results(FakeHost(version=ENGINE_DOWN))
    doc = json.loads(json.dumps(doctor.to_json(found)))
    assert doc["schema"] == "imagesmith.doctor/1" and doc["ready"] is False
    assert doc["checks"][1] == {"id": "engine", "status": "fail", "detail": "cannot reach the Docker engine (Connection refused)",
                                "fix": "sudo systemctl start docker   (not installed: sudo apt-get install -y docker.io)"}


def test_table_rows_shout_problems() -> None:
    found = [Result("a", OK, "fine"), Result("b", WARN, "hm", "x"), Result("c", FAIL, "no", "y")]
    assert doctor.table_rows(found) == [["a", "ok", "fine"], ["b", "WARN", "hm"], ["c", "FAIL", "no"]]
    assert doctor.fix_lines(found) == ["  c: y", "  b: x"]


# -- the real seam, on this machine's file system ----------------------------------------------------------


def test_system_host_reads_docker_config_and_cdi_specs(tmp_path: Path) -> None:
    (tmp_path / "docker").mkdir()
    (tmp_path / "docker" / "config.json").write_text('{"auths": {"r.example": {"auth": "eA=="}}}')
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    (cdi / "nvidia.yaml").write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n  containerEdits:\n"
                                     "    deviceNodes: [{path: /dev/nvidia0}]\n")
    (cdi / "other.yaml").write_text("cdiVersion: 0.5.0\nkind: vendor.example/fpga\ndevices: [{name: a, containerEdits: {}}]\n")
    (cdi / "notes.txt").write_text("nvidia.com/gpu")
    host = doctor.SystemHost(engine=EngineBase(), environ={"DOCKER_CONFIG": str(tmp_path / "docker")})
    assert host.docker_config() == {"auths": {"r.example": {"auth": "eA=="}}}
    dirs = (str(cdi), str(tmp_path / "absent"))
    assert host.cdi_lookup(("nvidia.com/gpu=all",), dirs) == Lookup(("nvidia.com/gpu=all",), dirs, (str(cdi / "nvidia.yaml"),))
    assert host.cdi_lookup(("nvidia.com/gpu=7",), dirs).problem == (
        "no CDI spec offers nvidia.com/gpu=7; the specs offer nvidia.com/gpu=all, vendor.example/fpga=a")
    os.mkfifo(cdi / "fifo.json")
    with pytest.raises(LoadError, match=r"fifo.json: is not a regular file"):
        host.cdi_lookup(("nvidia.com/gpu=all",), dirs)
    assert host.disk_usage(str(tmp_path)).free > 0
    assert doctor.SystemHost(environ={"HOME": str(tmp_path)}).docker_config() == {}  # no ~/.docker/config.json


# -- Podman: its own fixes, its own logins ---------------------------------------------------------------

PODMAN_PRUNE = "podman image prune -a && podman builder prune   (or move graphroot in /etc/containers/storage.conf to a larger disk)"
PODMAN_LOGIN = ("podman login harbor.example.com   (or export IMAGESMITH_REGISTRY_USER=... IMAGESMITH_REGISTRY_PASSWORD=..., "
                "e.g. a Harbor robot account)")


def test_podmans_disk_and_login_fixes_are_podmans(tmp_path: Path) -> None:
    host = podman(disk=Disk("/var/lib/containers/storage", 1000 * GB, 54 * GB))
    assert one(host, doctor.disk_check) == Result("disk", FAIL, "54.0 GB free on /var/lib/containers/storage; 12 planned images need "
                                                                "about 100.0 GB", PODMAN_PRUNE)
    assert one(podman(), doctor.registry_check) == Result("registry", WARN, "harbor.example.com: no login found: building works, "
                                                                            "publishing cannot push", PODMAN_LOGIN)
    assert one(podman(version=ENGINE_DOWN, info=None), doctor.registry_check, replace(NEEDS, publish=True)).fix == PODMAN_LOGIN


def test_a_podman_login_is_found_as_publish_would_find_it(tmp_path: Path) -> None:
    (tmp_path / "containers").mkdir()
    (tmp_path / "containers" / "auth.json").write_text(json.dumps({"auths": {"harbor.example.com": {"auth": "cm9ib3Q6eA=="}}}))
    host = podman(environ={**PODMAN_SOCKET, "XDG_RUNTIME_DIR": str(tmp_path)})
    assert one(host, doctor.registry_check) == Result("registry", OK, f"harbor.example.com: Podman auth file {tmp_path}/containers/auth.json")
