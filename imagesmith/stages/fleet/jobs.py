"""What the runner and the schedulers share: one cell's job, its observed
state in scheduler-neutral words, and the seam a scheduler implements."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from imagesmith.model.fleet import GpuClass
from imagesmith.model.ref import ImageRef
from imagesmith.model.verifyreport import VerifyReport

# Phases, whatever the scheduler calls them:
PENDING = "pending"  # accepted, not started (queued, requeued, image pulling, unschedulable)
RUNNING = "running"
FINISHED = "finished"  # the job's command ended by itself: a report is expected
ENDED = "ended"  # ended from outside: time limit, cancelled, node failure, preempted, out of memory
GONE = "gone"  # the scheduler no longer knows the job
PHASES = (PENDING, RUNNING, FINISHED, ENDED, GONE)


@dataclass(frozen=True)
class CellJob:
    """One (digest x class): what to verify, where, and the folder its files go to."""

    ref: ImageRef
    klass: GpuClass
    tier: str
    workdir: Path  # absolute; on a filesystem the nodes share (Slurm)
    run_id: str
    credentials: Path | None = None

    @property
    def key(self) -> str:
        return f"{self.ref.sha256}/{self.klass.name}"

    @property
    def short(self) -> str:
        return f"{self.klass.name} {self.ref.sha256[7:19]}"


@dataclass(frozen=True)
class JobView:
    """A job as the scheduler reports it now."""

    job_id: str
    phase: str
    state: str  # the scheduler's own word: PENDING, TIMEOUT, BackoffLimitExceeded...
    reason: str = ""
    restarts: int = 0
    node: str = ""
    exit_code: str = ""


class Scheduler(Protocol):
    """Submit, observe, cancel and collect jobs of one scheduler."""

    name: str

    def submit(self, job: CellJob) -> str: ...
    def status(self, job_ids: Sequence[str]) -> dict[str, JobView]: ...
    def cancel(self, job_ids: Sequence[str]) -> None: ...
    def report(self, job: CellJob, view: JobView) -> VerifyReport | None: ...
    def output_tail(self, job: CellJob, view: JobView, lines: int = 5) -> list[str]: ...
