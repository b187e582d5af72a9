"""What a verify or a release reads of the builds: build reports (OUT/report.json) and build artifacts
(OUT/<target>/build.json) of any number of jobs, as one input, through the strict loader."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from imagesmith import runstate
from imagesmith.errors import UserError
from imagesmith.model import buildreport, loader
from imagesmith.model.buildreport import BUILD_SCHEMA, BuildReport, TargetResult
from imagesmith.stages import artifacts


def read_build(path: Path) -> BuildReport:
    """A build report (OUT/report.json) of a build that completed, through the loader (its schema) and
    :func:`imagesmith.model.buildreport.parse_report` (every value checked)."""
    data = loader.load_json_artifact(path, schema=buildreport.REPORT_SCHEMA, fix=f"run imagesmith build --out {path.parent} first")
    if not runstate.is_complete(data):
        raise UserError(f"{path}: {runstate.not_complete(data, 'this build report')}; "
                        f"run imagesmith build --out {path.parent} again")
    return buildreport.parse_report(data, str(path))


@dataclass(frozen=True)
class BuildInput:
    """What one build job left: its report, and the folder each target's verify.json goes to."""

    report: BuildReport
    folders: Mapping[str, Path]
    state: str = runstate.COMPLETE  # of the build jobs it came from

    @property
    def results(self) -> list[TargetResult]:
        return list(self.report.results)

    @property
    def data(self) -> dict[str, Any]:
        """The build report as a run report holds it (``imagesmith.build-report/1``, with its state)."""
        return self.report.to_json() | {"state": self.state}


def read_build_input(path: Path) -> BuildInput:
    """A build report (OUT/report.json: verify.json to OUT/<target>/) or one target's build
    artifact (OUT/<target>/build.json: verify.json beside it)."""
    fix = f"give the report.json or <target>/build.json that imagesmith build --out {path.parent} wrote"
    if loader.load_json_any(path, fix=fix).get("schema") == BUILD_SCHEMA:
        return builds_input(complete([artifacts.Found(artifacts.read_build(path), path.parent)]))
    report = read_build(path)
    return BuildInput(report, {r.target: path.parent / r.target for r in report.results})


def complete(found: list[artifacts.Found]) -> list[artifacts.Found]:
    """``found``, when every artifact's build job completed (a ``running`` or ``interrupted`` one is
    never read as a build, as OUT/report.json is not)."""
    for f in found:
        if not f.record.complete:
            raise UserError(f"{f.folder / artifacts.BUILD_FILE}: {runstate.not_complete(f.record.job_state(), 'this build artifact')}; "
                            f"run its build job (imagesmith build --out {f.folder.parent}) again")
    return found


def builds_input(found: list[artifacts.Found]) -> BuildInput:
    """Build artifacts as one build report (for verify, publish and the run report)."""
    first = found[0].record if found else None
    report = BuildReport(first.release.matrix if first else "", min((f.record.written_at for f in found), default=""), 0.0,
                         {}, tuple(artifacts.result_of(f.record, f.folder) for f in found))
    state = runstate.COMPLETE if all(f.record.complete for f in found) else runstate.INTERRUPTED
    return BuildInput(report, {f.record.target.id: f.folder for f in found}, state)


def merge_inputs(inputs: list[BuildInput]) -> BuildInput:
    """Several jobs' builds as one (a target built by two jobs: the later input wins)."""
    results: dict[str, TargetResult] = {}
    for i in inputs:
        results.update({r.target: r for r in i.report.results})
    report = replace(inputs[0].report, results=tuple(results.values()),
                     seconds=round(sum(i.report.seconds for i in inputs), 2))
    return BuildInput(report, {k: v for i in inputs for k, v in i.folders.items()}, inputs[0].state)


def read_builds(paths: Sequence[Path]) -> BuildInput:
    """Build reports (OUT/report.json) and build artifacts (OUT/<target>/build.json) of any number of jobs, as one."""
    return merge_inputs([read_build_input(p) for p in paths])


def out_of(path: Path) -> Path:
    """The output folder of a build report (OUT/report.json) or artifact (OUT/<target>/build.json)."""
    return path.parent.parent if path.name == artifacts.BUILD_FILE else path.parent
