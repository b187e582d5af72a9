"""Slurm: one batch job per cell through Slurm's own commands.

Why the commands and not a Python client: ``sbatch``/``squeue``/``scancel``
(and ``sacct`` where accounting runs) are the interface every Slurm site
operates and keeps stable across releases; pyslurm must be compiled against
the site's exact Slurm release, and submitit pickles a Python callable into
the job where we need a plain, readable command an operator can re-submit by
hand. Every call is an argv list (no shell); the batch script holds one
command whose every value is ``shlex.quote``d, and the sbatch options travel
as arguments, never as ``#SBATCH`` lines.

How the image runs on the node (``runtime``): ``docker``/``podman`` run
``imagesmith verify REF@sha256:...`` with the imagesmith of the nodes (the
same payload, pull, timeout and cleanup as on one host; podman through its
Docker-compatible socket); ``pyxis`` runs the payload inside the image with
``srun --container-image`` (the payload and its config are written to the
job's folder and mounted read-only) and the report comes back as the
payload's marker line in the job's output.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable, Mapping, Sequence

from imagesmith.errors import UserError
from imagesmith.model import loader, schemas, verifyreport
from imagesmith.model.fleet import GpuClass, SlurmPlacement
from imagesmith.model.verifyreport import VerifyReport
from imagesmith.stages.fleet.jobs import ENDED, FINISHED, GONE, PENDING, RUNNING, CellJob, JobView
from imagesmith.stages.verify import judge, verify

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]

SQUEUE_FIELDS = ("JobID", "State", "Reason", "RestartCnt", "NodeList", "exit_code")
SQUEUE_FORMAT = ",".join(f"{f}:|" for f in SQUEUE_FIELDS)
PHASE_OF = {
    **dict.fromkeys(("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"), PENDING),
    **dict.fromkeys(("RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "SUSPENDED", "RESIZING", "STOPPED"), RUNNING),
    **dict.fromkeys(("COMPLETED", "FAILED"), FINISHED),
    **dict.fromkeys(("TIMEOUT", "CANCELLED", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
                     "SPECIAL_EXIT", "REVOKED"), ENDED),
}
EXPORTED = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CERT_PATH",
            "DOCKER_TLS_VERIFY", "IMAGESMITH_COMPAT", "XDG_CACHE_HOME")
PAYLOAD_MOUNT = verify.IN_CONTAINER
SCRIPT = "job.sh"
OUTPUT_CAP = 64 << 20  # the tail of a job's output read for its report line (the payload's report is well under 16 MiB)
OUTPUT = "job-%j.out"


# -- pure: what is submitted -------------------------------------------------------------------


def slurm_time(seconds: int) -> str:
    """Seconds -> Slurm's ``D-HH:MM:SS``."""
    days, rest = divmod(max(1, seconds), 86400)
    hours, rest = divmod(rest, 3600)
    return f"{days}-{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"


def verify_timeout_s(time_limit_s: int) -> int:
    """imagesmith verify's own timeout: inside the Slurm limit, so a slow
    payload ends with a report saying so rather than being killed unseen."""
    return max(10, time_limit_s - max(30, time_limit_s // 10))


def job_name(job: CellJob) -> str:
    return f"imagesmith-{job.klass.name}-{job.ref.sha256[7:19]}"


def sbatch_argv(job: CellJob, environ: Mapping[str, str]) -> list[str]:
    """The sbatch command line: every option an argument, the script last."""
    s = _placement(job.klass)
    argv = ["sbatch", "--parsable", f"--job-name={job_name(job)}", f"--partition={s.partition}",
            "--nodes=1", "--ntasks=1", f"--time={slurm_time(s.time_limit_s)}", "--requeue",
            f"--chdir={job.workdir}", f"--output={job.workdir / OUTPUT}", "--open-mode=append",
            f"--comment=imagesmith-run={job.run_id}"]
    argv += [f"--{k}={v}" for k, v in (("account", s.account), ("qos", s.qos), ("constraint", s.constraint),
                                       ("cpus-per-task", s.cpus_per_task), ("mem", s.mem)) if v]
    if job.klass.gpus:
        argv.append(f"--gres=gpu:{s.gres_type + ':' if s.gres_type else ''}{job.klass.gpus}")
    names = [n for n in EXPORTED if n in environ]
    return argv + [f"--export={','.join(names) or 'NONE'}", str(job.workdir / SCRIPT)]


def _placement(klass: GpuClass) -> SlurmPlacement:
    if klass.slurm is None:
        raise UserError(f"class {klass.name} is not a Slurm class")
    return klass.slurm


def verify_argv(job: CellJob, imagesmith: str) -> list[str]:
    """``imagesmith verify`` as the node runs it (docker/podman runtimes)."""
    s = _placement(job.klass)
    argv = [imagesmith, "verify", str(job.ref), "--tier", job.tier, "--timeout", str(verify_timeout_s(s.time_limit_s))]
    if job.klass.gpus:
        argv.append("--require-gpu")
    if job.credentials is not None:
        argv += ["--credentials", str(job.credentials)]
    return argv


def pyxis_argv(job: CellJob) -> list[str]:
    """The payload inside the image under pyxis/enroot (``REGISTRY#REPO@DIGEST`` is enroot's spelling)."""
    ref = job.ref
    image = f"{ref.host}#{ref.repository}@{ref.sha256}" if ref.host else str(ref)
    return ["srun", f"--container-image={image}", f"--container-mounts={job.workdir / 'payload'}:{PAYLOAD_MOUNT}:ro",
            "--no-container-mount-home", "python3", f"{PAYLOAD_MOUNT}/run.py",
            "--config", f"{PAYLOAD_MOUNT}/config.json", "--emit-marker"]


def render_script(job: CellJob, imagesmith: str) -> str:
    """The batch script: one quoted command. Two values are the job's own
    and deliberately expanded by the shell: the GPUs Slurm allocated
    (``SLURM_JOB_GPUS``) and the restart count (one report per attempt)."""
    s = _placement(job.klass)
    lines = ["#!/bin/bash", f"# imagesmith fleet verify: class {job.klass.name}, run {job.run_id}",
             f"# image {shlex.quote(str(job.ref))}", "# rendered by imagesmith: every value below is quoted", "set -u",
             "export PYTHONUNBUFFERED=1"]
    if s.docker_host and s.runtime != "pyxis":
        lines.append(f"export DOCKER_HOST={shlex.quote(s.docker_host)}")
    if s.runtime == "pyxis":
        return "\n".join(lines + ["exec " + shlex.join(pyxis_argv(job))]) + "\n"
    gpus = '"${SLURM_JOB_GPUS:-all}"' if job.klass.gpus else "none"
    report = '"report-${SLURM_RESTART_COUNT:-0}.json"'
    return "\n".join(lines + [f"exec {shlex.join(verify_argv(job, imagesmith))} --gpus {gpus} --json {report}"]) + "\n"


def default_imagesmith() -> str:
    """The imagesmith running now (its venv's script), for nodes that share this filesystem."""
    found = shutil.which("imagesmith", path=str(Path(sys.executable).parent)) or shutil.which("imagesmith")
    return str(Path(found).absolute()) if found else str(Path(sys.executable).parent / "imagesmith")


# -- pure: what squeue and sacct say -------------------------------------------------------------


def parse_squeue(text: str) -> dict[str, JobView]:
    """``squeue -O JobID:|,State:|,...`` lines -> views by job id."""
    out = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < len(SQUEUE_FIELDS):
            continue
        job_id, state, reason, restarts, node, code = (p.strip() for p in parts[:len(SQUEUE_FIELDS)])
        out[job_id] = JobView(job_id, phase_of(state), state, "" if reason == "None" else reason,
                              int(restarts) if restarts.isdigit() else 0, node, code)
    return out


def parse_sacct(text: str) -> dict[str, JobView]:
    """``sacct -n -P -X -o JobID,State,ExitCode,NodeList`` lines -> views (restarts unknown)."""
    out = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) >= 4 and parts[0].strip().isdigit():
            state = parts[1].split()[0] if parts[1].strip() else "UNKNOWN"
            out[parts[0]] = JobView(parts[0], phase_of(state), state, parts[1].strip(), 0, parts[3], parts[2])
    return out


def phase_of(state: str) -> str:
    return PHASE_OF.get(state.split()[0].rstrip("+") if state.strip() else "", GONE)


# -- the scheduler --------------------------------------------------------------------------------


def _run(argv: Sequence[str]) -> "subprocess.CompletedProcess[str]":
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60)


class Slurm:
    """sbatch / squeue / sacct / scancel, behind ``run`` (a seam: tests pass a double)."""

    name = "slurm"

    def __init__(self, run: Runner = _run, environ: Mapping[str, str] | None = None, imagesmith: str | None = None) -> None:
        self.run, self.environ = run, dict(os.environ if environ is None else environ)
        self.imagesmith = imagesmith

    def _call(self, argv: Sequence[str]) -> "subprocess.CompletedProcess[str]":
        try:
            return self.run(argv)
        except FileNotFoundError:
            raise UserError(f"{argv[0]} is not installed here: fleet verify submits Slurm jobs from a host with the "
                            f"Slurm client commands (apt-get install slurm-client) and SLURM_CONF pointing at the cluster") from None
        except subprocess.TimeoutExpired:
            raise UserError(f"{argv[0]} did not answer in 60 s: is slurmctld up? (scontrol ping)") from None

    def submit(self, job: CellJob) -> str:
        self._prepare(job)
        done = self._call(sbatch_argv(job, self.environ))
        if done.returncode != 0:
            raise UserError(f"sbatch refused the job: {(done.stderr or done.stdout).strip().splitlines()[-1:] or ['no message']}"
                            .replace("['", "").replace("']", ""))
        return done.stdout.strip().split(";")[0]

    def _prepare(self, job: CellJob) -> None:
        from imagesmith.atomic import write_text

        job.workdir.mkdir(parents=True, exist_ok=True)
        s = _placement(job.klass)
        if s.runtime == "pyxis":
            _write_payload(job)
        write_text(job.workdir / SCRIPT, render_script(job, s.imagesmith or self.imagesmith or default_imagesmith()))
        os.chmod(job.workdir / SCRIPT, 0o755)

    def status(self, job_ids: Sequence[str]) -> dict[str, JobView]:
        if not job_ids:
            return {}
        done = self._call(["squeue", "--noheader", "--states=all", f"--jobs={','.join(job_ids)}", f"--Format={SQUEUE_FORMAT}"])
        if done.returncode != 0 and "Invalid job id" not in done.stderr:  # slurmctld unreachable: no news this time
            raise UserError(f"squeue failed: {done.stderr.strip() or f'exit {done.returncode}'}")
        views = parse_squeue(done.stdout) if done.returncode == 0 else {}
        if done.returncode != 0 and len(job_ids) > 1:  # one unknown id fails the whole call: ask one by one
            for job_id in job_ids:
                views |= self.status([job_id])
        missing = [j for j in job_ids if j not in views]
        views |= self._accounting(missing) | {j: JobView(j, GONE, "UNKNOWN") for j in missing if j not in views}
        return {j: self._with_exit_code(v) if v.state == "FAILED" else v for j, v in views.items()}

    def _with_exit_code(self, view: JobView) -> JobView:
        """squeue prints one number for an exit status or a signal; scontrol says which (``ExitCode=0:9``)."""
        done = self._call(["scontrol", "show", "job", "--oneliner", view.job_id])
        found = re.search(r"\bExitCode=(\d+:\d+)", done.stdout) if done.returncode == 0 else None
        return replace(view, exit_code=found.group(1)) if found else view

    def _accounting(self, job_ids: Sequence[str]) -> dict[str, JobView]:
        """Jobs squeue forgot (MinJobAge passed): sacct, where accounting runs."""
        if not job_ids:
            return {}
        done = self._call(["sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={','.join(job_ids)}",
                           "--format=JobID,State,ExitCode,NodeList"])
        return parse_sacct(done.stdout) if done.returncode == 0 else {}

    def cancel(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            self._call(["scancel", *job_ids])

    def report(self, job: CellJob, view: JobView) -> VerifyReport | None:
        if _placement(job.klass).runtime == "pyxis":
            return judge.finished_marker("\n".join(self._output(job, view)), job.ref)
        path = job.workdir / f"report-{view.restarts}.json"
        if not path.is_file() and not path.is_symlink():
            return None
        try:  # written on a node: untrusted (confined to the job's folder, bounded, strict, schema-valid, read once)
            return verifyreport.parse(loader.load_json_artifact(path, schema=schemas.VERIFY_REPORT), str(path))
        except UserError:
            return None

    def _output(self, job: CellJob, view: JobView) -> list[str]:
        try:  # written on a node: a FIFO, /dev/zero or a huge file there is read as its last OUTPUT_CAP bytes, or not at all
            data = loader.read_tail(job.workdir / OUTPUT.replace("%j", view.job_id), root=job.workdir, size=OUTPUT_CAP)
        except UserError:
            return []
        return data.decode("utf-8", errors="replace").splitlines()

    def output_tail(self, job: CellJob, view: JobView, lines: int = 5) -> list[str]:
        return [line for line in self._output(job, view) if line.strip()][-lines:]


def _write_payload(job: CellJob) -> None:
    """pyxis: the payload and its config beside the script, mounted read-only into the image."""
    from imagesmith.atomic import write_bytes
    from imagesmith.model import compat

    options = verify.VerifyOptions(tier=job.tier, gpus="all" if job.klass.gpus else "none", require_gpu=bool(job.klass.gpus))
    config = verify.payload_config({}, options, compat.load())
    for name, data in (verify.payload_files() | {"config.json": json.dumps(config, indent=2).encode()}).items():
        write_bytes(job.workdir / "payload" / name, data)
