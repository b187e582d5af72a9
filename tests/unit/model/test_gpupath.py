"""The GPU path (imagesmith/model/gpupath.py): --gpu-runtime, --gpus, what docker info says and where the engine is,
and what the CDI specs of this host offer -> the path a run takes, why, and where it goes when --gpus is refused."""

from __future__ import annotations

import pytest

from imagesmith.errors import UserError
from imagesmith.model import gpupath
from imagesmith.model.gpupath import CDI_ENGINE, CDI_TRANSLATED, NONE, NVIDIA, EngineGpu, GpuPath, Lookup

DIRS = ("/etc/cdi", "/var/run/cdi")
ALL = ("nvidia.com/gpu=all",)
FOUND = Lookup(ALL, DIRS, ("/etc/cdi/nvidia.yaml",))
BOTH = Lookup(("nvidia.com/gpu=0", "nvidia.com/gpu=1"), DIRS, ("/etc/cdi/a.yaml", "/var/run/cdi/b.json"))
NO_SPEC = Lookup(ALL, DIRS, problem=gpupath.no_spec(DIRS))
UNKNOWN = Lookup(("nvidia.com/gpu=3",), DIRS, problem="no CDI spec offers nvidia.com/gpu=3; the specs offer nvidia.com/gpu=0, nvidia.com/gpu=all")
LOCAL, NVIDIA_RT = EngineGpu(), EngineGpu(nvidia_runtime=True)
CDI_ON = EngineGpu(cdi_dirs=DIRS)
ROOTLESS = EngineGpu(docker_host="unix:///run/user/1000/docker.sock")
REMOTE, REMOTE_CDI = EngineGpu(docker_host="tcp://gpu1:2376"), EngineGpu(cdi_dirs=("/etc/cdi",), docker_host="ssh://gpu1")
SPEC_FIX = "sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
TRANSLATED = "/etc/cdi/nvidia.yaml defines nvidia.com/gpu=all; the engine has no CDI: imagesmith applies the specs' edits itself"
FILES = ("/etc/cdi/nvidia.yaml",)
PODMAN, REMOTE_PODMAN = EngineGpu(cdi_dirs=DIRS, podman=True), EngineGpu(cdi_dirs=DIRS, docker_host="ssh://gpu1", podman=True)

CHOICES = [
    ("auto", "none", NVIDIA_RT, FOUND, GpuPath(NONE, "--gpus none: CPU mode")),
    ("cdi", "none", LOCAL, FOUND, GpuPath(NONE, "--gpus none: CPU mode")),
    ("nvidia", "all", LOCAL, FOUND, GpuPath(NVIDIA, "--gpu-runtime nvidia: the engine's --gpus")),
    ("auto", "all", NVIDIA_RT, FOUND, GpuPath(NVIDIA, "the engine lists an nvidia runtime: its --gpus")),
    ("auto", "all", LOCAL, FOUND, GpuPath(CDI_TRANSLATED, f"the engine lists no nvidia runtime; {TRANSLATED}", ALL, FILES)),
    ("auto", "all", ROOTLESS, FOUND, GpuPath(CDI_TRANSLATED, f"the engine lists no nvidia runtime; {TRANSLATED}", ALL, FILES)),
    ("auto", "all", CDI_ON, FOUND, GpuPath(CDI_ENGINE, "the engine lists no nvidia runtime; /etc/cdi/nvidia.yaml defines "
                                                       "nvidia.com/gpu=all, and the engine resolves CDI devices itself", ALL, FILES)),
    ("auto", "all", LOCAL, NO_SPEC, GpuPath(NVIDIA, f"the engine lists no nvidia runtime and no CDI spec in /etc/cdi or "
                                                    f"/var/run/cdi; write NVIDIA's: {SPEC_FIX}: its --gpus, tried")),
    ("auto", "3", LOCAL, UNKNOWN, GpuPath(NVIDIA, f"the engine lists no nvidia runtime and {UNKNOWN.problem}: its --gpus, tried")),
    ("auto", "all", REMOTE, FOUND, GpuPath(NVIDIA, "the engine lists no nvidia runtime and is not on this host "
                                                   "(DOCKER_HOST=tcp://gpu1:2376), so the CDI specs here say nothing of it: its --gpus, tried")),
    ("auto", "all", REMOTE_CDI, Lookup(ALL), GpuPath(
        NVIDIA, "the engine lists no nvidia runtime and is not on this host (DOCKER_HOST=ssh://gpu1), so the CDI specs here say "
                "nothing of it: its --gpus, tried",
        then=GpuPath(CDI_ENGINE, "the engine refused --gpus and resolves CDI devices itself (CDISpecDirs /etc/cdi)", ALL))),
    ("cdi", "all", LOCAL, FOUND, GpuPath(CDI_TRANSLATED, f"--gpu-runtime cdi; {TRANSLATED}", ALL, FILES)),
    ("cdi", "0,1", CDI_ON, BOTH, GpuPath(CDI_ENGINE, "--gpu-runtime cdi; /etc/cdi/a.yaml, /var/run/cdi/b.json define "
                                                     "nvidia.com/gpu=0, nvidia.com/gpu=1, and the engine resolves CDI devices itself",
                                         BOTH.names, BOTH.files)),
    ("cdi", "all", REMOTE_CDI, Lookup(ALL), GpuPath(CDI_ENGINE, "--gpu-runtime cdi: the engine at DOCKER_HOST=ssh://gpu1 "
                                                                "resolves CDI devices itself", ALL)),
    # Podman: CDI names only (its Docker API drops --gpus); it resolves them from its host's specs itself
    ("auto", "all", PODMAN, FOUND, GpuPath(CDI_ENGINE, "Podman takes GPUs by CDI; /etc/cdi/nvidia.yaml defines nvidia.com/gpu=all, "
                                                       "and the engine resolves CDI devices itself", ALL, FILES)),
    ("auto", "all", PODMAN, NO_SPEC, GpuPath(CDI_ENGINE, "Podman takes GPUs by CDI only (its Docker API drops --gpus) and no CDI spec "
                                                         f"in /etc/cdi or /var/run/cdi; write NVIDIA's: {SPEC_FIX}: the names, tried "
                                                         "(Podman refuses a name no spec of its host offers)", ALL)),
    ("auto", "all", REMOTE_PODMAN, Lookup(ALL), GpuPath(
        CDI_ENGINE, "Podman takes GPUs by CDI only (its Docker API drops --gpus) and is not on this host (DOCKER_HOST=ssh://gpu1), "
                    "so the CDI specs here say nothing of it: the names, tried (Podman refuses a name no spec of its host offers)", ALL)),
    ("cdi", "all", PODMAN, FOUND, GpuPath(CDI_ENGINE, "--gpu-runtime cdi; /etc/cdi/nvidia.yaml defines nvidia.com/gpu=all, and the "
                                                      "engine resolves CDI devices itself", ALL, FILES)),
    ("nvidia", "all", PODMAN, FOUND, GpuPath(NVIDIA, "--gpu-runtime nvidia: the engine's --gpus")),  # dropped: the engine edge says so
]


@pytest.mark.parametrize("runtime, gpus, engine, lookup, expected", CHOICES)
def test_the_path_chosen(runtime: str, gpus: str, engine: EngineGpu, lookup: Lookup, expected: GpuPath) -> None:
    assert gpupath.choose(runtime, gpus, engine, lookup) == expected


@pytest.mark.parametrize("engine, lookup, message", [
    (LOCAL, NO_SPEC, f"--gpu-runtime cdi: no CDI spec in /etc/cdi or /var/run/cdi; write NVIDIA's: {SPEC_FIX}"),
    (LOCAL, UNKNOWN, f"--gpu-runtime cdi: {UNKNOWN.problem}"),
    (REMOTE, FOUND, "--gpu-runtime cdi: the engine at DOCKER_HOST=tcp://gpu1:2376 is not on this host and has no CDI of its "
                    "own (docker info lists no CDISpecDirs), and the CDI specs here say nothing of its devices; turn CDI on "
                    'there (add "features": {"cdi": true} to /etc/docker/daemon.json (Docker 25 or newer), then: sudo '
                    "systemctl restart docker), or run verify on that host"),
])
def test_cdi_that_cannot_be_had_is_a_clear_error(engine: EngineGpu, lookup: Lookup, message: str) -> None:
    with pytest.raises(UserError) as err:
        gpupath.choose("cdi", "all", engine, lookup)
    assert (err.value.exit_code, str(err.value)) == (1, message)


@pytest.mark.parametrize("runtime, gpus, engine, wanted", [
    ("auto", "all", LOCAL, True),
    ("auto", "all", NVIDIA_RT, False),  # --gpus: the specs are never read
    ("auto", "none", LOCAL, False),
    ("nvidia", "all", LOCAL, False),
    ("cdi", "all", NVIDIA_RT, True),
    ("cdi", "all", REMOTE, False),  # another host's engine: the specs here say nothing of it
    ("auto", "all", ROOTLESS, True),
])
def test_the_specs_are_read_only_when_the_choice_needs_them(runtime: str, gpus: str, engine: EngineGpu, wanted: bool) -> None:
    assert gpupath.wants_specs(runtime, gpus, engine) is wanted


@pytest.mark.parametrize("info, host, expected", [
    ({"Runtimes": {"runc": {}, "nvidia": {"path": "nvidia-container-runtime"}}, "CDISpecDirs": None}, "", EngineGpu(True)),
    ({"Runtimes": {"runc": {}}, "CDISpecDirs": ["/etc/cdi", "/var/run/cdi"]}, "", EngineGpu(cdi_dirs=DIRS)),
    ({}, "tcp://gpu1:2376", REMOTE),  # Docker 20.10: no CDISpecDirs key at all
    ({"Runtimes": ["nvidia"], "CDISpecDirs": "/etc/cdi"}, "", LOCAL),  # nonsense shapes are no runtime, no CDI
])
def test_what_docker_info_says(info: dict[str, object], host: str, expected: EngineGpu) -> None:
    assert EngineGpu.of(info, host) == expected


def test_the_report_block() -> None:
    path = GpuPath(CDI_TRANSLATED, "why", ALL, FILES)
    assert path.record(("a note",)) == {"path": "cdi-translated", "why": "why", "devices": ["nvidia.com/gpu=all"],
                                        "specs": ["/etc/cdi/nvidia.yaml"], "notes": ["a note"]}


PODMAN_INFO = {"ServerVersion": "4.3.1", "BuildahVersion": "1.28.2", "Rootless": False, "DefaultRuntime": "runc"}


@pytest.mark.parametrize("info, docker_host, engine", [
    (PODMAN_INFO | {"Runtimes": {"runc": {}, "crun": {}}}, "", PODMAN),
    # an nvidia runtime in containers.conf does not make Podman's Docker API take --gpus
    (PODMAN_INFO | {"Runtimes": {"runc": {}, "nvidia": {"path": "nvidia-container-runtime"}}}, "ssh://gpu1", REMOTE_PODMAN),
    (PODMAN_INFO | {"CDISpecDirs": ["/opt/cdi"]}, "", EngineGpu(cdi_dirs=("/opt/cdi",), podman=True)),
    ({"Runtimes": {"nvidia": {}}}, "", NVIDIA_RT),
    ({"CDISpecDirs": list(DIRS)}, "", CDI_ON),
])
def test_what_the_engine_says_decides_its_gpu_facts(info: dict[str, object], docker_host: str, engine: EngineGpu) -> None:
    assert EngineGpu.of(info, docker_host) == engine
