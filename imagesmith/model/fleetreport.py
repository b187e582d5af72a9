"""The fleet report (``imagesmith.fleet-report/1``): one cell per digest x class.

Written by ``fleet verify`` (atomically), read back by ``publish`` (the floating-tag gate), ``imagesmith report``
(Markdown, JUnit, HTML: one row per class) and the metrics: one typed value in ``model/``, like the verify report.
Reading treats the file as untrusted: every field is checked and a bad one is a UserError naming the file and the
field.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from imagesmith.atomic import write_json
from imagesmith.errors import UserError
from imagesmith.model import fields, loader, schemas
from imagesmith.model.ref import ImageRef
from imagesmith.model.verifyreport import VerifyReport

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


_READ = fields.Wording(kind=fields.type_name, not_number="expected a number, got {kind}")


def _fields(source: str) -> fields.Fields:
    return fields.Fields(source, "write it again with imagesmith fleet verify", _READ)


def parse(doc: Any, source: str = "fleet-report.json") -> FleetReport:
    f = _fields(source)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise UserError(f"{source}: schema {found!r} is not {SCHEMA}; give the fleet-report.json that fleet verify wrote")
    cells = f.typed(doc, "cells", list, "report", [])
    return FleetReport(
        fleet_file=str(f.typed(doc, "fleet_file", str, "report", "")), run_id=str(f.typed(doc, "run_id", str, "report", "")),
        tier=str(f.typed(doc, "tier", str, "report", "quick")), started_at=str(f.typed(doc, "started_at", str, "report", "")),
        requires=tuple(f.strings(doc, "requires", "report")), wall_s=float(f.typed(doc, "wall_s", (int, float), "report", 0)),
        interrupted=bool(f.typed(doc, "interrupted", bool, "report", False)),
        cells=tuple(_cell(f, c, f"cells[{i}]") for i, c in enumerate(cells)),
    )


def _cell(f: fields.Fields, raw: Any, where: str) -> CellResult:
    c = f.mapping(raw, where)
    status = f.typed(c, "status", str, where, "")
    if status not in STATUSES:
        raise f.fail(f"{where}.status", f"{status!r} is not one of {', '.join(STATUSES)}")
    ref = f.typed(c, "ref", str, where, "")
    parsed = ImageRef.maybe(ref)
    if parsed is None or not parsed.pinned:
        raise f.fail(f"{where}.ref", f"{ref!r} is not pinned by digest")
    return CellResult(
        ref=ref, klass=f.typed(c, "class", str, where, ""), scheduler=f.typed(c, "scheduler", str, where, ""), status=status,
        reason=f.typed(c, "reason", str, where, ""), tier=f.typed(c, "tier", str, where, "quick"),
        job_id=f.typed(c, "job_id", str, where), state=f.typed(c, "state", str, where, ""), node=f.typed(c, "node", str, where, ""),
        restarts=int(f.typed(c, "restarts", int, where, 0)), queued_s=f.number(c, "queued_s", where),
        ran_s=f.number(c, "ran_s", where), report=f.typed(c, "report", str, where),
        statement=f.typed(c, "statement", str, where),
        summary={k: v for k, v in f.typed(c, "summary", dict, where, {}).items() if isinstance(v, int)},
        failed_checks=tuple(f.strings(c, "failed_checks", where)), gpus=tuple(f.strings(c, "gpus", where)),
        figures=tuple(_figure(f, x, f"{where}.figures[{i}]") for i, x in enumerate(f.typed(c, "figures", list, where, []))),
    )


def _figure(f: fields.Fields, raw: Any, where: str) -> Figure:
    x = f.mapping(raw, where)
    return Figure(check=f.typed(x, "check", str, where, ""), value=float(f.typed(x, "value", (int, float), where, 0)),
                  unit=f.typed(x, "unit", str, where, ""), baseline=f.number(x, "baseline", where),
                  percent=f.number(x, "percent", where), status=f.typed(x, "status", str, where, ""))


# -- from one verify report ----------------------------------------------------------------------------


def figures_of(report: VerifyReport) -> tuple[Figure, ...]:
    """Every check of a verify report that was measured against a baseline."""
    return tuple(Figure(c.id, float(c.value), c.unit, None if c.baseline is None else float(c.baseline),
                        float(c.percent_of_baseline), c.status)
                 for c in report.checks if fields.is_number(c.value) and c.percent_of_baseline is not None)


def gpu_names(report: VerifyReport) -> tuple[str, ...]:
    return tuple(str(g.name) for g in report.environment.gpus)
