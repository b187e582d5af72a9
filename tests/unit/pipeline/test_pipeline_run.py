"""pipeline.py runs the stage sequence (the CLI only parses and prints): build -> verify -> release,
verify of saved builds, publish from the build artifacts alone. The engine and registry are the doubles
of test_build_scheduler.py, test_pipeline_stages.py and test_publish.py, passed through the seams; each
test checks which stage ran and what it wrote."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import pytest

from imagesmith import pipeline
from imagesmith.edges.engine import RunResult, RunSpec
from imagesmith.errors import ContainerRefused, UserError
from imagesmith.model.buildreport import BuildRecord, BuildReport, Release, TargetResult
from imagesmith.stages import artifacts
from tests.doubles import EngineBase
from tests.unit.pipeline.test_pipeline_stages import OPTIONS, EngineDouble, Recorder
from tests.unit.stages.building.test_build_scheduler import BASE, engine_for, load, true_facts
from tests.unit.stages.release.test_publish import FakeEngine, FakeRegistry, image_labels
from tests.unit.trustkeys import verifier

M, PLAN = load()
SPEC = Release.of(M, PLAN.date)
TARGET = next(t for t in PLAN.targets if t.id == BASE)  # a CPU image: verified in CPU mode, it may float
IMAGE = "sha256:" + "1" * 64


@dataclass
class StageEngine(EngineBase):
    """The verify double (runs the payload) and the publish double (tag, push into the registry double) as one engine."""

    verifier: EngineDouble
    pusher: FakeEngine

    def info(self) -> dict[str, Any]:
        return self.verifier.info()

    def image(self, ref: str) -> Any:
        return self.pusher.image(ref) or self.verifier.image(ref)

    def run(self, spec: RunSpec) -> RunResult:
        return self.verifier.run(spec)

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        self.pusher.tag(image_id, repository, tag)

    def untag(self, ref: str) -> None:
        self.pusher.untag(ref)

    def push(self, repository: str, tag: str, auth: Mapping[str, str] | None, on_line: Callable[[str], None]) -> str:
        return self.pusher.push(repository, tag, auth, on_line)


def stage_engine(out: Path) -> tuple[StageEngine, FakeRegistry]:
    reg = FakeRegistry(host="127.0.0.1:5000")
    pusher = FakeEngine(reg, labels={IMAGE: image_labels("2.13.0", "base", cuda="cpu")})
    return StageEngine(EngineDouble(out), pusher), reg


def built(status: str = "built") -> BuildReport:
    result = TargetResult(TARGET.id, status, TARGET.image, IMAGE if status == "built" else None,
                                facts=true_facts(TARGET) | {"torch": "2.13.0+cpu"})
    return BuildReport(M.file.name, "t", 1.0, {}, (result,))


def release_options(reg: FakeRegistry, keys: Path) -> pipeline.ReleaseOptions:
    """No evidence; a verifier key and the trust policy that names it (made in ``keys``)."""
    key, policy = verifier(keys)
    return pipeline.ReleaseOptions(with_evidence=False, registry=reg, trust=policy, verifier_key=key)


# -- build -------------------------------------------------------------------------------------------


def gone_record() -> BuildRecord:
    """The artifact of a target an earlier plan had."""
    gone = dataclasses.replace(TARGET, id="2.12.0-cpu-py3.11-debian12-base")
    return BuildRecord(gone, SPEC, "built", IMAGE)


def test_the_build_stage_builds_the_plan_saves_each_record_and_drops_what_is_no_longer_planned(tmp_path: Path) -> None:
    artifacts.write_build(tmp_path / "old" / artifacts.BUILD_FILE, gone_record())
    display = Recorder()
    job = pipeline.BuildJob(M, PLAN, tmp_path, prune=False)
    p, report = pipeline.build_stage(engine_for(PLAN), job, display)
    assert p == PLAN and report.ok and [r.target for r in report.results] == [t.id for t in PLAN.targets]
    assert set(artifacts.find_builds(tmp_path)) == {t.id for t in PLAN.targets}  # the old target's artifact is gone
    assert ("", "note", f"2.12.0-cpu-py3.11-debian12-base: no longer planned; its build artifact in {tmp_path} was removed "
                        "(publish will not release it)") in display.lines


def test_a_build_of_some_targets_keeps_the_other_artifacts(tmp_path: Path) -> None:
    artifacts.write_build(tmp_path / "old" / artifacts.BUILD_FILE, gone_record())
    p, report = pipeline.build_stage(engine_for(PLAN), pipeline.BuildJob(M, PLAN, tmp_path, only=(BASE,), prune=False), Recorder())
    assert [t.id for t in p.targets] == [BASE] and [r.status for r in report.results] == ["built"]
    assert set(artifacts.find_builds(tmp_path)) == {BASE, "2.12.0-cpu-py3.11-debian12-base"}


def test_a_build_that_stops_marks_the_run_report_interrupted(tmp_path: Path) -> None:
    engine = engine_for(PLAN)
    engine.images.clear()  # no base image, and the double's pull is refused
    run = pipeline.RunReport(tmp_path)
    with pytest.raises(UserError, match="pull access denied"):
        pipeline.build_stage(engine, pipeline.BuildJob(M, PLAN, tmp_path, prune=False), Recorder(), run)
    assert json.loads((tmp_path / pipeline.RUN_REPORT).read_text())["state"] == "interrupted"


# -- verify, then release ------------------------------------------------------------------------------


def test_verify_only_verifies_writes_the_run_report_and_releases_nothing(tmp_path: Path) -> None:
    engine, reg = stage_engine(tmp_path)
    plan = PLAN.select((BASE,), ())
    done = pipeline.verify_and_release(engine, built(), plan, SPEC, tmp_path, Recorder(), pipeline.RunReport(tmp_path), OPTIONS,
                                       release_options(reg, tmp_path / "keys"), push=False)
    assert done.release is None and done.failed == [] and done.unbuilt == 0 and list(done.outcomes) == [BASE]
    assert engine.verifier.seen == ["running"] and reg.writes == [] and not (tmp_path / "release.json").exists()
    assert json.loads((tmp_path / BASE / "verify.json").read_text())["state"] == "complete"
    doc = json.loads(done.run_report.read_text())
    assert (doc["state"], doc["build"]["state"], list(doc["verify"]), doc["release"]) == ("complete", "complete", [BASE], None)


def test_push_releases_what_passed_from_the_records_of_the_build(tmp_path: Path) -> None:
    engine, reg = stage_engine(tmp_path)
    done = pipeline.verify_and_release(engine, built(), PLAN.select((BASE,), ()), SPEC, tmp_path, Recorder(),
                                       pipeline.RunReport(tmp_path), OPTIONS, release_options(reg, tmp_path / "keys"), push=True)
    assert done.release is not None
    assert done.release.ok, done.release.errors
    tag = f"2.13.0-cpu-py3.11-debian12-base-{PLAN.date}"
    assert engine.pusher.pushes == [tag] and reg.repo_tags[tag].config_digest == IMAGE
    written = json.loads((tmp_path / "release.json").read_text())
    assert [(t["target"], t["status"]) for t in written["targets"]] == [(BASE, "pushed")]
    assert json.loads(done.run_report.read_text())["release"]["targets"][0]["status"] == "pushed"


def test_a_target_that_did_not_build_is_neither_verified_nor_released(tmp_path: Path) -> None:
    engine, reg = stage_engine(tmp_path)
    done = pipeline.verify_and_release(engine, built("failed"), PLAN.select((BASE,), ()), SPEC, tmp_path, Recorder(),
                                       pipeline.RunReport(tmp_path), OPTIONS, release_options(reg, tmp_path / "keys"), push=True)
    assert done.unbuilt == 1 and done.outcomes == {} and engine.verifier.seen == [] and engine.pusher.pushes == []
    assert done.release is not None and [t.status for t in done.release.targets] == ["not-built"]


# -- verify the saved builds; publish from the artifacts -------------------------------------------------


def saved(out: Path) -> Path:
    path = out / BASE / artifacts.BUILD_FILE
    artifacts.write_build(path, artifacts.record_of(built().results[0], TARGET, SPEC))
    return path


def test_verify_builds_writes_verify_json_beside_each_artifact_and_one_run_report(tmp_path: Path) -> None:
    path, copy = saved(tmp_path), tmp_path / "elsewhere" / "run.json"
    done = pipeline.verify_builds(pipeline.read_builds([path]), pipeline.out_of(path), OPTIONS, Recorder(), json_out=copy,
                                  engine=EngineDouble(tmp_path))
    assert pipeline.out_of(path) == tmp_path and done.failed == [] and list(done.outcomes) == [BASE]
    assert json.loads((path.parent / "verify.json").read_text())["summary"]["ok"] is True
    assert copy.read_text() == done.run_report.read_text() and json.loads(copy.read_text())["state"] == "complete"


def test_an_image_the_engine_cannot_run_fails_its_verification(tmp_path: Path) -> None:
    path = saved(tmp_path)
    done = pipeline.verify_builds(pipeline.read_builds([path]), tmp_path, OPTIONS, Recorder(),
                                  engine=EngineDouble(tmp_path, ContainerRefused("creating a container of sha256:a: 500 Server Error")))
    assert done.failed == [BASE] and done.release is None


def test_publish_releases_from_the_artifacts_alone(tmp_path: Path) -> None:
    path = saved(tmp_path)
    engine, reg = stage_engine(tmp_path)
    options = release_options(reg, tmp_path / "keys")
    pipeline.verify_builds(pipeline.read_builds([path]), tmp_path, OPTIONS, Recorder(), engine=engine, signer=options.verifier_key)
    assert (path.parent / "verify.dsse.json").is_file()
    rel = pipeline.publish_artifacts(tmp_path, Recorder(), options, matrix=M, engine=engine)
    assert rel.ok and [(t.target, t.status) for t in rel.targets] == [(BASE, "pushed")]
    assert engine.pusher.pushes == [f"2.13.0-cpu-py3.11-debian12-base-{PLAN.date}"]
    assert json.loads((tmp_path / pipeline.RUN_REPORT).read_text())["release"]["ok"] is True


def test_publish_without_a_passed_verification_pushes_nothing(tmp_path: Path) -> None:
    saved(tmp_path)
    engine, reg = stage_engine(tmp_path)
    rel = pipeline.publish_artifacts(tmp_path, Recorder(), release_options(reg, tmp_path / "keys"), engine=engine)
    assert not rel.ok and [t.status for t in rel.targets] == ["not-verified"] and reg.writes == []


def test_a_matrix_given_to_publish_must_agree_with_the_artifacts(tmp_path: Path) -> None:
    saved(tmp_path)
    other = dataclasses.replace(M, image=dataclasses.replace(M.image, repository="ml/other"))
    with pytest.raises(UserError) as err:
        pipeline.publish_artifacts(tmp_path, Recorder(), pipeline.ReleaseOptions(), matrix=other, engine=EngineBase())
    assert str(err.value) == (f"the build artifacts in {tmp_path} release 127.0.0.1:5000/imagesmith/local (local.yaml), not what "
                              "local.yaml says (127.0.0.1:5000/ml/other); publish without --matrix, or build again from local.yaml")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "imagesmith.cli", *args], capture_output=True, text=True)


def test_publish_of_a_folder_without_build_artifacts_says_to_build_first(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text("{}")  # an old build's report: publish reads only the artifacts
    verifier(tmp_path / "keys")
    done = cli("publish", "--out", str(tmp_path), "--trust-policy", str(tmp_path / "keys" / "trust-policy.yaml"), "--no-evidence", "-q")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == ("error: no build artifacts (*/build.json) found; run imagesmith build --out DIR first, "
                           "or gather the build jobs' artifacts into DIR\n")


@pytest.mark.parametrize("command", [["publish", "--no-evidence"], ["build", "--push", "-m", "examples/local.yaml"]])
def test_a_release_without_a_trust_policy_is_bad_usage(tmp_path: Path, command: list[str]) -> None:
    done = cli(*command, "--out", str(tmp_path), "-q")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"error: {command[0]} {'--push' if command[0] == 'build' else ''}".rstrip() + ": a release believes "
                           "only verifications signed by a verifier its trust policy names: give --trust-policy FILE (and, "
                           "where this command verifies, --verifier-key KEY); make release creates both (docs/trust.md)\n")


def test_verify_of_a_build_report_that_is_not_one_exits_1(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"schema": "imagesmith.build-report/0"}))
    done = cli("verify", "--build-report", str(report), "-q")
    assert done.returncode == 1 and "schema: 'imagesmith.build-report/0' is not one of imagesmith.build/1, imagesmith.build-report/1" in done.stderr, done.stderr

