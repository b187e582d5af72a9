"""Which engine imagesmith talks to (imagesmith/model/engines.py): what Docker and Podman say of themselves
(docker version / docker info as each answers) -> the EngineKind, its words, and each engine's own fixes."""

from __future__ import annotations

from typing import Any

import pytest

from imagesmith.model import engines
from imagesmith.model.engines import EngineKind
from tests.conftest import ROOT

# As the engines on this machine answer (Debian's Docker 20.10 and podman 4.3.1 `system service`), trimmed.
DOCKER_VERSION = {"Platform": {"Name": ""}, "Components": [{"Name": "Engine", "Version": "20.10.24+dfsg1"}, {"Name": "containerd"}],
                  "Version": "20.10.24+dfsg1", "ApiVersion": "1.41", "Os": "linux", "Arch": "amd64"}
DOCKER_INFO = {"ServerVersion": "20.10.24+dfsg1", "SecurityOptions": ["name=seccomp,profile=default"], "OSType": "linux"}
PODMAN_VERSION = {"Platform": {"Name": "linux/amd64/debian-12"}, "Version": "4.3.1", "ApiVersion": "1.41", "Os": "linux", "Arch": "amd64",
                  "Components": [{"Name": "Podman Engine", "Version": "4.3.1"}, {"Name": "Conmon"}, {"Name": "OCI Runtime (runc)"}]}
PODMAN_INFO = {"ServerVersion": "4.3.1", "SecurityOptions": ["name=seccomp,profile=default"], "BuildahVersion": "1.28.2",
               "Rootless": False, "CgroupVersion": "1"}

KINDS = [
    pytest.param(DOCKER_INFO, DOCKER_VERSION, EngineKind("Docker", "20.10.24+dfsg1", "1.41", False, "linux/amd64"),
                 "Docker 20.10.24+dfsg1 (API 1.41, rootful)", id="docker"),
    pytest.param(PODMAN_INFO, PODMAN_VERSION, EngineKind("Podman", "4.3.1", "1.41", False, "linux/amd64"),
                 "Podman 4.3.1 (API 1.41, rootful)", id="podman"),
    pytest.param(PODMAN_INFO | {"Rootless": True}, PODMAN_VERSION, EngineKind("Podman", "4.3.1", "1.41", True, "linux/amd64"),
                 "Podman 4.3.1 (API 1.41, rootless)", id="podman-rootless"),
    pytest.param(DOCKER_INFO | {"SecurityOptions": ["name=seccomp,profile=default", "name=rootless"]}, DOCKER_VERSION,
                 EngineKind("Docker", "20.10.24+dfsg1", "1.41", True, "linux/amd64"), "Docker 20.10.24+dfsg1 (API 1.41, rootless)",
                 id="docker-rootless"),
    pytest.param(PODMAN_INFO, None, EngineKind("Podman", "4.3.1", "?", False, ""), "Podman 4.3.1 (API ?, rootful)",
                 id="podman-by-its-info-alone"),
    pytest.param({"ServerVersion": "27.5.1"}, {"Platform": {"Name": "Docker Engine - Community"}, "Version": "27.5.1", "ApiVersion": "1.47"},
                 EngineKind("Docker", "27.5.1", "1.47", None, ""), "Docker 27.5.1 (API 1.47)", id="docker-ce-says-nothing-of-rootless"),
    pytest.param({"BuildahVersion": "1.39"}, {"Platform": {"Name": "Podman Engine"}, "Version": "5.4.0", "ApiVersion": "1.41"},
                 EngineKind("Podman", "5.4.0", "1.41", None, ""), "Podman 5.4.0 (API 1.41)", id="podman-by-platform-name"),
    pytest.param(None, None, EngineKind("Docker", "?", "?", None, ""), "Docker ? (API ?)", id="nothing-said"),
    pytest.param({"Rootless": "yes"}, {"Components": "garbage"}, EngineKind("Podman", "?", "?", None, ""), "Podman ? (API ?)",
                 id="wrong-types-are-not-believed"),
]


@pytest.mark.parametrize("info, version, kind, words", KINDS)
def test_what_an_engine_says_of_itself(info: Any, version: Any, kind: EngineKind, words: str) -> None:
    assert EngineKind.of(info, version) == kind
    assert kind.describe() == words
    assert kind.record() == {"name": kind.name, "version": kind.version, "api": kind.api, "rootless": kind.rootless}


FIXES = [
    (EngineKind("Docker"), "docker login h.example", "sudo apt-get install -y nvidia-container-toolkit && sudo nvidia-ctk runtime "
     "configure --runtime=docker && sudo systemctl restart docker",
     "docker image prune -a && docker builder prune   (or move data-root in /etc/docker/daemon.json to a larger disk)"),
    (EngineKind("Podman"), "podman login h.example", "sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml   (Podman takes GPUs "
     "by CDI; nvidia-ctk comes with nvidia-container-toolkit)",
     "podman image prune -a && podman builder prune   (or move graphroot in /etc/containers/storage.conf to a larger disk)"),
]


@pytest.mark.parametrize("kind, login, gpu, prune", FIXES)
def test_every_fix_is_the_engines_own(kind: EngineKind, login: str, gpu: str, prune: str) -> None:
    assert (kind.login_fix("h.example"), kind.gpu_fix, kind.prune_fix) == (login, gpu, prune)


START = [
    ("", "Docker", "sudo systemctl start docker   (not installed: sudo apt-get install -y docker.io)"),
    ("tcp://10.0.0.5:2376", "Docker", "check that the engine at DOCKER_HOST=tcp://10.0.0.5:2376 is up, or: unset DOCKER_HOST"),
    ("unix:///run/podman/podman.sock", "Podman", "start Podman's Docker API there: podman system service --time=0 "
     "unix:///run/podman/podman.sock &   (systemd: sudo systemctl start podman.socket; rootless: systemctl --user start podman.socket)"),
    ("unix:///run/user/1000/podman/podman.sock", "Podman", "start Podman's Docker API there: podman system service --time=0 "
     "unix:///run/user/1000/podman/podman.sock &   (systemd: sudo systemctl start podman.socket; rootless: systemctl --user start "
     "podman.socket)"),
]


@pytest.mark.parametrize("docker_host, name, fix", START)
def test_the_engine_docker_host_names_and_how_to_start_it(docker_host: str, name: str, fix: str) -> None:
    assert engines.guessed(docker_host).name == name
    assert engines.start_fix(docker_host) == fix


RUNC = ("runc: runc create failed: unable to start container process: error during container init: error setting rlimits for "
        "ready process: error setting rlimit type {n}: operation not permitted: OCI permission denied")
RLIMITS = [
    (RUNC.format(n=7), EngineKind("Podman"), "Podman's default ulimits exceed this host's hard limits (runc could not set nofile: "
     f"error setting rlimit type 7: operation not permitted); {engines.FIX_PODMAN_ULIMITS}"),
    (RUNC.format(n=6), EngineKind("Podman"), "Podman's default ulimits exceed this host's hard limits (runc could not set nproc: "
     f"error setting rlimit type 6: operation not permitted); {engines.FIX_PODMAN_ULIMITS}"),
    (RUNC.format(n=8), EngineKind("Docker"), "Docker's default ulimits exceed this host's hard limits (runc could not set rlimit 8: "
     f"error setting rlimit type 8: operation not permitted); {engines.FIX_DOCKER_ULIMITS}"),
    ("error setting rlimit type 7: invalid argument", EngineKind("Podman"), ""),
    ("OCI permission denied", EngineKind("Podman"), ""),
]


@pytest.mark.parametrize("words, kind, hint", RLIMITS)
def test_runcs_rlimit_refusal_in_plain_words_with_the_engines_fix(words: str, kind: EngineKind, hint: str) -> None:
    assert engines.rlimit_hint(words, kind) == hint


def test_the_podman_ulimits_fix_names_the_drop_in_ensure_host_writes() -> None:
    script = (ROOT / "scripts" / "ensure-host.sh").read_text()
    assert f"\nULIMITS={engines.ULIMITS_FILE}\n" in script and "default_ulimits = [" in script
    assert f"PODMAN_SOCKET=${{PODMAN_SOCKET:-{engines.PODMAN_SOCKET}}}" in script
    assert engines.ULIMITS_FILE in engines.FIX_PODMAN_ULIMITS
