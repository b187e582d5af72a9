"""The fleet report (``imagesmith.fleet-report/1``): one cell per digest x class.

Written by ``fleet verify`` (atomically), read back by ``publish`` (the
floating-tag gate) and ``imagesmith report`` (Markdown, JUnit, HTML: one row
per class). Reading treats the file as untrusted: every field is checked and
a bad one is a UserError naming the file and the field.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from imagesmith.atomic import write_json
from imagesmith.errors import UserError
from imagesmith.model import loader, schemas
from imagesmith.model.ref import ImageRef

SCHEMA = schemas.FLEET_REPORT
STATUSES = ("pass", "fail", "cancelled")


@dataclass(frozen=True)
class Figure:
    """One measured figure against the class's baseline (verify/baselines.json)."""

    check: str
    value: float
    unit: str
    baseline: float | None
    percent: float | None
    status: str


@dataclass(frozen=True)
class CellResult:
    ref: str  # host/repo@sha256:...
    klass: str
    scheduler: str
    status: str  # pass | fail | cancelled
    reason: str
    tier: str = "quick"
    job_id: str | None = None
    state: str = ""
    node: str = ""
    restarts: int = 0
    queued_s: float | None = None
    ran_s: float | None = None
    report: str | None = None  # the cell's verify report, relative to the fleet report
    summary: Mapping[str, int] = field(default_factory=dict)
    failed_checks: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    figures: tuple[Figure, ...] = ()
    statement: str | None = None  # its signed statement (fleet verify --verifier-key), relative to the fleet report

    @property
    def digest(self) -> str:
        return str(ImageRef.parse(self.ref).digest)

    @property
    def ok(self) -> bool:
        return self.status == "pass"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["class"] = out.pop("klass")
        out["digest"] = self.digest
        return out


@dataclass(frozen=True)
class FleetReport:
    fleet_file: str
    run_id: str
    tier: str
    started_at: str
    requires: tuple[str, ...]
    cells: tuple[CellResult, ...]
    wall_s: float = 0.0
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return not self.interrupted and all(c.ok for c in self.cells)

    def digests(self) -> list[str]:
        return list(dict.fromkeys(c.digest for c in self.cells))

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "ok": self.ok, "fleet_file": self.fleet_file, "run_id": self.run_id, "tier": self.tier,
                "started_at": self.started_at, "wall_s": round(self.wall_s, 2), "interrupted": self.interrupted,
                "requires": list(self.requires), "cells": [c.to_json() for c in self.cells]}


def write(report: FleetReport, path: Path) -> Path:
    write_json(path, report.to_json())
    return path


# -- reading (untrusted) ---------------------------------------------------------------------------


FIX = "give the fleet-report.json that imagesmith fleet verify wrote"


def load(path: Path, root: Path | None = None) -> FleetReport:
    """A fleet report through :mod:`imagesmith.model.loader` (confined, bounded, strict JSON, schema
    fleet-report-1), then every value checked."""
    return parse(loader.load_json_artifact(path, root=root, schema=SCHEMA, fix=FIX), str(path))


class _Field:
    """Typed reads of one JSON object; a wrong type names the file and field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, why: str) -> UserError:
        return UserError(f"{self.source}: {where}: {why}; write it again with imagesmith fleet verify")

    def get(self, d: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str, default: Any = None) -> Any:
        value = d.get(key, default)
        if value is None and default is None:  # an optional field, absent or null
            return None
        if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, float, (int, float))):
            raise self.fail(f"{where}.{key}", f"expected {getattr(kind, '__name__', 'a number')}, got {type(value).__name__}")
        return value


def parse(doc: Any, source: str = "fleet-report.json") -> FleetReport:
    f = _Field(source)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise UserError(f"{source}: schema {found!r} is not {SCHEMA}; give the fleet-report.json that fleet verify wrote")
    cells = f.get(doc, "cells", list, "report", [])
    return FleetReport(
        fleet_file=str(f.get(doc, "fleet_file", str, "report", "")), run_id=str(f.get(doc, "run_id", str, "report", "")),
        tier=str(f.get(doc, "tier", str, "report", "quick")), started_at=str(f.get(doc, "started_at", str, "report", "")),
        requires=tuple(_strings(f, doc, "requires", "report")), wall_s=float(f.get(doc, "wall_s", (int, float), "report", 0)),
        interrupted=bool(f.get(doc, "interrupted", bool, "report", False)),
        cells=tuple(_cell(f, c, f"cells[{i}]") for i, c in enumerate(cells)),
    )


def _strings(f: _Field, d: Mapping[str, Any], key: str, where: str) -> list[str]:
    items = f.get(d, key, list, where, [])
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise f.fail(f"{where}.{key}[{i}]", f"expected a string, got {type(item).__name__}")
    return list(items)


def _cell(f: _Field, c: Any, where: str) -> CellResult:
    if not isinstance(c, dict):
        raise f.fail(where, f"expected an object, got {type(c).__name__}")
    status = f.get(c, "status", str, where, "")
    if status not in STATUSES:
        raise f.fail(f"{where}.status", f"{status!r} is not one of {', '.join(STATUSES)}")
    ref = f.get(c, "ref", str, where, "")
    parsed = ImageRef.maybe(ref)
    if parsed is None or not parsed.pinned:
        raise f.fail(f"{where}.ref", f"{ref!r} is not pinned by digest")
    return CellResult(
        ref=ref, klass=f.get(c, "class", str, where, ""), scheduler=f.get(c, "scheduler", str, where, ""), status=status,
        reason=f.get(c, "reason", str, where, ""), tier=f.get(c, "tier", str, where, "quick"),
        job_id=f.get(c, "job_id", str, where), state=f.get(c, "state", str, where, ""), node=f.get(c, "node", str, where, ""),
        restarts=int(f.get(c, "restarts", int, where, 0)), queued_s=_num(f, c, "queued_s", where),
        ran_s=_num(f, c, "ran_s", where), report=f.get(c, "report", str, where),
        statement=f.get(c, "statement", str, where),
        summary={k: v for k, v in f.get(c, "summary", dict, where, {}).items() if isinstance(v, int)},
        failed_checks=tuple(_strings(f, c, "failed_checks", where)), gpus=tuple(_strings(f, c, "gpus", where)),
        figures=tuple(_figure(f, x, f"{where}.figures[{i}]") for i, x in enumerate(f.get(c, "figures", list, where, []))),
    )


def _num(f: _Field, d: Mapping[str, Any], key: str, where: str) -> float | None:
    value = f.get(d, key, (int, float), where) if d.get(key) is not None else None
    return float(value) if value is not None else None


def _figure(f: _Field, x: Any, where: str) -> Figure:
    if not isinstance(x, dict):
        raise f.fail(where, f"expected an object, got {type(x).__name__}")
    return Figure(check=f.get(x, "check", str, where, ""), value=float(f.get(x, "value", (int, float), where, 0)),
                  unit=f.get(x, "unit", str, where, ""), baseline=_num(f, x, "baseline", where),
                  percent=_num(f, x, "percent", where), status=f.get(x, "status", str, where, ""))


# -- from one verify report ----------------------------------------------------------------------------


def figures_of(report: Mapping[str, Any]) -> tuple[Figure, ...]:
    """Every check of a verify report that was measured against a baseline."""
    out = []
    for c in report.get("checks") or []:
        value, percent = c.get("value"), c.get("percent_of_baseline")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and percent is not None:
            baseline = c.get("baseline")
            base = baseline.get("value") if isinstance(baseline, dict) else baseline
            out.append(Figure(str(c.get("id")), float(value), str(c.get("unit") or ""),
                              float(base) if isinstance(base, (int, float)) else None, float(percent), str(c.get("status"))))
    return tuple(out)


def gpu_names(report: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(g.get("name")) for g in (report.get("environment") or {}).get("gpus") or [] if isinstance(g, dict))
