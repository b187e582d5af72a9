"""pipeline.py: verifying what a build made (by image ID, each report ``running`` then
``complete``), the stage artifacts read back, and the run report, with an engine
double passed where verify_results takes its engine."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from imagesmith import pipeline
from imagesmith.edges.engine import ImageInfo, RunResult, RunSpec
from imagesmith.errors import ContainerRefused, EngineConnectionLost, RegistryError, UsageError, UserError
from imagesmith.model import policy
from imagesmith.model.buildreport import BuildReport, CudaLayer, TargetResult, parse_report
from imagesmith.model.loader import LoadError
from imagesmith.resources import payload_module
from imagesmith.stages.verify import verify
from tests.doubles import EngineBase, verify_report

OPTIONS = verify.VerifyOptions(tier="quick", gpus="none", sample_gpus=False, only=("versions",))


@dataclass
class Recorder:
    """A Display that keeps what it was told."""

    lines: list[tuple[str, str, str]] = field(default_factory=list)

    def update(self, item: str, state: str, detail: str = "") -> None:
        self.lines.append((item, state, detail))

    def note(self, message: str) -> None:
        self.lines.append(("", "note", message))

    def close(self) -> None:
        return None


MEASURED = {"torch": "2.13.0+cpu", "cuda": None, "cudnn": None, "python": "3.11.2", "os": "debian12"}


@dataclass
class EngineDouble(EngineBase):
    """Images by ID; a run answers as a genuine payload (or the engine fails with ``error``)."""

    out: Path
    error: Exception | None = None
    seen: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=lambda: dict(MEASURED))  # what the payload measured

    def info(self) -> dict[str, Any]:
        return {}  # docker info names no platform: verify compares none

    def image(self, ref: str) -> ImageInfo | None:
        return ImageInfo(ref, (), {"io.imagesmith.cuda": "cpu"}, 1, "t") if ref.startswith("sha256:") else None

    def run(self, spec: RunSpec) -> RunResult:
        if self.error:
            raise self.error
        if any("facts.py" in part for part in spec.command):  # the inventory, measured for the verifier's statement
            return RunResult(0, json.dumps({"python": "3.11.2", "python_packages": [{"name": "torch", "version": "2.13.0"}]}) + "\n", "")
        target = next(p.parent.name for p in self.out.glob("*/verify.json"))  # written `running` before the run
        self.seen.append(json.loads((self.out / target / "verify.json").read_text())["state"])
        config = json.loads(spec.files["config.json"])
        checks = [{"id": c, "title": c, "status": "pass", "value": None, "threshold": None, "unit": "", "baseline": None,
                   "percent_of_baseline": None, "detail": "", "optional": False, "duration_s": 0.0} for c in config["checks"]]
        report = payload_module("report").build_report("quick", "t", 0.1, self.environment, checks, config["nonce"])
        return RunResult(0, verify.MARKER + json.dumps(report) + "\n", "")


RESULTS = (TargetResult("a", "built", image_id="sha256:a"), TargetResult("b", "failed"),
           TargetResult("c", "cached", image_id=None))


def test_verify_results_verifies_what_built_and_writes_each_report(tmp_path: Path) -> None:
    engine, display = EngineDouble(tmp_path), Recorder()
    with pipeline.RunReport(tmp_path) as run:
        outcomes = pipeline.verify_results(engine, RESULTS, OPTIONS, tmp_path, display, run)
        run.complete()
    assert list(outcomes) == ["a"] and outcomes["a"].ok and engine.seen == ["running"]
    written = json.loads((tmp_path / "a" / "verify.json").read_text())
    assert (written["state"], written["summary"]["ok"]) == ("complete", True)
    assert display.lines[0] == ("a", "verifying", "")
    passed = len(written["checks"])
    assert passed > 1 and display.lines[-1] == ("a", "passed", f"{passed} pass, 0 fail, 0 skip; {policy.how_verified(verify_report(written))}")
    doc = json.loads((tmp_path / pipeline.RUN_REPORT).read_text())
    assert doc["state"] == "complete" and list(doc["verify"]) == ["a"]


@pytest.mark.parametrize("error, detail", [
    (RegistryError("registry 127.0.0.1:5000 refused the pull"), "registry 127.0.0.1:5000 refused the pull"),
    (ContainerRefused("creating a container of sha256:a: no space left on device"),
     "the container did not start: creating a container of sha256:a: no space left on device"),
    (EngineConnectionLost("creating a container of sha256:a: the Docker engine stopped answering (Connection refused)"),
     "creating a container of sha256:a: the Docker engine stopped answering (Connection refused)"),
])
def test_an_image_that_cannot_be_verified_is_a_failed_report_not_a_stop(tmp_path: Path, error: Exception, detail: str) -> None:
    outcomes = pipeline.verify_results(EngineDouble(tmp_path, error), RESULTS[:1], OPTIONS, tmp_path, Recorder())
    report = outcomes["a"].report.to_json()
    assert not outcomes["a"].ok and report["state"] == "complete"
    assert [(c["id"], c["detail"]) for c in report["checks"]] == [("payload.start", detail)]


def test_a_usage_error_stops_the_run(tmp_path: Path) -> None:
    options = verify.VerifyOptions(tier="quick", sample_gpus=False, only=("no.such.check",))
    with pytest.raises(UsageError):
        pipeline.verify_results(EngineDouble(tmp_path), RESULTS[:1], options, tmp_path, Recorder())
    assert json.loads((tmp_path / "a" / "verify.json").read_text())["state"] == "interrupted"


@dataclass
class SideBySide(EngineDouble):
    """Several images (sha256:<target>); counts the payload runs going on at once. Those of ``meet`` wait for each
    other (a barrier: met only if they run side by side)."""

    meet: tuple[str, ...] = ()
    now: int = 0
    most: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    barrier: threading.Barrier | None = None

    def run(self, spec: RunSpec) -> RunResult:
        if any("facts.py" in part for part in spec.command):
            return super().run(spec)
        target = spec.image.split(":", 1)[1]
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            if target in self.meet:
                assert self.barrier is not None
                self.barrier.wait(timeout=60)  # broken (an error) unless the other one runs meanwhile
            config = json.loads(spec.files["config.json"])
            checks = [{"id": c, "title": c, "status": "pass", "value": None, "threshold": None, "unit": "", "baseline": None,
                       "percent_of_baseline": None, "detail": "", "optional": False, "duration_s": 0.0} for c in config["checks"]]
            report = payload_module("report").build_report("quick", "t", 0.1, self.environment, checks, config["nonce"])
            return RunResult(0, verify.MARKER + json.dumps(report) + "\n", "")
        finally:
            with self.lock:
                self.now -= 1


@pytest.mark.parametrize("gpus, side_by_side", [("none", True), ("all", False)])
def test_once_the_engine_gives_no_gpu_the_rest_are_verified_side_by_side(tmp_path: Path, gpus: str, side_by_side: bool) -> None:
    """--jobs 2: the first image alone; its report says how GPUs reached it. None (--gpus none, or refused): the rest
    two at a time, reported in order. A GPU given (here --gpus, which the double's engine takes): one at a time, as
    two verifications on one GPU would each see the other as a neighbour."""
    results = tuple(TargetResult(t, "built", image_id=f"sha256:{t}") for t in "abcd")
    engine = SideBySide(tmp_path, meet=("b", "c") if side_by_side else ())
    engine.barrier = threading.Barrier(2)
    options = verify.VerifyOptions(tier="quick", gpus=gpus, sample_gpus=False, only=("versions",), allow_cpu=True)
    with pipeline.RunReport(tmp_path) as run:
        outcomes = pipeline.verify_results(engine, results, options, tmp_path, Recorder(), run, jobs=2)
        run.complete()
    assert list(outcomes) == ["a", "b", "c", "d"] and all(o.ok for o in outcomes.values())
    assert {o.report.gpu_path for o in outcomes.values()} == {"none" if side_by_side else "nvidia"}
    assert engine.most == (2 if side_by_side else 1)
    assert list(json.loads((tmp_path / pipeline.RUN_REPORT).read_text())["verify"]) == ["a", "b", "c", "d"]


def test_build_results_read_back_what_the_build_wrote(tmp_path: Path) -> None:
    layer = CudaLayer("cu130-abc", "debian:12", "r/cuda:x", "built", "sha256:" + "1" * 64, "sha256:" + "2" * 64, 3_000, 3_100, 12.5)
    doc = BuildReport("m.yaml", "t", 1.0, {}, RESULTS, (layer,)).to_json()
    back = parse_report(json.loads(json.dumps(doc)), "report.json")
    assert back.results == RESULTS and back.cuda_layers == (layer,) and back.to_json() == doc
    doc["cuda_layers"][0]["layer_bytes"] = "3 GB"
    with pytest.raises(LoadError) as err:
        parse_report(doc, "report.json")
    assert str(err.value) == "report.json: cuda_layers[0].layer_bytes: expected a number, got '3 GB'"


def genuine(ok: bool = True) -> dict[str, Any]:
    return {"schema": "imagesmith.verify-report/1", "summary": {"ok": ok}, "state": "complete", "checks": []}


def test_a_written_run_report_holds_the_three_stages(tmp_path: Path) -> None:
    build_doc = BuildReport("m.yaml", "t", 1.0, {}, RESULTS[:1]).to_json() | {"state": "complete"}
    path = pipeline.write_run_report(tmp_path, build_doc, {"a": verify.VerifyOutcome(verify_report(genuine()))}, None)
    assert path == tmp_path / pipeline.RUN_REPORT
    doc = json.loads(path.read_text())
    assert doc["state"] == "complete" and doc["verify"]["a"]["summary"]["ok"] is True


def test_publish_takes_no_verdict_from_a_run_report(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"state": "complete", "verify": {"a": genuine()}}))
    with pytest.raises(UserError) as err:
        pipeline.publish_artifacts(tmp_path, Recorder(), pipeline.ReleaseOptions(), run_report=path, engine=EngineBase())
    assert str(err.value) == (f"--run-report {path}: a run report is a file another job wrote, not evidence; publish reads "
                              f"the signed statement (verify.dsse.json) beside each build.json in {tmp_path}")
