"""The publish gate: a floating tag moves to a digest only when every class
the rule requires passed for that digest, and otherwise says which class
held it back. Pure: publish calls :meth:`FleetGate.held_back` per released image.

A fleet report is a file another job wrote, so nothing in it decides
(:func:`load_gate`):

* **the rule** (the required classes, and each class's GPU model and count) comes from
  what the operator passes: the fleet file (``--fleet``), else the trust policy's
  ``fleet`` section; never from a report's ``requires``. Without either, fleet
  evidence moves no floating tag (a UserError naming the options);
* **the evidence** is each cell judged again from its signed statement (:func:`believed`):
  signed by a verifier the policy names for the cell's class, about that digest and
  class, for a fleet run the operator named (``--fleet-run``, or one since the last run accepted:
  ``--fleet-run-since``), no older than the
  policy's max_age, and passing again on the class's GPUs;
* **the order** is the signed time: among the believed results of one digest and
  class the newest by the verifier's ``signed_at`` wins (a fail on a tie), never by a
  report's ``started_at`` or the order of cells. A result that cannot be believed
  (unsigned, forged, about another class or image) is never outvoted: it holds the
  tag back. A genuine result of a run not named, or one too old, is left out, and
  said only when nothing else is left.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from imagesmith.errors import UsageError, UserError
from imagesmith.model import fleet as config
from imagesmith.model import fleetreport as fleet_report
from imagesmith.model.fleet import GpuClass
from imagesmith.model.fleetreport import CellResult
from imagesmith.model.ref import ImageRef
from imagesmith.stages.evidence import trust
from imagesmith.stages.fleet.runner import judge_report

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # runner.run_id() and fleet verify --run-id
SIGNED, REFUSED, LEFT_OUT, NO_VERDICT = "signed", "refused", "left out", "no verdict"
NEEDS_RULE = ("floating tags move on fleet evidence only against a rule the operator gives: --fleet fleet.yaml, or a "
              "fleet section (require, classes) in the trust policy; a fleet report's own requires is not believed")
NEEDS_RUN = ("name the fleet run(s) whose signed results count: --fleet-run RUN (fleet verify prints its run and "
             "--run-id sets it), or --fleet-run-since RUN; a fleet report's own run_id is not believed")


@dataclass(frozen=True)
class Runs:
    """The fleet runs whose signed results count: those named (``--fleet-run``), and any run whose id sorts at or after
    ``since`` (``--fleet-run-since``, the last run accepted: fleet verify's own ids begin with their UTC start time)."""

    names: tuple[str, ...] = ()
    since: str | None = None

    def __bool__(self) -> bool:
        return bool(self.names or self.since)

    def count(self, run: str | None) -> bool:
        return run is not None and (run in self.names or (self.since is not None and run >= self.since))

    def describe(self) -> str:
        named = [f"{', '.join(self.names)} (--fleet-run)"] if self.names else []
        return " or ".join(named + ([f"a run since {self.since} (--fleet-run-since)"] if self.since else []))


@dataclass(frozen=True)
class Result:
    """One cell as the gate believes it: ``kind`` says whether its verdict counts (signed), can never be outvoted
    (refused), was left out (a run not named, too old), or carries none (cancelled before it reported)."""

    cell: CellResult
    kind: str = SIGNED
    signed_at: dt.datetime | None = None  # None: a test's unsigned cell, ordered by its place

    @property
    def reason(self) -> str:
        return self.cell.reason


@dataclass(frozen=True)
class FleetGate:
    requires: tuple[str, ...]
    results: tuple[Result, ...]
    fleet_file: str = "fleet.yaml"

    @classmethod
    def of(cls, requires: Sequence[str], cells: Sequence[CellResult], fleet_file: str = "fleet.yaml") -> "FleetGate":
        """A gate over cells taken as written (no policy: the later of two cells wins)."""
        return cls(tuple(requires), tuple(Result(c) for c in cells), fleet_file)

    @property
    def cells(self) -> tuple[CellResult, ...]:
        return tuple(r.cell for r in self.results)

    def held_back(self, digest: str | None) -> str | None:
        """None when every required class passed for ``digest``; else why, naming each class."""
        why = [self._why(klass, digest or "") for klass in self.requires]
        found = [w for w in why if w]
        return "held back by the fleet: " + "; ".join(found) if found else None

    def _why(self, klass: str, digest: str) -> str | None:
        mine = [(i, r) for i, r in enumerate(self.results) if r.cell.digest == digest and r.cell.klass == klass]
        refused = [r for _, r in mine if r.kind == REFUSED]
        if refused:  # a result that cannot be believed is never outvoted by another
            return f"class {klass} failed: {refused[-1].reason}"
        signed = [(i, r) for i, r in mine if r.kind == SIGNED]
        if signed:
            _, last = max(signed, key=lambda ir: (ir[1].signed_at or dt.datetime.min.replace(tzinfo=dt.timezone.utc),
                                                  ir[0] if ir[1].signed_at is None else 0, not ir[1].cell.ok))
            return None if last.cell.ok else f"class {klass} {'failed' if last.cell.status == 'fail' else last.cell.status}: {last.reason}"
        other = [r for _, r in mine if r.kind in (NO_VERDICT, LEFT_OUT)]
        if other:
            return f"class {klass} {'cancelled' if other[-1].kind == NO_VERDICT else 'has no result that counts'}: {other[-1].reason}"
        return (f"class {klass} has no fleet result for {digest[:19]} "
                f"(imagesmith fleet verify --fleet {self.fleet_file} REF@{digest[:19]}...)")


def load_gate(fleet_file: Path | None, reports: Sequence[Path], policy: trust.TrustPolicy | None = None,
              runs: Sequence[str] = (), now: dt.datetime | None = None, since: str | None = None) -> FleetGate | None:
    """The gate for ``publish --fleet F --fleet-report R... --fleet-run RUN...``; None when no fleet option is given.
    With ``policy`` (publish always has one) every cell is judged again from its signed statement (:func:`believed`),
    and the rule, the runs and the order come from what the operator passed (see the module docstring)."""
    named = Runs(tuple(runs), since)
    if fleet_file is None and not reports and not named:
        return None
    for option, run in [("--fleet-run", r) for r in runs] + ([("--fleet-run-since", since)] if since is not None else []):
        if not RUN_ID.fullmatch(run):
            raise UsageError(f"{option} {run[:80]!r}: not a fleet run id (letters, digits, '.', '_', '-'; e.g. "
                             f"20261130T101500Z-1a2b3c)")
    if named and not reports:
        raise UsageError("--fleet-run names a fleet run, but no --fleet-report gives its results")
    fleet = config.load(fleet_file) if fleet_file is not None else None
    requires, classes, name = _rule(fleet, fleet_file, reports, policy)
    loaded = [(fleet_report.load(p), p) for p in reports]
    if policy is None:
        return FleetGate.of(requires, [c for r, _ in loaded for c in r.cells], name)
    if reports and not named:
        raise UserError(f"{', '.join(map(str, reports))}: {NEEDS_RUN}")
    when = now or dt.datetime.now(dt.timezone.utc)
    results = tuple(believed(c, path.parent, policy, classes.get(c.klass), named, when) for r, path in loaded for c in r.cells)
    return FleetGate(requires, results, name)


def _rule(fleet: config.Fleet | None, fleet_file: Path | None, reports: Sequence[Path],
          policy: trust.TrustPolicy | None) -> tuple[tuple[str, ...], dict[str, GpuClass], str]:
    """(required classes, each class's GPUs, the file that says so): the fleet file's, else the trust policy's."""
    if fleet is not None:
        return fleet.require, {k.name: k for k in fleet.classes}, str(fleet_file)
    if policy is not None and policy.require:
        classes = {c.name: GpuClass(c.name, c.gpus, c.gpu, platform=c.platform) for c in policy.classes}
        return policy.require, classes, "fleet.yaml"
    raise UserError(f"{', '.join(map(str, reports)) or '--fleet-run'}: {NEEDS_RULE}")


def believed(cell: CellResult, root: Path, policy: trust.TrustPolicy, klass: GpuClass | None, runs: Runs = Runs(),
             now: dt.datetime | None = None) -> Result:
    """``cell`` as its signed statement (a file under ``root``, the fleet report's folder) says it went: it counts only
    when signed by a verifier ``policy`` names for the cell's class, about this digest and class, for one of ``runs``
    (when given), no older than the policy's max_age, and its report passes again on ``klass``'s GPUs."""
    def refused(why: str) -> Result:
        return Result(replace(cell, status="fail", reason=why), REFUSED)

    if cell.status == "cancelled" and cell.statement is None:
        return Result(cell, NO_VERDICT)
    if cell.statement is None:
        return refused(f"its result is not signed; run imagesmith fleet verify --verifier-key KEY with a key "
                       f"{policy.file} names for class {cell.klass}")
    expected = trust.Subject(ImageRef.parse(cell.ref).name, cell.digest)
    try:
        got = trust.read_statement(root / cell.statement, policy, expected, root=root, now=now)
    except trust.Expired as exc:
        return Result(replace(cell, status="fail", reason=f"its signed result is too old: {exc}"), LEFT_OUT)
    except UserError as exc:
        return refused(f"its signed result is refused: {exc}")
    if not got.vouches_for(cell.klass):
        return refused(f"its result is signed by verifier {got.verifier}, whom {policy.file} trusts only for class(es) "
                       f"{', '.join(got.classes)}")
    if got.fleet_class != cell.klass:
        return refused(f"its signed result is about class {got.fleet_class or '(none)'}, not {cell.klass}")
    if runs and not runs.count(got.fleet_run):
        return Result(replace(cell, status="fail", reason=f"its signed result is of fleet run {got.fleet_run or '(none)'}, "
                                                          f"not of {runs.describe()}"), LEFT_OUT)
    if klass is None:
        return refused(f"class {cell.klass} is not described by the rule (its GPU model and count): add it to the "
                       f"fleet file or the trust policy's fleet.classes")
    problems = judge_report(cell.digest, klass, got.report)
    verdict = replace(cell, status="fail", reason=f"signed by {got.verifier}: " + "; ".join(problems)) if problems else \
        replace(cell, status="pass", reason=f"signed by {got.verifier}: every required check passed")
    return Result(verdict, SIGNED, got.signed_at)
