"""The build report's words for a run (the report itself, OUT/report.json, is
:class:`imagesmith.model.buildreport.BuildReport`): a run that did not complete never says ok, and a failed run's
summary shows what failed, its Dockerfile and the last log lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from imagesmith.model.buildreport import BuildReport
from imagesmith.report import log_tail


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
