"""The publish gate: a floating tag moves to a digest only when every class
the fleet file requires passed for that digest, and otherwise says which
class held it back. The rule (the required classes) comes from the fleet
file when one is given, else from the fleet reports themselves; the
evidence from the fleet reports (the newest result of each digest x class
wins). Pure: publish calls :meth:`FleetGate.held_back` per released image.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from imagesmith.errors import UserError
from imagesmith.stages.fleet import config
from imagesmith.stages.fleet import report as fleet_report
from imagesmith.stages.fleet.report import CellResult


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


def load_gate(fleet_file: Path | None, reports: Sequence[Path]) -> FleetGate | None:
    """The gate for ``publish --fleet F --fleet-report R...``; None when neither is given."""
    if fleet_file is None and not reports:
        return None
    loaded = sorted((fleet_report.load(p) for p in reports), key=lambda r: r.started_at)
    if fleet_file is not None:
        requires, name = config.load(fleet_file).require, str(fleet_file)
    else:
        requires = tuple(dict.fromkeys(k for r in loaded for k in r.requires))
        name = loaded[-1].fleet_file or "fleet.yaml"
        if not requires:
            raise UserError(f"{', '.join(map(str, reports))}: the fleet reports name no required class; give --fleet fleet.yaml")
    return FleetGate(requires, tuple(c for r in loaded for c in r.cells), name)
