"""The fleet run: one job per (digest x class), followed to a verdict.

Every cell ends as pass, fail or cancelled, never a hang: a job still pending
after its class's ``start_deadline`` is cancelled and fails; a running job
past its time limit (plus a grace for the scheduler to act) is cancelled and
fails; a job requeued (preempted) more often than ``max_requeues`` is
cancelled and fails; a job that ends without a verify report (time limit,
cancelled from outside, killed, node failure, out of memory) fails with the
scheduler's word for it and its last output lines. Ctrl-C (or SIGTERM)
cancels every job still queued or running and waits, bounded, until the
scheduler has let them go.

Clock, sleep and the schedulers are constructor parameters, so tests drive
the loop step by step with doubles and never judge by wall time.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from imagesmith import runstate
from imagesmith.atomic import write_json, write_text
from imagesmith.edges.signing import Key
from imagesmith.errors import UserError
from imagesmith.model import fleetreport as fleet_report
from imagesmith.model import policy
from imagesmith.model.fleet import Fleet, GpuClass
from imagesmith.model.fleetreport import CellResult, FleetReport
from imagesmith.model.ref import ImageRef
from imagesmith.model.verifyreport import VerifyReport
from imagesmith.stages.evidence import trust
from imagesmith.stages.fleet.jobs import ENDED, FINISHED, GONE, PENDING, RUNNING, CellJob, JobView, Scheduler
from imagesmith.stages.verify.verify import declared_checks

REPORT_NAME = "fleet-report.json"
GRACE_S = 180.0  # after a time limit: how long the scheduler gets to stop the job itself
CANCEL_WAIT_S = 90.0  # after scancel / delete: how long we wait for the job to be gone
WHY_ENDED = {
    "TIMEOUT": "Slurm stopped the job at its time limit ({limit}) before it wrote a report",
    "CANCELLED": "the job was cancelled outside imagesmith (scancel, an administrator, a reservation) before it wrote a report",
    "NODE_FAIL": "the node failed while the job ran",
    "PREEMPTED": "the job was preempted and not requeued",
    "OUT_OF_MEMORY": "the job ran out of memory; raise the class's mem:",
    "BOOT_FAIL": "the node did not boot for the job",
    "DEADLINE": "the job reached its Slurm deadline",
    "DeadlineExceeded": "Kubernetes stopped the Job at its deadline ({limit}) before it wrote a report",
    "Evicted": "the pod was evicted (node pressure or preemption)",
    "DisruptionTarget": "the pod was preempted or its node drained",
    "OOMKilled": "the container ran out of memory; raise the class's memory:",
}


def run_id() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def cell_jobs(fleet: Fleet, refs: Sequence[ImageRef], out: Path, rid: str, tier: str | None,
              classes: Sequence[str] = (), credentials: Path | None = None) -> list[CellJob]:
    """One job per (digest x class); the tier: the class's own, else --tier, else the fleet file's."""
    chosen = [c for c in fleet.classes if not classes or c.name in classes]
    unknown = sorted(set(classes) - {c.name for c in fleet.classes})
    if unknown:
        raise UserError(f"--class {', '.join(unknown)}: not in {fleet.file.name}; classes: {', '.join(c.name for c in fleet.classes)}")
    out = out.resolve()
    return [CellJob(ref, k, k.tier or tier or fleet.tier, out / ref.sha256[7:19] / k.name, rid,
                    credentials.resolve() if credentials else None) for ref in dict.fromkeys(refs) for k in chosen]


@dataclass
class Cell:
    job: CellJob
    scheduler: Scheduler
    job_id: str | None = None
    view: JobView | None = None
    submitted: float = 0.0
    waiting_since: float = 0.0  # entered pending (again)
    started: float | None = None
    result: CellResult | None = None
    cancelled: bool = False
    notes: list[str] = field(default_factory=list)


class Interrupted(Exception):
    """Ctrl-C: the jobs were cancelled; the report is complete as far as it goes."""

    def __init__(self, report: FleetReport, cancelled: list[str]) -> None:
        super().__init__("interrupted")
        self.report, self.cancelled = report, cancelled


class FleetRun:
    def __init__(self, jobs: Sequence[CellJob], schedulers: Mapping[str, Scheduler], out: Path, fleet: Fleet,
                 on_event: Callable[[str], None] = lambda line: None, poll_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 grace_s: float = GRACE_S, cancel_wait_s: float = CANCEL_WAIT_S, signer: Key | None = None) -> None:
        self.cells = [Cell(j, schedulers[j.klass.scheduler]) for j in jobs]
        self.signer = signer  # the verifier key: every judged report is signed for its digest and class
        self.out, self.fleet, self.say, self.poll_s = out.resolve(), fleet, on_event, poll_s
        self.clock, self.sleep, self.grace_s, self.cancel_wait_s = clock, sleep, grace_s, cancel_wait_s
        self.started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        self.t0 = clock()

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> FleetReport:
        try:
            for cell in self.cells:
                self._submit(cell)
            while self._active():
                self.sleep(self.poll_s)
                self._poll()
            self._drain()
        except KeyboardInterrupt:
            cancelled = self._interrupt()
            raise Interrupted(self._write(interrupted=True), cancelled) from None
        return self._write(interrupted=False)

    def _active(self) -> list[Cell]:
        return [c for c in self.cells if c.result is None]

    def _submit(self, cell: Cell) -> None:
        now = self.clock()
        try:
            cell.job_id = cell.scheduler.submit(cell.job)
        except UserError as exc:
            self._finish(cell, "fail", f"not submitted: {exc}")
            return
        cell.submitted = cell.waiting_since = now
        self.say(f"{cell.job.short}: submitted to {cell.scheduler.name} as {cell.job_id}")

    def _poll(self) -> None:
        by_scheduler: dict[str, list[Cell]] = {}
        for cell in self._active():
            by_scheduler.setdefault(cell.scheduler.name, []).append(cell)
        for cells in by_scheduler.values():
            try:
                views = cells[0].scheduler.status([c.job_id for c in cells if c.job_id])
            except UserError as exc:  # the scheduler did not answer: no news, the deadlines still run
                self.say(f"{cells[0].scheduler.name}: {exc}")
                views = {}
            for cell in cells:
                self._advance(cell, views.get(cell.job_id or ""), self.clock())

    # -- one cell --------------------------------------------------------------------------------
    def _advance(self, cell: Cell, view: JobView | None, now: float) -> None:
        if view is not None:
            self._observe(cell, view, now)
        if cell.result is None:
            self._check_deadlines(cell, now)

    def _observe(self, cell: Cell, view: JobView, now: float) -> None:
        before, cell.view = cell.view, view
        if before is None or (before.state, before.reason, before.restarts) != (view.state, view.reason, view.restarts):
            self.say(f"{cell.job.short}: {cell.job_id} {view.state}" + (f" ({view.reason})" if view.reason else "")
                     + (f" on {view.node}" if view.phase == RUNNING and view.node else ""))
        if view.restarts > (before.restarts if before else 0):
            self._requeued(cell, view, now)
        elif view.phase == RUNNING and cell.started is None:
            cell.started = now
        elif view.phase == PENDING and before is not None and before.phase != PENDING:
            cell.waiting_since, cell.started = now, None
        if cell.result is None and view.phase in (FINISHED, ENDED, GONE):
            self._ended(cell, view, now)

    def _requeued(self, cell: Cell, view: JobView, now: float) -> None:
        allowed = cell.job.klass.slurm.max_requeues if cell.job.klass.slurm else 0
        if view.restarts > allowed:
            self._cancel(cell, f"preempted: the scheduler requeued the job {view.restarts} time(s) and the class allows "
                               f"{allowed} (max_requeues); it did not finish on one allocation")
            return
        cell.notes.append(f"requeued ({view.restarts} of {allowed} allowed)")
        cell.waiting_since, cell.started = now, None

    def _check_deadlines(self, cell: Cell, now: float) -> None:
        k = cell.job.klass
        phase = cell.view.phase if cell.view else PENDING
        if phase == PENDING and now - cell.waiting_since > k.start_deadline_s:
            why = f" ({cell.view.reason})" if cell.view and cell.view.reason else ""
            self._cancel(cell, f"never started: still pending after {_dur(now - cell.waiting_since)}{why}; "
                               f"the class's start_deadline is {_dur(k.start_deadline_s)}: check the partition, "
                               f"constraint and node state (sinfo), or raise start_deadline")
        elif phase == RUNNING and cell.started is not None and now - cell.started > k.run_limit_s + self.grace_s:
            self._cancel(cell, f"still running {_dur(now - cell.started)} after start, past its time limit "
                               f"{_dur(k.run_limit_s)} and {_dur(self.grace_s)} of grace; cancelled")

    def _ended(self, cell: Cell, view: JobView, now: float) -> None:
        report = cell.scheduler.report(cell.job, view) if view.phase in (FINISHED, GONE) else None
        if report is not None and runstate.is_complete(report.to_json()):
            self._judge(cell, report, now)
            return
        why = WHY_ENDED.get(view.state.split()[0] if view.state else "", "")
        if view.phase == GONE:
            why = "the scheduler no longer knows the job (it left the queue without accounting) and it left no report"
        elif not why:
            why = f"the job ended ({view.state}, {exit_text(view.exit_code)}) without a verify report"
        if report is not None:  # killed mid-run: the report it started says so, and is no result
            why += f" (the verify report it started is {runstate.state_of(report.to_json())})"
        tail = cell.scheduler.output_tail(cell.job, view)
        self._finish(cell, "fail", why.format(limit=_dur(cell.job.klass.run_limit_s))
                     + (f"; last output: {' | '.join(tail)}" if tail else ""))

    def _judge(self, cell: Cell, report: VerifyReport, now: float) -> None:
        path = cell.job.workdir / "verify.json"
        write_json(path, report.to_json())
        unsigned = self._sign(cell, report) if self.signer is not None else None
        problems = judge(cell.job, report) + ([unsigned] if unsigned else [])
        self._finish(cell, "fail" if problems else "pass", "; ".join(problems) or "every required check passed", report)

    def _sign(self, cell: Cell, report: VerifyReport) -> str | None:
        """WORKDIR/verify.dsse.json: the report, signed for this digest, class and run (publish believes only that);
        why not, for a report the verifier does not sign."""
        assert self.signer is not None
        job, view = cell.job, cell.view
        context = {"class": job.klass.name, "run_id": job.run_id, "scheduler": job.klass.scheduler,
                   "job_id": cell.job_id or "", "node": view.node if view else ""}
        subject = trust.Subject(job.ref.name, job.ref.sha256)
        try:
            signed = trust.sign(report, None, subject, self.signer, context)
        except trust.Unsignable as exc:
            return str(exc)
        write_text(job.workdir / trust.STATEMENT_FILE, signed.decode() + "\n")
        return None

    def _cancel(self, cell: Cell, reason: str) -> None:
        if cell.job_id:
            self._send_cancel(cell)
        self._finish(cell, "fail", reason)

    def _cancel_together(self, cells: list[Cell]) -> None:
        for name in dict.fromkeys(c.scheduler.name for c in cells):
            mine = [c for c in cells if c.scheduler.name == name]
            try:
                mine[0].scheduler.cancel([c.job_id or "" for c in mine])
            except UserError as exc:
                self.say(f"{name}: cancelling {', '.join(c.job_id or '' for c in mine)} failed: {exc}")
            for cell in mine:
                cell.cancelled = True

    def _send_cancel(self, cell: Cell) -> None:
        try:
            cell.scheduler.cancel([cell.job_id or ""])
        except UserError as exc:  # said, and the drain below still watches the job
            self.say(f"{cell.job.short}: cancelling {cell.job_id} failed: {exc}")
        cell.cancelled = True

    def _finish(self, cell: Cell, status: str, reason: str, report: VerifyReport | None = None) -> None:
        now, v = self.clock(), cell.view
        cell.result = CellResult(
            ref=str(cell.job.ref), klass=cell.job.klass.name, scheduler=cell.job.klass.scheduler, status=status,
            reason=reason + (f" ({'; '.join(cell.notes)})" if cell.notes else ""), tier=cell.job.tier, job_id=cell.job_id,
            state=v.state if v else "", node=v.node if v else "", restarts=v.restarts if v else 0,
            queued_s=round((cell.started or now) - cell.submitted, 1) if cell.job_id else None,
            ran_s=round(now - cell.started, 1) if cell.started is not None else None,
            report=str((cell.job.workdir / "verify.json").relative_to(self.out)) if report else None,
            statement=str((cell.job.workdir / trust.STATEMENT_FILE).relative_to(self.out))
            if report and self.signer is not None and (cell.job.workdir / trust.STATEMENT_FILE).is_file() else None,
            summary=_counts(report.summary.to_json()) if report else {},
            failed_checks=tuple(policy.failed_required(report)) if report else (),
            gpus=fleet_report.gpu_names(report) if report else (), figures=fleet_report.figures_of(report) if report else ())
        self.say(f"{cell.job.short}: {status.upper()}: {reason}")

    # -- the end -------------------------------------------------------------------------------------
    def _interrupt(self) -> list[str]:
        live = [c for c in self.cells if c.job_id and (c.result is None or c.cancelled)]
        todo = [c for c in live if c.result is None]
        while todo:  # one cancel per scheduler; a second Ctrl-C does not stop the cancels
            try:
                self._cancel_together(todo)
                todo = []
            except KeyboardInterrupt:
                todo = [c for c in todo if not c.cancelled]
        for cell in live:
            if cell.result is None:
                self._finish(cell, "cancelled", f"interrupted (Ctrl-C): {cell.job_id} cancelled")
        try:
            self._drain()
        except KeyboardInterrupt:  # a second Ctrl-C: the cancels were sent, stop waiting
            pass
        return [c.job_id or "" for c in live]

    def _drain(self) -> None:
        """Wait (bounded) until every job we cancelled has left the queue and stopped running."""
        deadline = self.clock() + self.cancel_wait_s
        waiting = [c for c in self.cells if c.cancelled]
        while waiting and self.clock() < deadline:
            views: dict[str, JobView] = {}
            for name in {c.scheduler.name for c in waiting}:
                mine = [c for c in waiting if c.scheduler.name == name]
                views |= self._status_or_unknown(mine)
            waiting = [c for c in waiting if views.get(c.job_id or "", JobView("", GONE, "")).phase in (PENDING, RUNNING)]
            if waiting:
                self.sleep(min(self.poll_s, 2.0))
        for cell in waiting:
            self.say(f"{cell.job.short}: {cell.job_id} was cancelled but is still shown as running after "
                     f"{_dur(self.cancel_wait_s)}; check it with squeue / kubectl get jobs")

    @staticmethod
    def _status_or_unknown(cells: list[Cell]) -> dict[str, JobView]:
        """Status while draining; a scheduler that does not answer keeps the jobs in the waiting list."""
        try:
            return cells[0].scheduler.status([c.job_id or "" for c in cells])
        except UserError:
            return {c.job_id or "": JobView(c.job_id or "", RUNNING, "UNKNOWN") for c in cells}

    def _write(self, interrupted: bool) -> FleetReport:
        cells = tuple(c.result or _never_submitted(c) for c in self.cells)
        report = FleetReport(fleet_file=str(self.fleet.file), run_id=self.cells[0].job.run_id if self.cells else "",
                             tier=self.cells[0].job.tier if self.cells else self.fleet.tier, started_at=self.started_at,
                             requires=self.fleet.require, cells=cells, wall_s=self.clock() - self.t0, interrupted=interrupted)
        fleet_report.write(report, self.out / REPORT_NAME)
        return report


def _never_submitted(cell: Cell) -> CellResult:
    return CellResult(ref=str(cell.job.ref), klass=cell.job.klass.name, scheduler=cell.job.klass.scheduler,
                      status="cancelled", reason="interrupted before it was submitted", tier=cell.job.tier)


def _counts(summary: Mapping[str, Any] | None) -> dict[str, int]:
    """A report's summary as written, its whole-number counts only (its ``ok`` is no count)."""
    return {k: int(x) for k, x in (summary or {}).items() if isinstance(x, int) and not isinstance(x, bool)}


def judge(job: CellJob, report: VerifyReport) -> list[str]:
    """Why a cell with a report fails: failed checks, another image, the wrong GPUs."""
    return judge_report(job.ref.sha256, job.klass, report)


def judge_report(digest: str, klass: GpuClass | None, report: VerifyReport) -> list[str]:
    """Why a report of ``digest`` on ``klass`` (None: the class is not known here) does not pass; [] when it does."""
    problems = []
    verdict = policy.verdict(report, declared_checks())  # judged again from the checks, never from summary.ok
    if not verdict.ok:
        failed = policy.failed_required(report)
        problems.append(f"failed checks: {', '.join(failed) or verdict.why}")
    digests = report.image.digests if report.image else ()
    if digests and not any(str(d).endswith("@" + digest) for d in digests):
        problems.append(f"the job verified {', '.join(map(str, digests))}, not {digest}")
    if klass is not None:
        problems += gpu_problems(klass, fleet_report.gpu_names(report)) + platform_problems(klass, report)
    return problems


def platform_problems(klass: GpuClass, report: VerifyReport) -> list[str]:
    """A class's runs are native on its platform: an emulated run, or one on another machine, does not count."""
    emulated = policy.emulation_text(report.emulation)
    if emulated:
        return [f"the job ran emulated ({emulated}); a fleet class verifies natively on its {klass.platform.docker} nodes"]
    machine = report.environment.machine
    if machine and machine != klass.platform.uname:
        return [f"the job ran on {machine}, not on the class's {klass.platform.docker} ({klass.platform.uname}): "
                "check the placement"]
    return []


def gpu_problems(klass: GpuClass, names: Sequence[str]) -> list[str]:
    if klass.gpus == 0:
        return []
    if len(names) < klass.gpus:
        return [f"the job saw {len(names)} GPU(s); the class promises {klass.gpus}"]
    wrong = sorted({n for n in names if klass.gpu and n != klass.gpu})
    return [f"the job ran on {', '.join(wrong)}, not the class's {klass.gpu}: check the placement"] if wrong else []


def exit_text(code: str) -> str:
    """Slurm's ``status:signal`` (``0:9``, ``1:0``) or a plain exit status, in words."""
    status, sep, signal = code.partition(":")
    if sep and signal not in ("", "0"):
        return f"killed by signal {signal}"
    return f"exit status {status}" if status else "exit status unknown"


def _dur(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"

