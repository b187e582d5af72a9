"""The build report (OUT/build-report.json): every target's result, the CUDA layers, the bases; a failed run's
summary (what failed, its Dockerfile, the last log lines)."""

from __future__ import annotations

import contextlib
import datetime as dt
import graphlib
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence, TextIO

from imagesmith import runstate
from imagesmith.atomic import write_json
from imagesmith.edges.credentials import CredentialStore
from imagesmith.edges.engine import RUN_LABEL, BuildOutcome, build_progress, registry_host
from imagesmith.edges.protocols import EngineProtocol, ImageInfo
from imagesmith.edges.sources import SourceServer
from imagesmith.errors import BuildError, ImagesmithError, Redactor, UserError
from imagesmith.model import compat, loader, schemas
from imagesmith.model.matrix import Matrix
from imagesmith.model.plan import Plan, Target
from imagesmith.model.platform import DEFAULT as DEFAULT_PLATFORM
from imagesmith.model.platform import emulated, foreign
from imagesmith.model.ref import ImageRef
from imagesmith.model.versions import matches
from imagesmith.progress import Display, QuietDisplay
from imagesmith.render import contexts as render
from imagesmith.render import cudalayer
from imagesmith.report import log_tail
from imagesmith.stages import artifacts
from imagesmith.stages.build import cudabuild
from imagesmith.stages.artifacts import TargetResult
from imagesmith.stages.build.cache import (
    CACHE_REPOSITORY,
    LABEL_HASH,
    OWNER_REPOSITORY,
    PREBUILD_REPOSITORY,
    context_hash,
    owner_id,
    owner_tag,
)
from imagesmith.stages.build.slots import Slots, priorities
from imagesmith.units import gb


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
