"""The publish gate: a floating tag moves to a digest only when every class
the fleet file requires passed for that digest, and otherwise says which
class held it back. The rule (the required classes) comes from the fleet
file when one is given, else from the fleet reports themselves; the
evidence from the fleet reports (the newest result of each digest x class
wins). Pure: publish calls :meth:`FleetGate.held_back` per released image.

A fleet report is a file another job wrote, so with the release's trust policy
(publish and build --push always have one) its ``status`` is not believed:
:func:`believed` judges each cell again from its signed statement (``fleet
verify --verifier-key``). A cell passes only when a verifier the policy names
signed it, the policy lets that verifier vouch for the cell's class, the
statement names that class and that digest, and its report passes again under
the shipped policy on the class's GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from imagesmith.errors import UserError
from imagesmith.model.ref import ImageRef
from imagesmith.stages import trust
from imagesmith.stages.fleet import config
from imagesmith.stages.fleet import report as fleet_report
from imagesmith.stages.fleet.config import GpuClass
from imagesmith.stages.fleet.report import CellResult
from imagesmith.stages.fleet.runner import judge_report


@dataclass(frozen=True)
class FleetGate:
    requires: tuple[str, ...]
    cells: tuple[CellResult, ...]  # oldest report first
    fleet_file: str = "fleet.yaml"

    def held_back(self, digest: str | None) -> str | None:
        """None when every required class passed for ``digest``; else why, naming each class."""
        why = [self._why(klass, digest or "") for klass in self.requires]
        found = [w for w in why if w]
        return "held back by the fleet: " + "; ".join(found) if found else None

    def _why(self, klass: str, digest: str) -> str | None:
        mine = [c for c in self.cells if c.digest == digest and c.klass == klass]
        if not mine:
            return (f"class {klass} has no fleet result for {digest[:19]} "
                    f"(imagesmith fleet verify --fleet {self.fleet_file} REF@{digest[:19]}...)")
        last = mine[-1]
        return None if last.ok else f"class {klass} {'failed' if last.status == 'fail' else last.status}: {last.reason}"


def load_gate(fleet_file: Path | None, reports: Sequence[Path], policy: trust.TrustPolicy | None = None) -> FleetGate | None:
    """The gate for ``publish --fleet F --fleet-report R...``; None when neither is given. With ``policy`` every
    cell is judged again from its signed statement (:func:`believed`)."""
    if fleet_file is None and not reports:
        return None
    loaded = sorted(((fleet_report.load(p), p) for p in reports), key=lambda r: r[0].started_at)
    fleet = config.load(fleet_file) if fleet_file is not None else None
    if fleet is not None:
        requires, name = fleet.require, str(fleet_file)
    else:
        requires = tuple(dict.fromkeys(k for r, _ in loaded for k in r.requires))
        name = loaded[-1][0].fleet_file or "fleet.yaml"
        if not requires:
            raise UserError(f"{', '.join(map(str, reports))}: the fleet reports name no required class; give --fleet fleet.yaml")
    classes = {k.name: k for k in fleet.classes} if fleet is not None else {}
    cells = tuple(c if policy is None else believed(c, path.parent, policy, classes.get(c.klass))
                  for r, path in loaded for c in r.cells)
    return FleetGate(requires, cells, name)


def believed(cell: CellResult, root: Path, policy: trust.TrustPolicy, klass: GpuClass | None) -> CellResult:
    """``cell`` as its signed statement (a file under ``root``, the fleet report's folder) says it went: pass only
    when signed by a verifier ``policy`` names for the cell's class, about this digest and class, and its report
    passes again (on ``klass``'s GPUs when the fleet file is known); else fail, saying why."""
    def failed(why: str) -> CellResult:
        return replace(cell, status="fail", reason=why)

    if cell.status == "cancelled" and cell.statement is None:
        return cell
    if cell.statement is None:
        return failed(f"its result is not signed; run imagesmith fleet verify --verifier-key KEY with a key "
                      f"{policy.file} names for class {cell.klass}")
    expected = trust.Subject(ImageRef.parse(cell.ref).name, cell.digest)
    try:
        got = trust.read_statement(root / cell.statement, policy, expected, root=root)
    except UserError as exc:
        return failed(f"its signed result is refused: {exc}")
    if not got.vouches_for(cell.klass):
        return failed(f"its result is signed by verifier {got.verifier}, whom {policy.file} trusts only for class(es) "
                      f"{', '.join(got.classes)}")
    if got.fleet_class != cell.klass:
        return failed(f"its signed result is about class {got.fleet_class or '(none)'}, not {cell.klass}")
    problems = judge_report(cell.digest, klass, got.report)
    if problems:
        return failed(f"signed by {got.verifier}: " + "; ".join(problems))
    return replace(cell, status="pass", reason=f"signed by {got.verifier}: every required check passed")
