"""verify_image takes the GPU path the plan chooses (imagesmith/stages/verify/gpus.py): the RunSpec the engine gets, the
fallback when the engine refuses GPUs, and the report's gpu_path block and note. An engine double answers docker
info and runs; the CDI specs lie in tmp_path (GpuHost), never this machine's /etc/cdi."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import pytest

from imagesmith.edges.engine import RunResult, RunSpec
from imagesmith.errors import GpuRequestDropped, GpuRuntimeMissing, UserError
from imagesmith.model import compat, engines, gpupath, schemas
from imagesmith.model.cdi import BindMount, DeviceMapping, Symlink
from imagesmith.model.engines import EngineKind
from imagesmith.model.loader import LoadError, check_schema
from imagesmith.stages.verify import incontainer, verify
from imagesmith.stages.verify.gpus import GpuHost
from tests.doubles import verify_report
from tests.unit.stages.verify.test_verify_container import OPTIONS, EngineDouble, answer
from tests.unit.stages.verify.test_verify_entrypoint import TINI_BYPASSED as BYPASSED

GPU_OPTIONS = replace(OPTIONS, gpus="all")
NVIDIA_INFO = {"Runtimes": {"runc": {}, "nvidia": {"path": "nvidia-container-runtime"}}}
SAID = 'creating a container of sha256:abc: could not select device driver "" with capabilities: [[gpu]]'
REFUSED = GpuRuntimeMissing(f"{SAID} ({incontainer.GPU_RUNTIME_FIX})")  # as engine_error words it
SPEC = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
        "devices": [{"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}],
        "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"],
                           "mounts": [{"hostPath": "/host/libcuda.so.580.159.04", "containerPath": "/usr/lib/libcuda.so.580.159.04",
                                       "options": ["ro", "nosuid", "bind"]}],
                           "hooks": [{"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook",
                                      "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib"]}]}}


@dataclass
class InfoEngine(EngineDouble):
    facts: dict[str, Any] = field(default_factory=dict)

    def info(self) -> dict[str, Any]:
        return self.facts

    def kind(self) -> EngineKind:
        return EngineKind.of(self.facts)


def ok(spec: RunSpec) -> RunResult:
    return RunResult(0, answer(spec), "")


def refuse_gpus(spec: RunSpec) -> RunResult:
    if spec.gpus != "none":
        raise REFUSED
    return ok(spec)


def specs_in(folder: Path, doc: dict[str, Any] = SPEC) -> GpuHost:
    folder.mkdir(exist_ok=True)
    (folder / "nvidia.json").write_text(json.dumps(doc))
    return GpuHost(cdi_dirs=(str(folder),), environ={}, soname=lambda path: "libcuda.so.1" if "libcuda" in path else None)


def run(outcome: Callable[[RunSpec], RunResult], host: GpuHost, info: dict[str, Any] | None = None,
        options: verify.VerifyOptions = GPU_OPTIONS) -> tuple[dict[str, Any], list[RunSpec]]:
    engine = InfoEngine(outcome, facts=info or {})
    report = incontainer.verify_image(engine, "img:1", options, compat.load(), gpu_host=host).report.to_json()
    check_schema(report, schemas.VERIFY_REPORT, "verify.json")  # the report keeps its schema, gpu_path included
    return report, engine.specs


def test_an_engine_without_gpu_runtime_gets_the_specs_edits(tmp_path: Path) -> None:
    report, (spec,) = run(ok, specs_in(tmp_path / "cdi"))
    assert (spec.gpus, spec.cdi_devices) == ("none", ())
    assert spec.devices == (DeviceMapping("/dev/nvidia0", "/dev/nvidia0"),)
    assert spec.mounts == (BindMount("/host/libcuda.so.580.159.04", "/usr/lib/libcuda.so.580.159.04"),)
    assert spec.links == (Symlink("/usr/lib/libcuda.so.1", "libcuda.so.580.159.04"),)
    assert spec.environment == {"NVIDIA_VISIBLE_DEVICES": "void", "LD_LIBRARY_PATH": "/usr/lib"} | verify.PAYLOAD_ENV
    file = str(tmp_path / "cdi" / "nvidia.json")
    assert report["gpu_path"] == {
        "path": "cdi-translated", "devices": ["nvidia.com/gpu=all"], "specs": [file],
        "why": f"the engine lists no nvidia runtime; {file} defines nvidia.com/gpu=all; the engine has no CDI: imagesmith "
               "applies the specs' edits itself",
        "notes": ["hook update-ldcache emulated: /usr/lib first on LD_LIBRARY_PATH, 1 link by SONAME (libcuda.so.1 -> "
                  "libcuda.so.580.159.04)",
                  "mount options nosuid not applied: the Docker API's bind mounts take read-only or read-write only"]}
    assert report["notes"] == [f"GPUs by CDI, translated by imagesmith from {file} (nvidia.com/gpu=all): the engine has no "
                               "CDI; gpu_path.notes says what was emulated and what was not applied", BYPASSED]
    assert verify.VerifyOutcome(verify_report(report)).ok


def test_an_engine_with_the_nvidia_runtime_gets_gpus_and_no_spec_is_read(tmp_path: Path) -> None:
    folder = tmp_path / "cdi"
    folder.mkdir()
    os.mkfifo(folder / "nvidia.yaml")  # read, it would be refused: it is not read at all
    report, (spec,) = run(ok, GpuHost(cdi_dirs=(str(folder),), environ={}), NVIDIA_INFO)
    assert (spec.gpus, spec.devices, spec.mounts, spec.links) == ("all", (), (), ())
    assert report["gpu_path"] == {"path": "nvidia", "why": "the engine lists an nvidia runtime: its --gpus", "devices": [],
                                  "specs": [], "notes": []}
    assert not any("CDI" in note for note in report["notes"])


def test_no_runtime_and_no_spec_tries_gpus_then_runs_without_them_saying_why(tmp_path: Path) -> None:
    report, specs = run(refuse_gpus, GpuHost(cdi_dirs=(str(tmp_path / "absent"),), environ={}))
    assert [(s.gpus, s.cdi_devices) for s in specs] == [("all", ()), ("none", ())]
    assert json.loads(specs[1].files["config.json"])["gpu_unavailable"] == incontainer.GPU_RUNTIME_FIX
    assert report["gpu_path"]["path"] == "none"
    assert report["gpu_path"]["why"] == f"the engine refused --gpus ({SAID}): ran without GPUs"
    assert report["notes"][0] == f"ran without GPUs: {incontainer.GPU_RUNTIME_FIX}"


def test_a_remote_engine_with_cdi_gets_the_names_when_it_refuses_gpus() -> None:
    host = GpuHost(cdi_dirs=("/nonexistent",), environ={"DOCKER_HOST": "tcp://gpu1:2376"})
    report, specs = run(refuse_gpus, host, {"CDISpecDirs": ["/etc/cdi"]})
    assert [(s.gpus, s.cdi_devices) for s in specs] == [("all", ()), ("none", ("nvidia.com/gpu=all",))]
    assert report["gpu_path"]["path"] == "cdi-engine" and report["gpu_path"]["devices"] == ["nvidia.com/gpu=all"]
    assert report["notes"] == ["GPUs by CDI, resolved by the engine (nvidia.com/gpu=all)",
                               f"the engine refused --gpus ({SAID}): ran by cdi-engine instead", BYPASSED]


def test_engine_cdi_refused_runs_without_gpus_with_the_cdi_fix(tmp_path: Path) -> None:
    def refuse_cdi(spec: RunSpec) -> RunResult:
        if spec.cdi_devices:
            raise GpuRuntimeMissing('creating a container of sha256:abc: could not select device driver "cdi" with capabilities: []')
        return ok(spec)

    report, specs = run(refuse_cdi, specs_in(tmp_path / "cdi"), {"CDISpecDirs": [str(tmp_path / "cdi")]})
    assert [s.cdi_devices for s in specs] == [("nvidia.com/gpu=all",), ()]
    assert json.loads(specs[1].files["config.json"])["gpu_unavailable"] == gpupath.FIX_CDI_ON
    assert report["gpu_path"]["path"] == "none" and report["gpu_path"]["why"].startswith("the engine refused the CDI devices (")


def test_cdi_asked_where_there_is_none_stops_before_any_container(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"^--gpu-runtime cdi: no CDI spec in .*absent; write NVIDIA's: sudo nvidia-ctk cdi generate"):
        run(ok, GpuHost(cdi_dirs=(str(tmp_path / "absent"),), environ={}), options=replace(GPU_OPTIONS, gpu_runtime="cdi"))


def test_a_hostile_spec_stops_verify_before_any_container(tmp_path: Path) -> None:
    host = specs_in(tmp_path / "cdi", SPEC | {"kind": "nvidia.com"})
    engine = InfoEngine(ok)
    with pytest.raises(LoadError) as err:
        incontainer.verify_image(engine, "img:1", GPU_OPTIONS, compat.load(), gpu_host=host)
    assert err.value.exit_code == 1 and str(err.value).startswith(
        f"{tmp_path / 'cdi' / 'nvidia.json'}: kind: 'nvidia.com' is not of the form vendor/class")
    assert engine.specs == []


# -- Podman: CDI names only; a --gpus it drops is said, with Podman's fix ------------------------------------

PODMAN_INFO = {"ServerVersion": "4.3.1", "BuildahVersion": "1.28.2", "Rootless": False}
DROPPED = GpuRequestDropped("creating a container of sha256:abc: Podman 4.3.1 (API 1.41, rootful) created it without the GPUs asked "
                            "for (--gpus all: HostConfig.DeviceRequests came back empty): Podman's Docker API drops GPU device "
                            "requests; it takes GPUs by CDI names (verify --gpu-runtime auto or cdi)", fix=engines.FIX_PODMAN_GPU)


def test_podman_gets_the_cdi_names_of_its_hosts_specs(tmp_path: Path) -> None:
    host = specs_in(tmp_path / "cdi")
    report, (spec,) = run(ok, host, PODMAN_INFO | {"CDISpecDirs": [str(tmp_path / "cdi")]})
    assert (spec.gpus, spec.cdi_devices, spec.devices, spec.mounts) == ("none", ("nvidia.com/gpu=all",), (), ())
    assert report["gpu_path"]["path"] == "cdi-engine" and report["gpu_path"]["why"].startswith("Podman takes GPUs by CDI; ")
    assert report["engine"] == {"name": "Podman", "version": "4.3.1", "api": "?", "rootless": False}


def test_a_gpu_request_podman_dropped_runs_without_gpus_and_says_why_with_podmans_fix(tmp_path: Path) -> None:
    def drop(spec: RunSpec) -> RunResult:
        if spec.gpus != "none":
            raise DROPPED
        return ok(spec)

    report, specs = run(drop, GpuHost(cdi_dirs=(str(tmp_path / "absent"),), environ={}), PODMAN_INFO,
                        replace(GPU_OPTIONS, gpu_runtime="nvidia"))
    assert [(s.gpus, s.cdi_devices) for s in specs] == [("all", ()), ("none", ())]
    assert json.loads(specs[1].files["config.json"])["gpu_unavailable"] == engines.FIX_PODMAN_GPU
    assert report["gpu_path"]["why"] == f"the engine did not honour --gpus ({str(DROPPED).replace(f' ({engines.FIX_PODMAN_GPU})', '')}): ran without GPUs"
    assert report["notes"][0] == f"ran without GPUs: {engines.FIX_PODMAN_GPU}"


def test_names_no_spec_of_podmans_host_offers_are_refused_by_it_and_said(tmp_path: Path) -> None:
    said = "starting a container of sha256:abc: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all"

    def unresolvable(spec: RunSpec) -> RunResult:
        if spec.cdi_devices:
            raise GpuRuntimeMissing(f"{said} ({engines.FIX_PODMAN_GPU})", fix=engines.FIX_PODMAN_GPU)
        return ok(spec)

    report, specs = run(unresolvable, GpuHost(environ={}), PODMAN_INFO | {"CDISpecDirs": [str(tmp_path / "absent")]})
    assert [s.cdi_devices for s in specs] == [("nvidia.com/gpu=all",), ()]
    assert report["gpu_path"] == {"path": "none", "why": f"the engine refused the CDI devices ({said}): ran without GPUs",
                                  "devices": [], "specs": [], "notes": []}
    assert report["notes"][0] == f"ran without GPUs: {engines.FIX_PODMAN_GPU}"
