"""What a verify or a release reads of the builds: build reports (OUT/report.json) and build artifacts
(OUT/<target>/build.json) of any number of jobs, as one input, through the strict loader."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from imagesmith import runstate
from imagesmith.errors import UserError
from imagesmith.model import loader
from imagesmith.model.buildreport import BUILD_SCHEMA
from imagesmith.stages import artifacts
from imagesmith.stages.building import buildreport


def read_build(path: Path) -> dict[str, Any]:
    """A build report (OUT/report.json), its schema checked."""
    data = loader.load_json_artifact(path, schema=buildreport.REPORT_SCHEMA, fix=f"run imagesmith build --out {path.parent} first")
    if not runstate.is_complete(data):
        raise UserError(f"{path}: {runstate.not_complete(data, 'this build report')}; "
                        f"run imagesmith build --out {path.parent} again")
    return data


def build_results(data: Mapping[str, Any]) -> list[artifacts.TargetResult]:
    return [artifacts.TargetResult(**t) for t in data["targets"]]


@dataclass(frozen=True)
class BuildInput:
    """What one build job left: its results, and the folder each target's verify.json goes to."""

    data: dict[str, Any]  # as a build report (imagesmith.build-report/1)
    folders: Mapping[str, Path]

    @property
    def results(self) -> list[artifacts.TargetResult]:
        return build_results(self.data)


def read_build_input(path: Path) -> BuildInput:
    """A build report (OUT/report.json: verify.json to OUT/<target>/) or one target's build
    artifact (OUT/<target>/build.json: verify.json beside it)."""
    fix = f"give the report.json or <target>/build.json that imagesmith build --out {path.parent} wrote"
    if loader.load_json_any(path, fix=fix).get("schema") == BUILD_SCHEMA:
        return builds_input(complete([artifacts.Found(artifacts.read_build(path), path.parent)]))
    data = read_build(path)
    return BuildInput(data, {t["target"]: path.parent / t["target"] for t in data["targets"]})


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
    targets = [artifacts.result_fields(f.record) | {"log": str(f.folder / "build.log"), "dockerfile": str(f.folder / "Dockerfile")}
               for f in found]
    first = found[0].record if found else None
    data = {"schema": buildreport.REPORT_SCHEMA, "matrix": first.release.matrix if first else "", "seconds": 0.0,
            "started_at": min((f.record.written_at for f in found), default=""), "base_images": {},
            "ok": all(f.record.ok for f in found), "targets": targets,
            "state": runstate.COMPLETE if all(f.record.complete for f in found) else runstate.INTERRUPTED}
    return BuildInput(data, {f.record.target.id: f.folder for f in found})


def merge_inputs(inputs: list[BuildInput]) -> BuildInput:
    """Several jobs' builds as one (a target built by two jobs: the later input wins)."""
    targets: dict[str, Any] = {}
    for i in inputs:
        targets.update({t["target"]: t for t in i.data["targets"]})
    data = dict(inputs[0].data) | {"targets": list(targets.values()), "ok": all(t["status"] in ("built", "cached") for t in targets.values()),
                                   "seconds": round(sum(float(i.data.get("seconds") or 0) for i in inputs), 2)}
    return BuildInput(data, {k: v for i in inputs for k, v in i.folders.items()})


def read_builds(paths: Sequence[Path]) -> BuildInput:
    """Build reports (OUT/report.json) and build artifacts (OUT/<target>/build.json) of any number of jobs, as one."""
    return merge_inputs([read_build_input(p) for p in paths])


def out_of(path: Path) -> Path:
    """The output folder of a build report (OUT/report.json) or artifact (OUT/<target>/build.json)."""
    return path.parent.parent if path.name == artifacts.BUILD_FILE else path.parent
