"""The versioned report: build, summarise, validate, write, emit."""

from __future__ import annotations

import json
import math
import sys
from typing import Any, Dict, List, Optional, Sequence, TextIO

from .atomic import write_text
from .judge import FAIL, STATUSES
from .sharing import validate as validate_sharing
from .sharing import window_of

SCHEMA = "imagesmith.verify-report/1"
MARKER = "@@IMAGESMITH-REPORT@@ "
CHECK_KEYS = ("id", "title", "status", "value", "threshold", "unit", "baseline",
              "percent_of_baseline", "detail", "optional", "duration_s")
TOP_KEYS = ("schema", "nonce", "tier", "started_at", "duration_s", "environment", "checks", "summary", "sharing")
NOT_MEASURED: Dict[str, Any] = {"exclusive": None, "allowed": False, "foreign": [], "reason": "not measured"}

Report = Dict[str, Any]


def summarize(checks: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Counts per status; ok unless a non-optional check failed."""
    counts: Dict[str, Any] = {s: 0 for s in STATUSES}
    for entry in checks:
        counts[entry["status"]] += 1
    counts["ok"] = not any(c["status"] == FAIL and not c.get("optional") for c in checks)
    return counts


def build_report(tier: str, started_at: str, duration_s: float, environment: Dict[str, Any],
                 checks: List[Dict[str, Any]], nonce: Optional[str] = None,
                 sharing: Optional[Dict[str, Any]] = None) -> Report:
    report: Report = sanitize({  # sanitize keeps a dict a dict (keys made str)
        "schema": SCHEMA, "nonce": nonce, "tier": tier, "started_at": started_at,
        "duration_s": round(duration_s, 2), "environment": environment,
        "checks": checks, "summary": summarize(checks),
        "sharing": dict(NOT_MEASURED) if sharing is None else sharing,
    })
    return report


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
        problems.append(f"report.schema: expected {SCHEMA!r}, got {_short(report.get('schema'))}")
    if not isinstance(report.get("nonce"), (str, type(None))):
        problems.append(f"report.nonce: expected text, got {_short(report.get('nonce'))}")
    if "sharing" in report:
        problems += validate_sharing(report["sharing"])
    if not isinstance(report.get("checks"), list):
        return problems + [f"report.checks: expected a list, got {_short(report.get('checks'))}"]
    for i, entry in enumerate(report["checks"]):
        problems += _check_problems(i, entry)
    valid = [c for c in report["checks"] if isinstance(c, dict) and _is_status(c.get("status"))]
    if report.get("summary") != summarize(valid):
        problems.append("report.summary: does not match the checks")
    return problems


def answers_request(report: Report, nonce: Optional[str], requested: Dict[str, bool], tier: str) -> List[str]:
    """Problems with a (schema-valid) report as the answer to one request: the
    run's nonce echoed, the tier asked for, each requested check (id -> optional)
    exactly once, no other check, optional flags as the registry declares them."""
    problems = []
    if report.get("nonce") != nonce:
        got = "missing" if report.get("nonce") is None else f"{_short(report.get('nonce'))}, not this run's"
        problems.append(f"report.nonce: {got}: this report was not written by this run's payload")
    if report.get("tier") != tier:
        problems.append(f"report.tier: expected {tier!r}, got {_short(report.get('tier'))}")
    ids = [c.get("id") for c in report.get("checks") or [] if isinstance(c, dict)]
    seen = {i for i in ids if isinstance(i, str)}
    missing = [i for i in requested if i not in seen]
    extra = sorted(str(i) for i in seen - set(requested))
    twice = sorted({str(i) for i in ids if ids.count(i) > 1})
    for what, names in (("missing", missing), ("not requested", extra), ("reported twice", twice)):
        if names:
            problems.append(f"report.checks: {what}: {', '.join(names[:5])}" + (" ..." if len(names) > 5 else ""))
    flags = [c["id"] for c in report.get("checks") or [] if isinstance(c, dict) and c.get("id") in requested
             and c.get("optional") is not requested[c["id"]]]
    if flags:
        problems.append(f"report.checks: optional flag differs from the registry: {', '.join(sorted(flags)[:5])}")
    return problems


def _is_status(value: Any) -> bool:
    return isinstance(value, str) and value in STATUSES


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_problems(i: int, entry: Any) -> List[str]:
    where = f"report.checks[{i}]"
    if not isinstance(entry, dict):
        return [f"{where}: expected an object"]
    problems = [f"{where}: missing key {k!r}" for k in CHECK_KEYS if k not in entry]
    if not isinstance(entry.get("id"), str) or not entry.get("id"):
        problems.append(f"{where}.id: expected a check id, got {_short(entry.get('id'))}")
    if not _is_status(entry.get("status")):
        problems.append(f"{where}.status: expected one of {', '.join(STATUSES)}, "
                        f"got {_short(entry.get('status'))}")
    if not isinstance(entry.get("detail", ""), str) or "\n" in entry.get("detail", ""):
        problems.append(f"{where}.detail: expected one line of text")
    if not isinstance(entry.get("optional", False), bool):
        problems.append(f"{where}.optional: expected true or false, got {_short(entry.get('optional'))}")
    if "window" in entry and window_of(entry) is None:
        problems.append(f"{where}.window: expected {{start, end}}: wall-clock seconds, start <= end, "
                        f"got {_short(entry.get('window'))}")
    return problems


def write_report(path: str, report: Report) -> None:
    """Atomically (:func:`imagesmith_payload.atomic.write_text`)."""
    write_text(path, json.dumps(report, indent=2, allow_nan=False) + "\n")


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
            report = json.loads(line[len(MARKER):])
            if not isinstance(report, dict):
                raise ValueError(f"the report marker line holds a JSON {type(report).__name__}, not an object")
            return report
    raise ValueError("no report marker line in the output")

