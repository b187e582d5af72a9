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

from imagesmith import build, policy, verify
from imagesmith.atomic import write_text
from imagesmith.errors import UserError
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
                   display: Display) -> dict[str, verify.VerifyOutcome]:
    """Verify every image that built (by image ID); write OUT/<target>/verify.json."""
    outcomes: dict[str, verify.VerifyOutcome] = {}
    for r in results:
        if not r.ok or not r.image_id:
            continue
        display.update(r.target, "verifying")
        try:
            outcome = verify.verify_image(engine, r.image_id, options, pull=False, progress=_progress(display, r.target))
        except UserError as exc:
            outcome = verify.VerifyOutcome(verify.failed_report("payload.start", str(exc), options.tier))
        write_text(out / r.target / "verify.json", json.dumps(outcome.report, indent=2, sort_keys=True) + "\n")
        summary = outcome.report.get("summary", {})
        display.update(r.target, "passed" if outcome.ok else "failed",
                       f"{summary.get('pass', 0)} pass, {summary.get('fail', 0)} fail, {summary.get('skip', 0)} skip; "
                       f"{policy.how_verified(outcome.report)}")
        outcomes[r.target] = outcome
    return outcomes


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
