"""The whole pipeline over the stages' artifacts on disk:

    OUT/report.json (build, all targets of one job)
    OUT/<target>/build.json (build, one target: artifacts.BuildRecord, with its staged digest)
        -> OUT/<target>/verify.json -> OUT/release.json
        -> OUT/run-report.json (all three, one versioned file)

Each step reads what the previous one wrote, so CI can split them over jobs
and machines (`imagesmith build --stage`, `imagesmith verify --build-report`,
`imagesmith publish`): per-target files from many jobs gathered into one
folder are the whole build.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from imagesmith import artifacts, build, verify
from imagesmith.artifacts import VERIFY_FILE
from imagesmith.atomic import write_text
from imagesmith.errors import UserError
from imagesmith.matrix import Matrix
from imagesmith.progress import Display

RUN_REPORT = "run-report.json"


def options_from(matrix: Matrix, **overrides: Any) -> verify.VerifyOptions:
    """Verify options as the matrix's ``verify:`` section sets them."""
    v = matrix.verify
    base = dict(tier=v.tier, gpus=v.gpus, shm_size=v.shm_size, memory=v.memory,
                timeout_s=float(v.timeout_s), thresholds=v.thresholds)
    return verify.VerifyOptions(**(base | {k: val for k, val in overrides.items() if val is not None}))


def verify_results(engine: Any, results: list[build.TargetResult], options: verify.VerifyOptions, out: Path,
                   display: Display, auth: Mapping[str, str] | None = None) -> dict[str, verify.VerifyOutcome]:
    """Verify every image that built; write OUT/<target>/verify.json."""
    return {r.target: verify_one(engine, r, options, out / r.target, display, auth) for r in results if r.ok and r.image_id}


def verify_one(engine: Any, r: build.TargetResult, options: verify.VerifyOptions, folder: Path, display: Display,
               auth: Mapping[str, str] | None = None) -> verify.VerifyOutcome:
    """One built image: a staged one by its digest (pulled when this engine lacks it), else by image ID;
    the report goes to FOLDER/verify.json."""
    display.update(r.target, "verifying")
    staged = f"{r.staged['repository']}@{r.staged['digest']}" if r.staged else None
    try:
        outcome = verify.verify_image(engine, staged or r.image_id or "", options, pull=staged is not None,
                                      progress=_progress(display, r.target), auth=auth)
    except UserError as exc:
        outcome = verify.VerifyOutcome(verify.failed_report("payload.start", str(exc), options.tier))
    write_text(folder / VERIFY_FILE, json.dumps(outcome.report, indent=2, sort_keys=True) + "\n")
    summary = outcome.report.get("summary", {})
    display.update(r.target, "passed" if outcome.ok else "failed",
                   f"{summary.get('pass', 0)} pass, {summary.get('fail', 0)} fail, {summary.get('skip', 0)} skip")
    return outcome


def _progress(display: Display, target: str) -> Callable[[str], None]:
    return lambda line: display.update(target, "verifying", line.strip()[:100])


def read_build(path: Path) -> dict[str, Any]:
    """A build report (OUT/report.json), its schema checked."""
    try:
        data = dict(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:
        raise UserError(f"no readable build report at {path} ({exc}); run imagesmith build --out {path.parent} first") from None
    if data.get("schema") != build.REPORT_SCHEMA:
        raise UserError(f"{path}: schema {data.get('schema')!r} is not {build.REPORT_SCHEMA}; build again")
    return data


def build_results(data: Mapping[str, Any]) -> list[build.TargetResult]:
    return [build.TargetResult(**t) for t in data["targets"]]


@dataclass(frozen=True)
class BuildInput:
    """What one build job left: its results, and the folder each target's verify.json goes to."""

    data: dict[str, Any]  # as a build report (imagesmith.build-report/1)
    folders: Mapping[str, Path]

    @property
    def results(self) -> list[build.TargetResult]:
        return build_results(self.data)


def read_build_input(path: Path) -> BuildInput:
    """A build report (OUT/report.json: verify.json to OUT/<target>/) or one target's build
    artifact (OUT/<target>/build.json: verify.json beside it)."""
    if _schema(path) == artifacts.BUILD_SCHEMA:
        return builds_input([artifacts.Found(artifacts.read_build(path), path.parent)])
    data = read_build(path)
    return BuildInput(data, {t["target"]: path.parent / t["target"] for t in data["targets"]})


def _schema(path: Path) -> Any:
    try:
        return json.loads(path.read_text()).get("schema")
    except (OSError, ValueError, AttributeError):
        return None  # the reader that follows says what is wrong


def builds_input(found: list[artifacts.Found]) -> BuildInput:
    """Build artifacts as one build report (for verify, publish and the run report)."""
    targets = [artifacts.result_fields(f.record) | {"log": str(f.folder / "build.log"), "dockerfile": str(f.folder / "Dockerfile")}
               for f in found]
    first = found[0].record if found else None
    data = {"schema": build.REPORT_SCHEMA, "matrix": first.release.matrix if first else "", "seconds": 0.0,
            "started_at": min((f.record.written_at for f in found), default=""), "base_images": {},
            "ok": all(f.record.ok for f in found), "targets": targets}
    return BuildInput(data, {f.record.target.id: f.folder for f in found})


def merge_inputs(inputs: list[BuildInput]) -> BuildInput:
    """Several jobs' builds as one (a target built by two jobs: the later input wins)."""
    targets: dict[str, Any] = {}
    for i in inputs:
        targets.update({t["target"]: t for t in i.data["targets"]})
    data = dict(inputs[0].data) | {"targets": list(targets.values()), "ok": all(t["status"] in ("built", "cached") for t in targets.values()),
                                   "seconds": round(sum(float(i.data.get("seconds") or 0) for i in inputs), 2)}
    return BuildInput(data, {k: v for i in inputs for k, v in i.folders.items()})


def read_outcomes(out: Path, targets: list[str], run_report: Path | None = None) -> dict[str, verify.VerifyOutcome]:
    """Verify outcomes from a run report, else from OUT/<target>/verify.json.
    A target with neither is unverified (never tagged, never pushed)."""
    if run_report is not None:
        data = json.loads(run_report.read_text())
        return {t: verify.VerifyOutcome(r) for t, r in (data.get("verify") or {}).items() if t in targets}
    found = {t: out / t / "verify.json" for t in targets}
    return {t: verify.VerifyOutcome(json.loads(p.read_text())) for t, p in found.items() if p.is_file()}


def write_run_report(out: Path, build_data: Mapping[str, Any], outcomes: Mapping[str, verify.VerifyOutcome],
                     release: Mapping[str, Any] | None) -> Path:
    from imagesmith import report

    data = report.run_report(dict(build_data), {t: o.report for t, o in outcomes.items()}, release)
    path = out / RUN_REPORT
    write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


# -- publish from the build artifacts alone ------------------------------------------------------


def publish_artifacts(out: Path, display: Display, date: str | None = None, run_report: Path | None = None,
                      matrix: Matrix | None = None, engine: Any = None, **release: Any) -> Any:
    """Publish what OUT's build artifacts (``*/build.json``, gathered from any number of build jobs) and
    the ``verify.json`` beside each say passed: no matrix needed. Staged images are promoted
    registry to registry (no engine); the SBOM's inventory comes from the build job's measurement.
    Writes OUT/release.json and OUT/run-report.json; returns the release report."""
    from imagesmith import publish
    from imagesmith.plan import Plan

    found = artifacts.find_builds(out)
    spec = artifacts.one_release(found)
    if matrix is not None and (matrix.image.name, matrix.tags) != (spec.image.name, spec.tags):
        raise UserError(f"the build artifacts in {out} release {spec.image.name} ({spec.matrix}), not what {matrix.file.name} "
                        f"says ({matrix.image.name}); publish without --matrix, or build again from {matrix.file.name}")
    ordered = sorted(found.values(), key=lambda f: f.record.target.depth)
    plan = Plan(spec.matrix, spec.date, tuple(f.record.target for f in ordered))
    built = builds_input(ordered)
    outcomes = read_outcomes(out, list(found), run_report) if run_report is not None else \
        {f.record.target.id: _verify_report(f.verify_path) for f in ordered if f.verify_path.is_file()}
    if engine is None:
        from imagesmith.engine import Engine

        engine = Engine()  # connects only if an image was not staged (same-host publish)
    rel = publish.release_to(engine, spec.image, spec.tags, plan, built.results, outcomes, date or spec.date, out, display,
                             inventory=_inventories(ordered, engine), **release)
    write_run_report(out, built.data, outcomes, rel.to_json())
    return rel


def _verify_report(path: Path) -> verify.VerifyOutcome:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a readable verify report ({exc}); verify again") from None
    if not isinstance(data, dict) or data.get("schema") != verify.REPORT_SCHEMA:
        raise UserError(f"{path}: not a verify report ({verify.REPORT_SCHEMA}); verify again")
    return verify.VerifyOutcome(data)


def _inventories(found: list[artifacts.Found], engine: Any) -> Callable[[str], Mapping[str, Any]]:
    """Image ID -> its inventory as the build job measured it (inventory.json beside build.json),
    else measured now in the engine (an image that was not staged)."""
    from imagesmith.evidence import INVENTORY_FILE

    folders = {f.record.image_id: f.folder for f in found if f.record.image_id}

    def inventory(image_id: str) -> Mapping[str, Any]:
        path = folders[image_id] / INVENTORY_FILE if image_id in folders else None
        data = json.loads(path.read_text()) if path is not None and path.is_file() else {}
        if data.get("image_id") == image_id:
            return dict(data["inventory"])
        return verify.run_facts(engine, image_id, args=["--inventory"])
    return inventory
