"""The versioned report: build, summarise, validate, write, emit."""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence, TextIO

from .judge import FAIL, STATUSES

SCHEMA = "imagesmith.verify-report/1"
MARKER = "@@IMAGESMITH-REPORT@@ "
CHECK_KEYS = ("id", "title", "status", "value", "threshold", "unit", "baseline",
              "percent_of_baseline", "detail", "optional", "duration_s")
TOP_KEYS = ("schema", "tier", "started_at", "duration_s", "environment", "checks", "summary")

Report = Dict[str, Any]


def summarize(checks: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Counts per status; ok unless a non-optional check failed."""
    counts: Dict[str, Any] = {s: 0 for s in STATUSES}
    for entry in checks:
        counts[entry["status"]] += 1
    counts["ok"] = not any(c["status"] == FAIL and not c.get("optional") for c in checks)
    return counts


def build_report(tier: str, started_at: str, duration_s: float, environment: Dict[str, Any],
                 checks: List[Dict[str, Any]]) -> Report:
    return sanitize({
        "schema": SCHEMA, "tier": tier, "started_at": started_at,
        "duration_s": round(duration_s, 2), "environment": environment,
        "checks": checks, "summary": summarize(checks),
    })


def sanitize(obj: Any) -> Any:
    """JSON-safe: NaN/Inf become None, tuples lists, unknown objects strings."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): sanitize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [sanitize(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    return str(obj)


def validate_report(report: Any) -> List[str]:
    """Problems with a report's shape (empty when it follows the schema)."""
    if not isinstance(report, dict):
        return ["report: expected an object"]
    problems = [f"report: missing key {k!r}" for k in TOP_KEYS if k not in report]
    if report.get("schema") != SCHEMA:
        problems.append(f"report.schema: expected {SCHEMA!r}, got {report.get('schema')!r}")
    for i, entry in enumerate(report.get("checks") or []):
        problems += _check_problems(i, entry)
    if isinstance(report.get("checks"), list) and report.get("summary") != summarize(
            [c for c in report["checks"] if isinstance(c, dict) and c.get("status") in STATUSES]):
        problems.append("report.summary: does not match the checks")
    return problems


def _check_problems(i: int, entry: Any) -> List[str]:
    where = f"report.checks[{i}]"
    if not isinstance(entry, dict):
        return [f"{where}: expected an object"]
    problems = [f"{where}: missing key {k!r}" for k in CHECK_KEYS if k not in entry]
    if entry.get("status") not in STATUSES:
        problems.append(f"{where}.status: expected one of {', '.join(STATUSES)}, "
                        f"got {entry.get('status')!r}")
    if not isinstance(entry.get("detail", ""), str) or "\n" in entry.get("detail", ""):
        problems.append(f"{where}.detail: expected one line of text")
    return problems


def write_report(path: str, report: Report) -> None:
    """Atomically: a temporary file beside the target, then os.replace."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".report-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2, allow_nan=False)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def marker_line(report: Report) -> str:
    return MARKER + json.dumps(report, separators=(",", ":"), allow_nan=False)


def emit_marker(report: Report, stream: Optional[TextIO] = None) -> None:
    """The whole report on one stdout line, for a host that reads container logs."""
    out = stream or sys.stdout
    out.write("\n" + marker_line(report) + "\n")
    out.flush()


def parse_marker(text: str) -> Report:
    """The last marker line in a log (the host side's inverse of emit_marker)."""
    for line in reversed(text.splitlines()):
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    raise ValueError("no report marker line in the output")
