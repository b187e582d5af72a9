"""Build artifacts (OUT/<target>/build.json): round trips, every value checked on the way in,
gathering many jobs' artifacts, the output-folder lock, and atomic writes under concurrent writers."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import pytest

from imagesmith import pipeline
from imagesmith.errors import UserError
from imagesmith.model import plan
from imagesmith.model.buildreport import TargetResult
from imagesmith.render import contexts as render
from imagesmith.stages import artifacts
from imagesmith.stages.building import staging
from tests.conftest import ROOT
from tests.doubles import EngineBase
from tests.unit.model.test_buildreport import DIGEST, IMAGE, LOCAL, PLAN, RELEASE, STAGED, record, set_key


def test_a_record_survives_the_round_trip(tmp_path: Path) -> None:
    for i, rec in enumerate([record(0), record(3, staged=None, status="failed", image_id=None, error="boom"), record(6)]):
        path = tmp_path / f"{i}" / "build.json"
        artifacts.write_build(path, rec)
        assert artifacts.read_build(path) == rec
        assert json.loads(path.read_text())["schema"] == "imagesmith.build/1"


def test_a_build_result_becomes_a_record_and_back() -> None:
    result = TargetResult(PLAN.targets[0].id, "built", PLAN.targets[0].image, IMAGE, "sha256:" + "c" * 64, 2.0,
                          facts={"torch": "2.13.0+cpu"}, staged=STAGED)
    rec = artifacts.record_of(result, PLAN.targets[0], RELEASE)
    assert rec.staged == STAGED and rec.ok
    back = artifacts.result_of(rec, Path("out") / PLAN.targets[0].id)
    assert (back.target, back.status, back.image_id, back.staged, back.facts) == \
           (result.target, result.status, result.image_id, result.staged, result.facts)
    assert (back.log, back.dockerfile) == (f"out/{PLAN.targets[0].id}/build.log", f"out/{PLAN.targets[0].id}/Dockerfile")


# refused by the loader (the schema) before the parse reads a value; the parse's own refusals are in
# tests/unit/model/test_buildreport.py (target.id here: read_build hands what the loader let in to the parse)
BAD = [
    (set_key("schema", "imagesmith.build/0"), "schema: 'imagesmith.build/0' is not 'imagesmith.build/1'"),
    (set_key("result.status", "pwned"), "result.status: 'pwned' is not one of 'built', 'cached', 'failed'"),
    (set_key("result.image_id", "sha256:xyz"), "result.image_id: 'sha256:xyz' is not of the form ^sha256:[0-9a-f]{64}$"),
    (set_key("result.facts", ["torch"]), "result.facts: expected object or null, got a list"),
    (set_key("result.size_bytes", "big"), "result.size_bytes: expected number, got 'big'"),
    (set_key("staged.digest", "sha256:" + "D" * 64), "staged.digest:"),
    (set_key("release.date", "tomorrow"), "release.date: 'tomorrow' is not of the form ^[0-9]{8}$"),
    (set_key("release.tags", None), "release.tags: expected object, got null"),
    (set_key("target.id", "../../etc"), "target.id: '../../etc' is not a target id"),
    (set_key("target", "x"), "target: expected object, got 'x'"),
]


@pytest.mark.parametrize("change, message", BAD, ids=[m.split(":")[0] for _, m in BAD])
def test_every_value_is_checked_on_the_way_in(tmp_path: Path, change: Callable[[dict[str, Any]], None], message: str) -> None:
    path = tmp_path / "t" / "build.json"
    doc = record().to_json()
    change(doc)
    path.parent.mkdir()
    path.write_text(json.dumps(doc))
    with pytest.raises(UserError) as err:
        artifacts.read_build(path)
    assert str(err.value).startswith(f"{path}: {message}")
    assert str(err.value).endswith("(build again with imagesmith build)")


def test_not_json_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "build.json").write_text("{half")
    with pytest.raises(UserError, match="not JSON"):
        artifacts.read_build(tmp_path / "build.json")


# -- gathering many jobs' artifacts ----------------------------------------------------------------------


def test_gathered_artifacts_are_found_by_target_in_any_folder(tmp_path: Path) -> None:
    artifacts.write_build(tmp_path / PLAN.targets[0].id / "build.json", record(0))
    artifacts.write_build(tmp_path / f"verified-{PLAN.targets[3].id}" / "build.json", record(3))  # a GitHub artifact folder
    (tmp_path / f"verified-{PLAN.targets[3].id}" / "verify.json").write_text("{}")
    artifacts.write_build(tmp_path / f"build-{PLAN.targets[3].id}" / "build.json", record(3))  # the same target, another job
    found = artifacts.find_builds(tmp_path)
    assert sorted(found) == sorted([PLAN.targets[0].id, PLAN.targets[3].id])
    assert found[PLAN.targets[3].id].folder.name == f"verified-{PLAN.targets[3].id}"  # the one with its verify.json
    assert artifacts.one_release(found) == RELEASE


def test_two_artifacts_of_one_target_naming_different_images_are_refused(tmp_path: Path) -> None:
    artifacts.write_build(tmp_path / "a" / "build.json", record(0))
    artifacts.write_build(tmp_path / "b" / "build.json", record(0, image_id="sha256:" + "2" * 64))
    with pytest.raises(UserError, match=r"both describe 2\.13\.0-cpu-py3\.11-debian12-base but name different images"):
        artifacts.find_builds(tmp_path)


def test_artifacts_of_different_plans_are_refused(tmp_path: Path) -> None:
    artifacts.write_build(tmp_path / "a" / "build.json", record(0))
    artifacts.write_build(tmp_path / "b" / "build.json", record(1, release=replace(RELEASE, date="20261201")))
    with pytest.raises(UserError, match="the build artifacts come from different plans"):
        artifacts.one_release(artifacts.find_builds(tmp_path))
    with pytest.raises(UserError, match=r"no build artifacts \(\*/build.json\) found"):
        artifacts.one_release({})


def test_several_jobs_artifacts_verify_as_one_build(tmp_path: Path) -> None:
    for i in (0, 3):
        artifacts.write_build(tmp_path / PLAN.targets[i].id / "build.json", record(i))
    inputs = [pipeline.read_build_input(tmp_path / PLAN.targets[i].id / "build.json") for i in (0, 3)]
    merged = pipeline.merge_inputs(inputs)
    assert [r.target for r in merged.results] == [PLAN.targets[0].id, PLAN.targets[3].id]
    assert merged.folders[PLAN.targets[3].id] == tmp_path / PLAN.targets[3].id  # verify.json goes beside build.json
    assert all(r.staged and r.staged.digest == DIGEST for r in merged.results)


# -- which targets a job builds -----------------------------------------------------------------------------


def ids(p: plan.Plan) -> list[str]:
    return [t.layer for t in p.targets if t.cell == "2.14.1-cu130-py3.11-debian12"]


@pytest.mark.parametrize("picked, adopted, needed", [
    ({"project"}, set(), ["base", "cv", "project"]),  # nothing staged: the ancestors too
    ({"project"}, {"cv"}, ["cv", "project"]),  # the parent's job staged it: the grandparent is not needed
    ({"project"}, {"base", "cv"}, ["cv", "project"]),
    ({"nlp", "project"}, {"cv"}, ["base", "cv", "nlp", "project"]),
])
def test_a_job_needs_its_targets_and_their_ancestors_up_to_the_first_staged_one(picked: set[str], adopted: set[str],
                                                                                 needed: list[str]) -> None:
    cell = "2.14.1-cu130-py3.11-debian12"
    p = staging.needed(PLAN, {f"{cell}-{x}" for x in picked}, {f"{cell}-{x}" for x in adopted})
    assert ids(p) == needed


def test_only_with_a_whole_target_id_picks_that_target_alone() -> None:
    base = "2.14.1-cu130-py3.11-debian12-base"
    assert PLAN.picked((base,)) == {base}
    assert PLAN.picked(("2.14.1-cu130-py3.11-debian12",)) == {t.id for t in PLAN.targets if t.cell == "2.14.1-cu130-py3.11-debian12"}
    assert [t.id for t in PLAN.select(("2.14.1-cu130-py3.11-debian12-project",)).targets] == [
        base, "2.14.1-cu130-py3.11-debian12-cv", "2.14.1-cu130-py3.11-debian12-project"]


@pytest.mark.parametrize("name, message", [
    ("127.0.0.1:5000/imagesmith/local", "is the release repository"),
    ("staging", "does not start with a registry host"),
    ("docker.io", "does not start with a registry host"),
    ("harbor.example.com/ML", "is not a repository path"),
])
def test_the_staging_repository_is_a_registry_path_and_not_the_release_one(name: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        staging.parse_repository(name, LOCAL.image.name)
    assert staging.parse_repository("127.0.0.1:5000/imagesmith/staging", LOCAL.image.name) == ("127.0.0.1:5000", "imagesmith/staging")
    assert staging.content_tag("sha256:" + "a" * 64) == "ctx-" + "a" * 64


# -- one writer per folder, readers never see half a file --------------------------------------------------


def test_a_second_command_on_the_same_folder_waits_and_says_for_whom(tmp_path: Path) -> None:
    code = ("import sys; from pathlib import Path; from imagesmith.stages import artifacts\n"
            "try:\n"
            f"    with artifacts.locked(Path({str(tmp_path)!r}), 'second', print, timeout_s=0.3): print('GOT IT')\n"
            "except Exception as exc: print(type(exc).__name__, exc)\n")
    with artifacts.locked(tmp_path, "imagesmith build"):
        held = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60).stdout
    free = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60).stdout
    assert held.startswith(f"waiting: {tmp_path} is being written by another imagesmith command (imagesmith build pid ")
    assert "UserError" in held and "wait for it or use another --out" in held and "GOT IT" not in held
    assert free.strip() == "GOT IT"


def _writer(path: str, image: str, rounds: int) -> None:
    for i in range(rounds):
        artifacts.write_build(Path(path), record(0, image_id=image, seconds=float(i)))


def test_concurrent_writers_never_leave_a_torn_artifact(tmp_path: Path) -> None:
    path = tmp_path / "t" / "build.json"
    artifacts.write_build(path, record(0))
    writers = [multiprocessing.Process(target=_writer, args=(str(path), "sha256:" + c * 64, 300)) for c in "23"]
    for w in writers:
        w.start()
    seen = set()
    while any(w.is_alive() for w in writers):
        seen.add(artifacts.read_build(path).image_id)  # raises on a half-written file
    for w in writers:
        w.join()
        assert w.exitcode == 0
    assert seen <= {IMAGE, "sha256:" + "2" * 64, "sha256:" + "3" * 64} and len(seen) >= 2
    assert list(path.parent.glob(".build.json.*")) == []  # no temp files left


# -- taking an ancestor from its job's artifact ------------------------------------------------------------


@dataclass
class Notes:
    lines: list[str] = field(default_factory=list)

    def update(self, item: str, state: str, detail: str = "") -> None:
        return None

    def note(self, message: str) -> None:
        self.lines.append(message)

    def close(self) -> None:
        return None


CELL = "2.14.1-cu130-py3.11-debian12"


def parent_artifact(out: Path, dockerfile: bytes | None = None, **kw: Any) -> None:
    """What the cv job left: build/<cv>/build.json and the Dockerfile it built from."""
    index = {t.id: i for i, t in enumerate(PLAN.targets)}
    cv = PLAN.by_id()[f"{CELL}-cv"]
    artifacts.write_build(out / cv.id / "build.json", record(index[cv.id], **kw))
    ctx = next(c for c in render.render_all(PLAN, LOCAL) if c.target.id == cv.id)
    (out / cv.id / "Dockerfile").write_bytes(dockerfile if dockerfile is not None else ctx.files["Dockerfile"])


@pytest.mark.parametrize("change, adopted, note", [
    ({}, True, ""),
    ({"dockerfile": b"FROM scratch\n"}, False, "is not what this checkout renders"),
    ({"staged": None}, False, "it was not staged (built)"),
    ({"status": "failed"}, False, "it was not staged (failed)"),
    ({"state": "running"}, False, "its build job is from a run that has not finished (state: running"),
    ({"state": "interrupted"}, False, "its build job is from a run that did not complete (state: interrupted)"),
])
def test_a_parent_is_taken_from_its_jobs_artifact_only_if_it_is_that_very_target(
        tmp_path: Path, change: dict[str, Any], adopted: bool, note: str) -> None:
    parent_artifact(tmp_path, **change)
    notes = Notes()
    stage = staging.Stage(None, SimpleNamespace(host="harbor.example.com"), "ml/staging", tmp_path, display=notes)  # type: ignore[arg-type]
    child = f"{CELL}-project"
    p = stage.prepare(PLAN.select((child,)), {child}, LOCAL)
    assert stage.adopts(f"{CELL}-cv") is adopted
    assert [t.layer for t in p.targets] == (["cv", "project"] if adopted else ["base", "cv", "project"])
    assert (notes.lines == []) if adopted else (len(notes.lines) == 1 and note in notes.lines[0])


def test_a_parent_staged_on_another_host_than_stage_is_refused_before_any_pull(tmp_path: Path) -> None:
    """Its pull would carry --stage's login: an artifact naming another host stops the build (exit 1)."""
    parent_artifact(tmp_path)
    stage = staging.Stage(None, SimpleNamespace(host="h.test:5000"), "ml/staging", tmp_path)  # type: ignore[arg-type]
    child = f"{CELL}-project"
    with pytest.raises(UserError) as err:
        stage.prepare(PLAN.select((child,)), {child}, LOCAL)
    assert str(err.value) == (f"{tmp_path / (CELL + '-cv') / 'build.json'} names the staged repository host harbor.example.com, "
                              "but h.test:5000 was declared (--stage REGISTRY/REPO); nothing was sent: publish/verify the "
                              "artifacts of that registry, or declare harbor.example.com if it is yours")


@pytest.mark.parametrize("state", ["running", "interrupted"])
def test_an_artifact_whose_build_job_did_not_complete_is_never_read_as_a_build(tmp_path: Path, state: str) -> None:
    path = tmp_path / PLAN.targets[0].id / "build.json"
    artifacts.write_build(path, record(0, state=state))
    assert json.loads(path.read_text())["state"] == state and artifacts.read_build(path).state == state
    with pytest.raises(UserError, match=f"build.json: this build artifact is from a run that (has not finished|did not "
                                        f"complete) \\(state: {state}.*; run its build job"):
        pipeline.read_build_input(path)
    with pytest.raises(UserError, match=f"state: {state}"):
        pipeline.publish_artifacts(tmp_path, Notes(), pipeline.ReleaseOptions(), engine=EngineBase())
    assert not (tmp_path / "release.json").exists() and not (tmp_path / "run-report.json").exists()


@pytest.mark.parametrize("by, said", [("SIGINT", "(state: interrupted, SIGINT)"), (None, "(state: interrupted)")])
def test_an_interrupted_artifact_says_what_stopped_its_job(tmp_path: Path, by: str | None, said: str) -> None:
    path = tmp_path / PLAN.targets[0].id / "build.json"
    artifacts.write_build(path, record(0, state="interrupted", interrupted_by=by))
    assert artifacts.read_build(path).interrupted_by == by
    with pytest.raises(UserError) as err:
        pipeline.read_build_input(path)
    assert f"this build artifact is from a run that did not complete {said}; run its build job" in str(err.value)


def test_a_stop_reason_that_is_not_one_line_is_refused(tmp_path: Path) -> None:
    path = tmp_path / PLAN.targets[0].id / "build.json"
    artifacts.write_build(path, record(0, state="interrupted", interrupted_by="SIGINT"))
    path.write_text(path.read_text().replace('"SIGINT"', '"SIGINT\\nforged: ok"'))
    with pytest.raises(UserError, match=r"build\.interrupted_by"):
        artifacts.read_build(path)


def test_a_full_build_drops_the_artifacts_of_targets_no_longer_planned(tmp_path: Path) -> None:
    for i in (0, 3):
        artifacts.write_build(tmp_path / PLAN.targets[i].id / "build.json", record(i))
        (tmp_path / PLAN.targets[i].id / "verify.json").write_text("{}")
        (tmp_path / PLAN.targets[i].id / "verify.dsse.json").write_text("{}")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "build.json").write_text("not ours")
    assert artifacts.remove_stale(tmp_path, {PLAN.targets[0].id}) == [PLAN.targets[3].id]
    assert sorted(p.parent.name for p in tmp_path.glob("*/*.json")) == [PLAN.targets[0].id] * 3 + ["other"]
