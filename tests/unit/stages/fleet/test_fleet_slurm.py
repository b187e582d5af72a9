"""Slurm job rendering (argv, batch script) and parsing of squeue/sacct, as tables;
the batch script is parsed back with shlex so no value can become a second word."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Sequence

import pytest

from imagesmith.errors import UserError
from imagesmith.model import fleet as config
from imagesmith.stages.fleet import runner, slurm
from imagesmith.stages.fleet.jobs import ENDED, FINISHED, GONE, PENDING, RUNNING, CellJob, JobView

DIGEST = "sha256:" + "ab" * 32
REF = config.parse_ref(f"harbor.example.com/ml/pytorch@{DIGEST}")
ENV = {"PATH": "/usr/bin", "HOME": "/root", "IMAGESMITH_REGISTRY_PASSWORD": "s3cret", "DOCKER_HOST": "unix:///x.sock"}


def job_for(klass: str, tmp: Path = Path("/shared/out"), credentials: Path | None = None, tier: str = "quick") -> CellJob:
    fleet = config.parse(f"classes:\n  h200:\n{klass}", Path("/f/fleet.yaml"))
    return CellJob(REF, fleet.classes[0], tier, tmp / "abababababab" / "h200", "run1", credentials)


GPU = "    gpu: NVIDIA H200\n    gpus: 8\n    slurm: {partition: gpu-h200, account: ml, qos: high, constraint: 'h200&nvlink', gres_type: h200, time_limit: 30m, cpus_per_task: 32, mem: 256G}\n"
CPU = "    gpus: 0\n    slurm: {partition: fleet-a, time_limit: 10s}\n"


@pytest.mark.parametrize("klass, expected", [
    (GPU, ["sbatch", "--parsable", "--job-name=imagesmith-h200-abababababab", "--partition=gpu-h200", "--nodes=1", "--ntasks=1",
           "--time=0-00:30:00", "--requeue", "--chdir=/shared/out/abababababab/h200",
           "--output=/shared/out/abababababab/h200/job-%j.out", "--open-mode=append", "--comment=imagesmith-run=run1",
           "--account=ml", "--qos=high", "--constraint=h200&nvlink", "--cpus-per-task=32", "--mem=256G", "--gres=gpu:h200:8",
           "--export=PATH,HOME,DOCKER_HOST", "/shared/out/abababababab/h200/job.sh"]),
    (CPU, ["sbatch", "--parsable", "--job-name=imagesmith-h200-abababababab", "--partition=fleet-a", "--nodes=1", "--ntasks=1",
           "--time=0-00:00:10", "--requeue", "--chdir=/shared/out/abababababab/h200",
           "--output=/shared/out/abababababab/h200/job-%j.out", "--open-mode=append", "--comment=imagesmith-run=run1",
           "--export=PATH,HOME,DOCKER_HOST", "/shared/out/abababababab/h200/job.sh"]),
])
def test_sbatch_argv(klass: str, expected: list[str]) -> None:
    assert slurm.sbatch_argv(job_for(klass), ENV) == expected  # secrets in the environment are not exported


def test_a_gpu_class_runs_verify_on_the_allocated_gpus_and_requires_them() -> None:
    script = slurm.render_script(job_for(GPU, credentials=Path("/shared/robot.cred")), "/opt/imagesmith/bin/imagesmith")
    last = script.splitlines()[-1]
    assert last == ("exec /opt/imagesmith/bin/imagesmith verify harbor.example.com/ml/pytorch@" + DIGEST
                    + " --tier quick --timeout 1620 --require-gpu --credentials /shared/robot.cred"
                    + ' --gpus "${SLURM_JOB_GPUS:-all}" --json "report-${SLURM_RESTART_COUNT:-0}.json"')
    assert script.startswith("#!/bin/bash\n# imagesmith fleet verify: class h200, run run1\n")


def test_a_cpu_class_runs_verify_in_cpu_mode() -> None:
    last = slurm.render_script(job_for(CPU), "/venv/bin/imagesmith").splitlines()[-1]
    assert shlex.split(last) == ["exec", "/venv/bin/imagesmith", "verify", str(REF), "--tier", "quick", "--timeout", "10",
                                 "--gpus", "none", "--json", "report-${SLURM_RESTART_COUNT:-0}.json"]


def test_podman_runs_through_its_socket() -> None:
    script = slurm.render_script(job_for("    gpus: 0\n    slurm: {partition: p, runtime: podman}\n"), "/x/imagesmith")
    assert "export DOCKER_HOST=unix:///run/podman/podman.sock\n" in script


def test_pyxis_runs_the_payload_inside_the_image() -> None:
    job = job_for("    gpus: 1\n    gpu: NVIDIA H200\n    slurm: {partition: p, runtime: pyxis}\n")
    assert shlex.split(slurm.render_script(job, "/x/imagesmith").splitlines()[-1]) == [
        "exec", "srun", f"--container-image=harbor.example.com#ml/pytorch@{DIGEST}",
        "--container-mounts=/shared/out/abababababab/h200/payload:/opt/imagesmith/verify:ro", "--no-container-mount-home",
        "python3", "/opt/imagesmith/verify/run.py", "--config", "/opt/imagesmith/verify/config.json", "--emit-marker"]


def test_a_folder_with_spaces_and_quotes_stays_one_word(tmp_path: Path) -> None:
    odd = tmp_path / "it's a $(dir)"
    script = slurm.render_script(job_for(CPU, odd, credentials=odd / "cred"), str(odd / "imagesmith"))
    words = shlex.split(script.splitlines()[-1])
    assert words[1] == str(odd / "imagesmith") and words[words.index("--credentials") + 1] == str(odd / "cred")


@pytest.mark.parametrize("seconds, text", [(10, "0-00:00:10"), (1800, "0-00:30:00"), (93784, "1-02:03:04"), (0, "0-00:00:01")])
def test_slurm_time(seconds: int, text: str) -> None:
    assert slurm.slurm_time(seconds) == text


@pytest.mark.parametrize("limit, timeout", [(10, 10), (60, 30), (1800, 1620), (7200, 6480)])
def test_verify_times_out_inside_the_slurm_limit(limit: int, timeout: int) -> None:
    assert slurm.verify_timeout_s(limit) == timeout


SQUEUE = """\
12|PENDING|ReqNodeNotAvail, UnavailableNodes:ghost|0||0|
13|RUNNING|None|0|imagesmith-node|0|
14|COMPLETED|None|0|imagesmith-node|0|
15|TIMEOUT|TimeLimit|0|imagesmith-node|15|
16|PENDING|BeginTime|1||0|
17|FAILED|NonZeroExitCode|0|imagesmith-node|1|
18|CANCELLED|None|0|imagesmith-node|0:9|
garbage line
"""


def test_parse_squeue() -> None:
    views = slurm.parse_squeue(SQUEUE)
    assert views == {
        "12": JobView("12", PENDING, "PENDING", "ReqNodeNotAvail, UnavailableNodes:ghost", 0, "", "0"),
        "13": JobView("13", RUNNING, "RUNNING", "", 0, "imagesmith-node", "0"),
        "14": JobView("14", FINISHED, "COMPLETED", "", 0, "imagesmith-node", "0"),
        "15": JobView("15", ENDED, "TIMEOUT", "TimeLimit", 0, "imagesmith-node", "15"),
        "16": JobView("16", PENDING, "PENDING", "BeginTime", 1, "", "0"),
        "17": JobView("17", FINISHED, "FAILED", "NonZeroExitCode", 0, "imagesmith-node", "1"),
        "18": JobView("18", ENDED, "CANCELLED", "", 0, "imagesmith-node", "0:9"),
    }


def test_parse_sacct() -> None:
    text = "20|COMPLETED|0:0|node1\n21|CANCELLED by 0|0:15|node1\n22|NODE_FAIL|1:0|node2\n"
    assert {k: (v.phase, v.state) for k, v in slurm.parse_sacct(text).items()} == {
        "20": (FINISHED, "COMPLETED"), "21": (ENDED, "CANCELLED"), "22": (ENDED, "NODE_FAIL")}


class FakeSlurm:
    """sbatch/squeue/sacct/scancel answers, recorded."""

    def __init__(self, answers: dict[str, tuple[int, str, str]]) -> None:
        self.answers, self.calls = answers, []  # type: ignore[var-annotated]

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        key = argv[0] + ("" if argv[0] != "squeue" else ":" + next(a for a in argv if a.startswith("--jobs=")))
        code, out, err = self.answers.get(key, self.answers.get(argv[0], (0, "", "")))
        return subprocess.CompletedProcess(list(argv), code, out, err)


def test_submit_writes_the_script_and_returns_the_job_id(tmp_path: Path) -> None:
    fake = FakeSlurm({"sbatch": (0, "4242\n", "")})
    job = job_for(CPU, tmp_path)
    assert slurm.Slurm(fake, ENV, "/venv/bin/imagesmith").submit(job) == "4242"
    script = (job.workdir / "job.sh").read_text()
    assert script.splitlines()[-1].startswith("exec /venv/bin/imagesmith verify ") and (job.workdir / "job.sh").stat().st_mode & 0o111
    assert fake.calls[0][-1] == str(job.workdir / "job.sh")


def test_a_refused_submission_says_what_sbatch_said(tmp_path: Path) -> None:
    fake = FakeSlurm({"sbatch": (1, "", "sbatch: error: Batch job submission failed: Invalid partition name specified\n")})
    with pytest.raises(UserError, match=r"^sbatch refused the job: sbatch: error: Batch job submission failed: Invalid partition name specified$"):
        slurm.Slurm(fake, ENV).submit(job_for(CPU, tmp_path))


def test_status_asks_one_by_one_when_a_job_is_unknown_then_accounting() -> None:
    fake = FakeSlurm({"squeue:--jobs=1,2": (1, "", "slurm_load_jobs error: Invalid job id specified"),
                      "squeue:--jobs=1": (0, "1|RUNNING|None|0|n|0|\n", ""),
                      "squeue:--jobs=2": (1, "", "slurm_load_jobs error: Invalid job id specified"),
                      "sacct": (1, "", "Slurm accounting storage is disabled")})
    views = slurm.Slurm(fake, ENV).status(["1", "2"])
    assert {k: v.phase for k, v in views.items()} == {"1": RUNNING, "2": GONE}
    assert [c[0] for c in fake.calls] == ["squeue", "squeue", "squeue", "sacct"]


def test_an_unreachable_controller_is_no_news_not_a_lost_job() -> None:
    fake = FakeSlurm({"squeue": (1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)")})
    with pytest.raises(UserError, match=r"^squeue failed: slurm_load_jobs error: Unable to contact slurm controller"):
        slurm.Slurm(fake, ENV).status(["1"])


def test_missing_slurm_commands_are_a_user_error(tmp_path: Path) -> None:
    def missing(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(argv[0])

    with pytest.raises(UserError, match=r"^sbatch is not installed here: fleet verify submits Slurm jobs"):
        slurm.Slurm(missing, ENV).submit(job_for(CPU, tmp_path))


def test_the_report_of_the_last_attempt_is_read(tmp_path: Path) -> None:
    job = job_for(CPU, tmp_path)
    job.workdir.mkdir(parents=True)
    (job.workdir / "report-0.json").write_text('{"schema": "imagesmith.verify-report/1", "checks": [], "summary": {"ok": false}}')
    (job.workdir / "report-1.json").write_text('{"schema": "imagesmith.verify-report/1", "checks": [], "summary": {"ok": true}}')
    s = slurm.Slurm(FakeSlurm({}), ENV)
    read = s.report(job, JobView("7", FINISHED, "COMPLETED", restarts=1))
    assert read is not None and read.to_json() == {"schema": "imagesmith.verify-report/1", "checks": [], "summary": {"ok": True}}
    (job.workdir / "report-1.json").write_text('{"schema": "imagesmith.verify-report/1", "checks": [], "summary": {"ok": NaN}}')
    assert s.report(job, JobView("7", FINISHED, "COMPLETED", restarts=1)) is None  # refused by the loader: no report
    # schema-valid, but a value the parse refuses (a check that is not one): no report either
    (job.workdir / "report-1.json").write_text('{"schema": "imagesmith.verify-report/1", "checks": [{"id": "a", "status": "passed"}]}')
    assert s.report(job, JobView("7", FINISHED, "COMPLETED", restarts=1)) is None
    assert s.report(job, JobView("7", FINISHED, "COMPLETED", restarts=2)) is None
    (job.workdir / "job-7.out").write_text("a\n\nb\nc\n")
    assert s.output_tail(job, JobView("7", FINISHED, "FAILED"), 2) == ["b", "c"]


def test_cell_jobs_live_under_the_out_folder(tmp_path: Path) -> None:
    fleet = config.parse(f"classes:\n  h200:\n{CPU}", tmp_path / "fleet.yaml")
    (job,) = runner.cell_jobs(fleet, [REF], tmp_path / "out", "r", "standard")
    assert job.workdir == (tmp_path / "out" / "abababababab" / "h200").resolve() and job.tier == "standard"


def test_a_failed_job_gets_its_exit_code_and_signal_from_scontrol() -> None:
    fake = FakeSlurm({"squeue": (0, "7|FAILED|NonZeroExitCode|0|n|9|\n", ""),
                      "scontrol": (0, "JobId=7 JobName=x JobState=FAILED Reason=NonZeroExitCode ExitCode=0:9 RunTime=00:00:03\n", "")})
    assert slurm.Slurm(fake, ENV).status(["7"])["7"].exit_code == "0:9"
    assert fake.calls[1] == ["scontrol", "show", "job", "--oneliner", "7"]
