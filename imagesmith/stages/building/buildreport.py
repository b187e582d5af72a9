"""The build report (OUT/build-report.json): every target's result, the CUDA layers, the bases; a failed run's
summary (what failed, its Dockerfile, the last log lines)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from imagesmith.model import schemas
from imagesmith.report import log_tail
from imagesmith.stages.artifacts import TargetResult

REPORT_SCHEMA = schemas.BUILD_REPORT


@dataclass
class BuildReport:
    matrix: str
    started_at: str
    seconds: float
    base_images: dict[str, str]
    results: list[TargetResult]
    cuda_layers: list[dict[str, Any]] = field(default_factory=list)  # cudabuild.CudaResult, one per (set, OS base)
    base_image_bytes: dict[str, int] = field(default_factory=dict)
    engine: dict[str, Any] | None = None  # EngineKind.record(): the engine that built

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def to_json(self) -> dict[str, Any]:
        """The report; ``state`` is added by whoever writes it (running, complete, interrupted)."""
        return {"schema": REPORT_SCHEMA, "matrix": self.matrix, "started_at": self.started_at,
                "seconds": round(self.seconds, 2), "ok": self.ok, "base_images": self.base_images,
                "cuda_layers": self.cuda_layers, "base_image_bytes": self.base_image_bytes,
                "targets": [asdict(r) for r in self.results]} | ({"engine": self.engine} if self.engine else {})


def not_ok(doc: dict[str, Any]) -> dict[str, Any]:
    """A build report of a run that did not complete never says ok."""
    return doc | {"ok": False}


def failure_summary(report: BuildReport) -> list[str]:
    """For each failed target: what, where its Dockerfile is, the last log lines."""
    lines: list[str] = []
    for r in report.results:
        if r.status != "failed":
            continue
        lines += [f"FAILED {r.target}: {r.error}", f"  Dockerfile: {r.dockerfile}"]
        if r.log and Path(r.log).is_file():  # none when it failed before its build began (a base of another platform)
            lines += [f"  log: {r.log}"] + [f"  | {line}" for line in log_tail(r.log)]
    return lines
