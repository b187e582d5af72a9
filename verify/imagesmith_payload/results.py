"""Constructors for what a check returns (a partial report entry).

The runner adds id, title, unit, optional and duration_s.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from .judge import FAIL, PASS, SKIP, WARN, Verdict

Result = Dict[str, Any]


def outcome(status: str, detail: str, value: Any = None, threshold: Optional[float] = None,
            data: Optional[Dict[str, Any]] = None) -> Result:
    result: Result = {"status": status, "value": value, "threshold": threshold, "detail": detail}
    if data:
        result["data"] = data
    return result


def passed(detail: str, value: Any = None, **kw: Any) -> Result:
    return outcome(PASS, detail, value, **kw)


def warned(detail: str, value: Any = None, **kw: Any) -> Result:
    return outcome(WARN, detail, value, **kw)


def failed(detail: str, value: Any = None, **kw: Any) -> Result:
    return outcome(FAIL, detail, value, **kw)


def skipped(detail: str, value: Any = None) -> Result:
    return outcome(SKIP, detail, value)


def measured(value: float, verdict: Verdict, data: Optional[Dict[str, Any]] = None,
             extra_detail: str = "") -> Result:
    """A rate judged against a baseline: value, threshold, baseline, percent."""
    detail = verdict.detail + (f"; {extra_detail}" if extra_detail else "")
    result = outcome(verdict.status, detail, round(value, 2), verdict.threshold, data)
    result["baseline"] = verdict.baseline
    result["percent_of_baseline"] = verdict.percent_of_baseline
    return result


def bounded(value: float, limit: float, status: str, what: str,
            data: Optional[Dict[str, Any]] = None) -> Result:
    """An error judged against an upper limit (value <= threshold passes)."""
    relation = "<=" if status == PASS else "exceeds"
    return outcome(status, f"{what}: {value:.3g} {relation} {limit:.3g}", float(f"{value:.4g}"),
                   limit, data)
