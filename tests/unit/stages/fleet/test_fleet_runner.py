"""The fleet runner, step by step, with a scripted scheduler and a fake clock:
every way a job can end is a clear cell, and nothing waits forever."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import pytest

from imagesmith.errors import UserError
from imagesmith.model import fleet as config
from imagesmith.model import fleetreport as fleet_report
from imagesmith.model.fleetreport import CellResult, FleetReport
from imagesmith.model.loader import LoadError
from imagesmith.model.ref import ImageRef
from imagesmith.model.verifyreport import VerifyReport
from imagesmith.stages.fleet import runner
from imagesmith.stages.fleet.jobs import ENDED, FINISHED, GONE, PENDING, RUNNING, CellJob, JobView
from tests.doubles import verify_report

DIGEST = "sha256:" + "ab" * 32
REF = config.parse_ref(f"127.0.0.1:5000/ml/pytorch@{DIGEST}")
FLEET = """\
classes:
  a:
    gpus: 0
    slurm: {partition: p, time_limit: 10m, start_deadline: 5m, max_requeues: %(requeues)s}
"""


def good_report(ok: bool = True, digest: str = DIGEST, gpus: Sequence[str] = ()) -> dict[str, Any]:
    checks = [{"id": "versions.torch", "status": "pass" if ok else "fail"},
              {"id": "gemm.bf16", "status": "pass", "value": 771.2, "unit": "TFLOP/s", "baseline": 784.0, "percent_of_baseline": 98.4}]
    return {"schema": "imagesmith.verify-report/1", "summary": {"ok": ok, "pass": 1 + ok, "warn": 0, "fail": int(not ok), "skip": 0},
            "checks": checks, "image": {"digests": [f"127.0.0.1:5000/ml/pytorch@{digest}"]},
            "environment": {"gpus": [{"name": n} for n in gpus]}}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Scripted:
    """A scheduler whose jobs follow a script of views, one per poll (the last repeats)."""

    name = "slurm"

    def __init__(self, script: list[tuple[str, str]], report: dict[str, Any] | None = None, restarts: list[int] | None = None,
                 refuse: str | None = None, after_cancel: str = "CANCELLED") -> None:
        self.script, self.report_doc, self.restarts, self.refuse = script, report, restarts or [], refuse
        self.after_cancel = after_cancel
        self.polls: dict[str, int] = {}
        self.cancelled: list[str] = []
        self.submitted: list[CellJob] = []

    def submit(self, job: CellJob) -> str:
        if self.refuse:
            raise UserError(self.refuse)
        self.submitted.append(job)
        job_id = str(100 + len(self.submitted))
        self.polls[job_id] = 0
        return job_id

    def status(self, job_ids: Sequence[str]) -> dict[str, JobView]:
        out = {}
        for j in job_ids:
            if j in self.cancelled:
                out[j] = JobView(j, ENDED if self.after_cancel == "CANCELLED" else RUNNING, self.after_cancel)
                continue
            i = min(self.polls[j], len(self.script) - 1)
            self.polls[j] += 1
            phase, state = self.script[i]
            restarts = self.restarts[min(i, len(self.restarts) - 1)] if self.restarts else 0
            out[j] = JobView(j, phase, state, "Resources" if phase == PENDING else "", restarts, "node1", "1:0" if state == "FAILED" else "0:0")
        return out

    def cancel(self, job_ids: Sequence[str]) -> None:
        self.cancelled += list(job_ids)

    def report(self, job: CellJob, view: JobView) -> VerifyReport | None:
        """The scripted report, read as the real schedulers read one: a report the parse refuses is no report."""
        try:
            return None if self.report_doc is None else verify_report(self.report_doc)
        except LoadError:
            return None

    def output_tail(self, job: CellJob, view: JobView, lines: int = 5) -> list[str]:
        return ["pulling 127.0.0.1:5000/ml/pytorch", "Killed"]


def run(tmp_path: Path, scheduler: Scripted, requeues: int = 0, fleet_text: str = FLEET,
        refs: Sequence[ImageRef] = (REF,)) -> tuple[FleetReport, list[str], Clock]:
    path = tmp_path / "fleet.yaml"
    path.write_text(fleet_text % {"requeues": requeues})
    fleet = config.load(path)
    clock, lines = Clock(), list[str]()
    jobs = runner.cell_jobs(fleet, refs, tmp_path / "out", "run1", None)
    rep = runner.FleetRun(jobs, {"slurm": scheduler}, tmp_path / "out", fleet, lines.append, poll_s=5,
                          clock=clock, sleep=clock.sleep, grace_s=60, cancel_wait_s=30).run()
    return rep, lines, clock


def only(rep: FleetReport) -> CellResult:
    (cell,) = rep.cells
    return cell


def test_a_job_that_passes(tmp_path: Path) -> None:
    sched = Scripted([(PENDING, "PENDING"), (RUNNING, "RUNNING"), (RUNNING, "RUNNING"), (FINISHED, "COMPLETED")], good_report())
    rep, lines, _ = run(tmp_path, sched)
    cell = only(rep)
    assert cell.status == "pass" and cell.reason == "every required check passed" and cell.state == "COMPLETED"
    assert (cell.queued_s, cell.ran_s) == (10.0, 10.0) and cell.job_id == "101" and cell.node == "node1"
    assert cell.figures[0].check == "gemm.bf16" and cell.figures[0].percent == 98.4 and cell.figures[0].baseline == 784.0
    assert cell.report == "abababababab/a/verify.json" and json.loads((tmp_path / "out" / cell.report).read_text())["summary"]["ok"]
    assert lines[0] == "a abababababab: submitted to slurm as 101"
    assert lines[1:] == ["a abababababab: 101 PENDING (Resources)", "a abababababab: 101 RUNNING on node1",
                         "a abababababab: 101 COMPLETED", "a abababababab: PASS: every required check passed"]
    saved = json.loads((tmp_path / "out" / "fleet-report.json").read_text())
    assert saved["schema"] == "imagesmith.fleet-report/1" and saved["ok"] is True and saved["requires"] == ["a"]


CASES = [
    # (script, report, restarts, requeues, expected status, reason starts with)
    ([(RUNNING, "RUNNING"), (FINISHED, "FAILED")], good_report(ok=False), None, 0, "fail", "failed checks: versions.torch"),
    ([(RUNNING, "RUNNING"), (FINISHED, "COMPLETED")], good_report(digest="sha256:" + "cd" * 32), None, 0, "fail",
     "the job verified 127.0.0.1:5000/ml/pytorch@sha256:cdcd"),
    ([(RUNNING, "RUNNING"), (ENDED, "TIMEOUT")], None, None, 0, "fail",
     "Slurm stopped the job at its time limit (10m00s) before it wrote a report; last output: pulling 127.0.0.1:5000/ml/pytorch | Killed"),
    ([(RUNNING, "RUNNING"), (ENDED, "CANCELLED by 0")], None, None, 0, "fail",
     "the job was cancelled outside imagesmith (scancel, an administrator, a reservation) before it wrote a report"),
    ([(RUNNING, "RUNNING"), (ENDED, "NODE_FAIL")], None, None, 0, "fail", "the node failed while the job ran"),
    ([(RUNNING, "RUNNING"), (ENDED, "OUT_OF_MEMORY")], None, None, 0, "fail", "the job ran out of memory; raise the class's mem:"),
    ([(RUNNING, "RUNNING"), (FINISHED, "FAILED")], None, None, 0, "fail",
     "the job ended (FAILED, exit status 1) without a verify report; last output: pulling 127.0.0.1:5000/ml/pytorch | Killed"),
    ([(RUNNING, "RUNNING"), (GONE, "UNKNOWN")], None, None, 0, "fail",
     "the scheduler no longer knows the job (it left the queue without accounting) and it left no report"),
    ([(RUNNING, "RUNNING"), (GONE, "UNKNOWN")], good_report(), None, 0, "pass", "every required check passed"),
    # killed mid-run: the report `verify --json` started says running, and is no result
    ([(RUNNING, "RUNNING"), (FINISHED, "FAILED")], good_report() | {"state": "running"}, None, 0, "fail",
     "the job ended (FAILED, exit status 1) without a verify report (the verify report it started is running); last output"),
    ([(RUNNING, "RUNNING"), (PENDING, "PENDING"), (RUNNING, "RUNNING")], None, [0, 1], 0, "fail",
     "preempted: the scheduler requeued the job 1 time(s) and the class allows 0 (max_requeues)"),
    ([(RUNNING, "RUNNING"), (PENDING, "PENDING"), (RUNNING, "RUNNING"), (FINISHED, "COMPLETED")], good_report(), [0, 1], 1,
     "pass", "every required check passed (requeued (1 of 1 allowed))"),
]


@pytest.mark.parametrize("script, report, restarts, requeues, status, reason", CASES)
def test_every_end_is_a_clear_cell(tmp_path: Path, script: list[tuple[str, str]], report: dict[str, Any] | None,
                                   restarts: list[int] | None, requeues: int, status: str, reason: str) -> None:
    sched = Scripted(script, report, restarts)
    cell = only(run(tmp_path, sched, requeues)[0])
    assert (cell.status, cell.reason[:len(reason)]) == (status, reason), cell.reason
    assert sched.cancelled == (["101"] if reason.startswith("preempted") else [])


def test_a_job_that_never_starts_is_cancelled_at_the_start_deadline(tmp_path: Path) -> None:
    sched = Scripted([(PENDING, "PENDING")])
    rep, _, clock = run(tmp_path, sched)
    cell = only(rep)
    assert cell.status == "fail" and sched.cancelled == ["101"] and cell.ran_s is None
    assert cell.reason == ("never started: still pending after 5m05s (Resources); the class's start_deadline is 5m00s: "
                           "check the partition, constraint and node state (sinfo), or raise start_deadline")
    assert 300 < clock.now < 400  # bounded by the deadline, in polls of the fake clock


def test_a_job_that_overruns_its_limit_is_cancelled_after_the_grace(tmp_path: Path) -> None:
    sched = Scripted([(RUNNING, "RUNNING")])
    cell = only(run(tmp_path, sched)[0])
    assert cell.status == "fail" and sched.cancelled == ["101"]
    assert cell.reason == "still running 11m05s after start, past its time limit 10m00s and 1m00s of grace; cancelled"


def test_a_refused_submission_is_a_failed_cell_and_the_rest_goes_on(tmp_path: Path) -> None:
    sched = Scripted([(FINISHED, "COMPLETED")], good_report(), refuse="sbatch refused the job: Invalid partition name specified")
    cell = only(run(tmp_path, sched)[0])
    assert cell.status == "fail" and cell.job_id is None
    assert cell.reason == "not submitted: sbatch refused the job: Invalid partition name specified"


def test_one_job_per_digest_and_class(tmp_path: Path) -> None:
    other = config.parse_ref(f"127.0.0.1:5000/ml/pytorch@sha256:{'cd' * 32}")
    two = FLEET + "  b:\n    gpus: 0\n    tier: standard\n    slurm: {partition: q}\n"
    sched = Scripted([(FINISHED, "COMPLETED")], good_report())
    rep, _, _ = run(tmp_path, sched, fleet_text=two, refs=(REF, other, REF))
    assert [(j.ref.sha256[7:9], j.klass.name, j.tier) for j in sched.submitted] == [
        ("ab", "a", "quick"), ("ab", "b", "standard"), ("cd", "a", "quick"), ("cd", "b", "standard")]
    assert [c.status for c in rep.cells] == ["pass", "pass", "fail", "fail"]  # the report names sha256:abab..., not cdcd...


def test_ctrl_c_cancels_every_live_job_and_writes_the_report(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET % {"requeues": 0} + "  b:\n    gpus: 0\n    slurm: {partition: q}\n")
    fleet = config.load(path)
    sched = Scripted([(RUNNING, "RUNNING")])
    clock, polls = Clock(), []

    def sleep(seconds: float) -> None:
        polls.append(seconds)
        clock.sleep(seconds)
        if len(polls) == 3:
            raise KeyboardInterrupt

    jobs = runner.cell_jobs(fleet, [REF], tmp_path / "out", "run1", None)
    with pytest.raises(runner.Interrupted) as stop:
        runner.FleetRun(jobs, {"slurm": sched}, tmp_path / "out", fleet, poll_s=5, clock=clock, sleep=sleep).run()
    assert sorted(sched.cancelled) == ["101", "102"] and stop.value.cancelled == ["101", "102"]
    assert [(c.status, c.reason) for c in stop.value.report.cells] == [
        ("cancelled", "interrupted (Ctrl-C): 101 cancelled"), ("cancelled", "interrupted (Ctrl-C): 102 cancelled")]
    saved = json.loads((tmp_path / "out" / "fleet-report.json").read_text())
    assert saved["interrupted"] is True and saved["ok"] is False


def test_a_job_still_running_after_cancel_is_named_not_waited_for_forever(tmp_path: Path) -> None:
    sched = Scripted([(PENDING, "PENDING")], after_cancel="RUNNING")
    rep, lines, _ = run(tmp_path, sched)
    assert only(rep).status == "fail"
    assert lines[-1] == ("a abababababab: 101 was cancelled but is still shown as running after 30s; "
                         "check it with squeue / kubectl get jobs")


@pytest.mark.parametrize("klass, gpus, problems", [
    ("gpus: 0", [], []),
    ("gpus: 2\n    gpu: NVIDIA H200", ["NVIDIA H200", "NVIDIA H200"], []),
    ("gpus: 2\n    gpu: NVIDIA H200", ["NVIDIA H200"], ["the job saw 1 GPU(s); the class promises 2"]),
    ("gpus: 1\n    gpu: NVIDIA H200", [], ["the job saw 0 GPU(s); the class promises 1"]),
    ("gpus: 1\n    gpu: NVIDIA H200", ["NVIDIA L40S"], ["the job ran on NVIDIA L40S, not the class's NVIDIA H200: check the placement"]),
])
def test_the_gpus_a_job_saw_must_be_the_class(tmp_path: Path, klass: str, gpus: list[str], problems: list[str]) -> None:
    fleet = config.parse(f"classes:\n  a:\n    {klass}\n    slurm: {{partition: p}}\n", tmp_path / "fleet.yaml")
    (job,) = runner.cell_jobs(fleet, [REF], tmp_path, "r", None)
    assert runner.judge(job, verify_report(good_report(gpus=gpus))) == problems


@pytest.mark.parametrize("change, problems", [
    ({}, []),
    ({"summary": {"ok": True}, "checks": [{"id": "versions.torch", "status": "fail"}]}, ["failed checks: versions.torch"]),
    ({"summary": {"ok": True}, "checks": [{"id": "versions.torch", "status": "fail", "optional": True}]},
     ["failed checks: required check failed: versions.torch"]),  # optional only where the shipped registry says so
    ({"summary": {"ok": True}, "checks": []}, ["failed checks: the report lists no checks"]),
])
def test_a_cell_is_judged_from_its_checks_not_its_summary(tmp_path: Path, change: dict[str, Any], problems: list[str]) -> None:
    fleet = config.parse("classes:\n  a:\n    gpus: 0\n    slurm: {partition: p}\n", tmp_path / "fleet.yaml")
    (job,) = runner.cell_jobs(fleet, [REF], tmp_path, "r", None)
    assert runner.judge(job, verify_report(good_report() | change)) == problems


def test_unknown_classes_are_refused(tmp_path: Path) -> None:
    fleet = config.parse(FLEET % {"requeues": 0}, tmp_path / "fleet.yaml")
    with pytest.raises(UserError, match=r"--class h100: not in fleet.yaml; classes: a"):
        runner.cell_jobs(fleet, [REF], tmp_path, "r", None, classes=("h100",))


def test_a_failing_cancel_is_said_and_the_run_still_ends(tmp_path: Path) -> None:
    class Stubborn(Scripted):
        def cancel(self, job_ids: Sequence[str]) -> None:
            raise UserError("scancel did not answer in 60 s: is slurmctld up? (scontrol ping)")

    sched = Stubborn([(PENDING, "PENDING")])
    rep, lines, _ = run(tmp_path, sched)
    assert only(rep).reason.startswith("never started: still pending after 5m05s")
    assert "a abababababab: cancelling 101 failed: scancel did not answer in 60 s: is slurmctld up? (scontrol ping)" in lines
    assert lines[-1].endswith("was cancelled but is still shown as running after 30s; check it with squeue / kubectl get jobs")


def test_a_scheduler_that_does_not_answer_is_no_news_until_the_deadline(tmp_path: Path) -> None:
    class Silent(Scripted):
        def status(self, job_ids: Sequence[str]) -> dict[str, JobView]:
            raise UserError("squeue failed: Unable to contact slurm controller")

    rep, lines, clock = run(tmp_path, Silent([(PENDING, "PENDING")]))
    assert only(rep).reason.startswith("never started: still pending after 5m05s;")
    assert "slurm: squeue failed: Unable to contact slurm controller" in lines and clock.now < 400


@pytest.mark.parametrize("code, text", [("0:9", "killed by signal 9"), ("1:0", "exit status 1"), ("137", "exit status 137"),
                                        ("", "exit status unknown"), ("2:15", "killed by signal 15")])
def test_exit_text(code: str, text: str) -> None:
    assert runner.exit_text(code) == text


def test_a_second_ctrl_c_does_not_stop_the_cancels(tmp_path: Path) -> None:
    class Impatient(Scripted):
        def cancel(self, job_ids: Sequence[str]) -> None:
            if not self.cancelled and not getattr(self, "hit", False):
                self.hit = True
                raise KeyboardInterrupt  # the user pressed Ctrl-C again while scancel ran
            super().cancel(job_ids)

    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET % {"requeues": 0})
    fleet = config.load(path)
    sched, clock = Impatient([(RUNNING, "RUNNING")]), Clock()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.now >= 15:
            raise KeyboardInterrupt

    jobs = runner.cell_jobs(fleet, [REF], tmp_path / "out", "run1", None)
    with pytest.raises(runner.Interrupted):
        runner.FleetRun(jobs, {"slurm": sched}, tmp_path / "out", fleet, poll_s=5, clock=clock, sleep=sleep).run()
    assert sched.cancelled == ["101"]


FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "reports"


def test_a_real_two_h200_report_is_judged_against_the_class_and_its_baseline(tmp_path: Path) -> None:
    real = json.loads((FIXTURES / "h200x2-standard.json").read_text())  # measured on 2 x H200 (bench/results)
    h200 = config.parse("classes:\n  h200:\n    gpu: NVIDIA H200\n    gpus: 2\n    slurm: {partition: p}\n", tmp_path / "f.yaml")
    (job,) = runner.cell_jobs(h200, [REF], tmp_path, "r", None)
    assert runner.judge(job, verify_report(real)) == []
    figures = {f.check: f for f in fleet_report.figures_of(verify_report(real))}
    assert figures["gemm.bf16"].baseline == 784.0 and figures["gemm.bf16"].percent is not None and figures["gemm.bf16"].percent > 90
    l40s = config.parse("classes:\n  l40s:\n    gpu: NVIDIA L40S\n    gpus: 4\n    slurm: {partition: p}\n", tmp_path / "g.yaml")
    (job,) = runner.cell_jobs(l40s, [REF], tmp_path, "r", None)
    assert runner.judge(job, verify_report(real)) == ["the job saw 2 GPU(s); the class promises 4"]
