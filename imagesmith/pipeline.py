"""The whole pipeline over the stages' artifacts on disk:

    OUT/report.json (build) -> OUT/<target>/verify.json -> OUT/release.json
                            -> OUT/run-report.json (all three, one versioned file)

Each step reads what the previous one wrote, so CI can split them over jobs
(`imagesmith build`, `imagesmith verify --build-report`, `imagesmith publish`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Mapping

from imagesmith import build, policy, runstate, verify
from imagesmith.errors import UsageError, UserError
from imagesmith.matrix import Matrix
from imagesmith.progress import Display

RUN_REPORT = "run-report.json"


def options_from(matrix: Matrix, allow_cpu_verification: bool = False, **overrides: Any) -> verify.VerifyOptions:
    """Verify options as the matrix's ``verify:`` section sets them (``require_gpu``
    unset: a GPU for CUDA images); ``allow_cpu_verification`` lets CUDA images be
    verified in CPU mode where no GPU is visible (they are then not GPU-verified)."""
    v = matrix.verify
    base = dict(tier=v.tier, gpus=v.gpus, shm_size=v.shm_size, memory=v.memory,
                timeout_s=float(v.timeout_s), thresholds=v.thresholds, require_gpu=v.require_gpu,
                allow_cpu=True if allow_cpu_verification else None)
    return verify.VerifyOptions(**(base | {k: val for k, val in overrides.items() if val is not None}))


def verify_results(engine: Any, results: list[build.TargetResult], options: verify.VerifyOptions, out: Path,
                   display: Display, run: "RunReport | None" = None) -> dict[str, verify.VerifyOutcome]:
    """Verify every image that built (by image ID); OUT/<target>/verify.json says
    ``running`` while its image is verified, then ``complete`` (or ``interrupted``)."""
    outcomes: dict[str, verify.VerifyOutcome] = {}
    for r in results:
        if not r.ok or not r.image_id:
            continue
        display.update(r.target, "verifying")
        with runstate.Tracked(out / r.target / "verify.json", verify.running_report(r.image_id, options.tier)) as tracked:
            outcome = _verify_one(engine, r, options, display)
            tracked.complete(outcome.report)
        summary = outcome.report.get("summary", {})
        display.update(r.target, "passed" if outcome.ok else "failed",
                       f"{summary.get('pass', 0)} pass, {summary.get('fail', 0)} fail, {summary.get('skip', 0)} skip; "
                       f"{policy.how_verified(outcome.report)}")
        outcomes[r.target] = outcome
        if run is not None:
            run.verified(r.target, outcome.report)
    return outcomes


def _verify_one(engine: Any, r: build.TargetResult, options: verify.VerifyOptions, display: Display) -> verify.VerifyOutcome:
    try:
        return verify.verify_image(engine, r.image_id or "", options, pull=False, progress=_progress(display, r.target))
    except UsageError:
        raise
    except UserError as exc:
        report = verify.failed_report("payload.start", str(exc), options.tier) | {"state": runstate.COMPLETE}
        return verify.VerifyOutcome(report)


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
    if not runstate.is_complete(data):
        raise UserError(f"{path}: {runstate.not_complete(data, 'this build report')}; "
                        f"run imagesmith build --out {path.parent} again")
    return data


def build_results(data: Mapping[str, Any]) -> list[build.TargetResult]:
    return [build.TargetResult(**t) for t in data["targets"]]


def read_outcomes(out: Path, targets: list[str], run_report: Path | None = None) -> dict[str, verify.VerifyOutcome]:
    """Verify outcomes from a run report, else from OUT/<target>/verify.json.
    A target with neither, or whose verification did not complete, is unverified
    (never tagged, never pushed)."""
    if run_report is not None:
        data = _read_json(run_report, "run report")
        if not runstate.is_complete(data):
            raise UserError(f"{run_report}: {runstate.not_complete(data, 'this run report')}; verify again "
                            f"(imagesmith verify --build-report {out / 'report.json'} --json {run_report})")
        found = {t: r for t, r in (data.get("verify") or {}).items() if t in targets and isinstance(r, dict)}
    else:
        paths = {t: out / t / "verify.json" for t in targets}
        found = {t: _read_json(p, "verify report") for t, p in paths.items() if p.is_file()}
    return {t: verify.VerifyOutcome(r) for t, r in found.items() if runstate.is_complete(r)}


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a readable {what} ({exc})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a {what} (a JSON object)")
    return data


class RunReport:
    """OUT/run-report.json (build + verify + release in one versioned file), written
    when the run starts (``running``), as each stage ends, and at the end
    (``complete``); leaving the ``with`` block by an exception marks it ``interrupted``."""

    def __init__(self, out: Path, build_data: Mapping[str, Any] | None = None) -> None:
        self.path = out / RUN_REPORT
        self.build_data = dict(build_data) if build_data is not None else None
        self.verify: dict[str, Mapping[str, Any]] = {}
        self.release: Mapping[str, Any] | None = None
        self.tracked = runstate.Tracked(self.path, self._doc())

    def _doc(self) -> dict[str, Any]:
        from imagesmith import report

        return report.run_report(self.build_data, self.verify, self.release)

    def built(self, build_data: Mapping[str, Any]) -> None:
        self.build_data = dict(build_data)
        self.tracked.update(self._doc())

    def verified(self, target: str, report: Mapping[str, Any]) -> None:
        self.verify[target] = report
        self.tracked.update(self._doc())

    def released(self, release: Mapping[str, Any]) -> None:
        self.release = release
        self.tracked.update(self._doc())

    def complete(self) -> Path:
        self.tracked.complete(self._doc())
        return self.path

    def __enter__(self) -> "RunReport":
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None:
            self.tracked.stop(exc)


def write_run_report(out: Path, build_data: Mapping[str, Any], outcomes: Mapping[str, verify.VerifyOutcome],
                     release: Mapping[str, Any] | None) -> Path:
    """The whole run report at once (complete)."""
    run = RunReport(out, build_data)
    run.verify = {t: o.report for t, o in outcomes.items()}
    run.release = release
    return run.complete()
