"""imagesmith fleet verify on a real one-node Slurm cluster (slurmctld, slurmd,
munge from Debian's packages), against images in a real registry.

Jobs run ``imagesmith verify`` in CPU mode (the classes have gpus: 0). Each
way a job can go wrong is made to happen for real: a time limit, an
external requeue (preemption), a node that never comes up, a job killed
midway, and Ctrl-C in the middle of a run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from imagesmith.edges.engine import Engine
from imagesmith.model import fleet as config
from imagesmith.model.fleetreport import FleetReport
from imagesmith.stages.evidence import trust
from imagesmith.stages.fleet import runner
from imagesmith.stages.fleet.slurm import Slurm
from tests.integration.slurm_fixtures import FleetImages, SlurmCluster
from tests.unit.trustkeys import key_files

pytestmark = [pytest.mark.integration, pytest.mark.registry, pytest.mark.slurm]
IMAGESMITH = str(Path(sys.executable).parent / "imagesmith")

TWO_CLASSES = """\
version: 1
tier: quick
classes:
  cpu-a:
    gpus: 0
    slurm: {partition: fleet-a, constraint: cpu, time_limit: 10m, start_deadline: 5m, imagesmith: %(imagesmith)s}
  cpu-b:
    gpus: 0
    slurm: {partition: fleet-b, time_limit: 10m, start_deadline: 5m, imagesmith: %(imagesmith)s}
"""


def fleet_file(folder: Path, text: str, **values: str) -> Path:
    path = folder / "fleet.yaml"
    path.write_text(text % ({"imagesmith": IMAGESMITH} | values))
    return path


def cli(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "imagesmith.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def containers_of(engine: Engine, *image_ids: str) -> list[str]:
    return sorted(c.id for i in image_ids for c in engine.client.containers.list(all=True, filters={"ancestor": i}))


def test_two_classes_pass_the_good_image_and_fail_the_bad_one(
        slurm_cluster: SlurmCluster, fleet_images: FleetImages, engine: Engine, tmp_path: Path) -> None:
    fleet = fleet_file(tmp_path, TWO_CLASSES)
    out = tmp_path / "fleet"
    key, pub = key_files(tmp_path / "keys", "cpu-fleet")  # the fleet's verifier, trusted for both classes
    policy = tmp_path / "keys" / "trust-policy.yaml"
    policy.write_text(trust.policy_text([("cpu-fleet", pub.name, ["cpu-a", "cpu-b"])]))
    proc = cli("fleet", "verify", "--fleet", str(fleet), fleet_images.good, fleet_images.bad, "--out", str(out),
               "--credentials", str(fleet_images.credentials), "--poll", "1", "--verifier-key", str(key),
               "--run-id", "it-run-1", env=slurm_cluster.env)
    _, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 1, stderr
    report = json.loads((out / "fleet-report.json").read_text())
    cells = {(c["ref"], c["class"]): c for c in report["cells"]}
    assert len(cells) == 4 and report["ok"] is False and report["requires"] == ["cpu-a", "cpu-b"] and report["run_id"] == "it-run-1"
    for klass in ("cpu-a", "cpu-b"):
        good, bad = cells[(fleet_images.good, klass)], cells[(fleet_images.bad, klass)]
        assert good["status"] == "pass" and good["state"] == "COMPLETED", good
        assert bad["status"] == "fail" and bad["failed_checks"] == ["versions.torch"] and bad["state"] == "FAILED", bad
        verified = json.loads((out / good["report"]).read_text())
        assert any(d.endswith(good["digest"]) for d in verified["image"]["digests"])
        assert good["ran_s"] is not None and good["queued_s"] is not None
        assert good["statement"] == good["report"].replace("verify.json", "verify.dsse.json")
    assert "SUBMITTED" not in stderr and "submitted to slurm as" in stderr and "RUNNING" in stderr
    assert "fleet verification failed in 2 of 4 cells" in stderr
    assert slurm_cluster.active_jobs([c["job_id"] for c in cells.values()]) == []
    assert containers_of(engine, fleet_images.good_id, fleet_images.bad_id) == []
    timings = {f"{k[1]} {'good' if k[0] == fleet_images.good else 'bad'}": (c["queued_s"], c["ran_s"]) for k, c in cells.items()}
    print(f"queued/ran seconds per job: {timings}")
    _publish_gated_by(out / "fleet-report.json", fleet, fleet_images, engine, tmp_path / "release", policy)


def _publish_gated_by(report: Path, fleet: Path, images: FleetImages, engine: Engine, out: Path, trust_file: Path) -> None:
    """publish with --fleet/--fleet-report semantics and the trust policy: both immutable tags land; only the
    digest whose signed results passed on every class gets its floating tag; the held-back one names the class."""
    from imagesmith.edges.registry import Credentials, Registry
    from imagesmith.model.matrix.records import ImageSpec
    from imagesmith.model.tags import FloatingTag, TagPolicy
    from imagesmith.stages.fleet.gate import load_gate
    from imagesmith.stages.release.publish import Item, Publisher
    from tests.integration.conftest import PASSWORD, USER

    host, repo = images.good.split("@")[0].split("/", 1)
    measured = {"torch": "2.13.0+cpu", "cuda": None, "python": "3.11.2", "os": "debian12"}
    items = [Item(f"{name}-target", layer, "cell", image_id, measured, True, True, {"ok": True})
             for name, layer, image_id in (("good", "base", images.good_id), ("bad", "nlp", images.bad_id))]
    policy = TagPolicy(immutable="{torch}-{accel}-{layer}-{date}", floating=(FloatingTag("v{torch_minor}-{layer}"),))
    creds = Credentials(USER, PASSWORD, "test")
    gate = load_gate(fleet, [report], trust.load_policy(trust_file), ["it-run-1"])
    assert gate is not None
    rel = Publisher(engine, Registry(host, creds), ImageSpec(repo, host), policy, "20261130", out, credentials=creds,
                    floating_gate=gate.held_back).run(items)
    assert [t.status for t in rel.targets] == ["pushed", "pushed"]
    assert [t.digest for t in rel.targets] == [images.good.split("@")[1], images.bad.split("@")[1]]
    floating = {f.tag: f for f in rel.floating}
    assert floating["v2.13-base"].action == "created" and floating["v2.13-nlp"].action == "kept"
    assert ("held back by the fleet: class cpu-a failed: signed by cpu-fleet: failed checks: versions.torch; "
            "class cpu-b failed: signed by cpu-fleet: failed checks: versions.torch") in floating["v2.13-nlp"].reason
    tags = images.registry.list_tags(repo)
    assert "v2.13-base" in tags and "v2.13-nlp" not in tags and "2.13.0-cpu-nlp-20261130" in tags
    assert images.registry.inspect(repo, "v2.13-base")["Digest"] == images.good.split("@")[1]


def test_ctrl_c_cancels_every_job_and_leaves_nothing_behind(
        slurm_cluster: SlurmCluster, fleet_images: FleetImages, engine: Engine, tmp_path: Path) -> None:
    fleet = fleet_file(tmp_path, TWO_CLASSES.replace("tier: quick", "tier: standard"))
    out = tmp_path / "fleet"
    proc = cli("fleet", "verify", "--fleet", str(fleet), fleet_images.good, fleet_images.bad, "--out", str(out),
               "--credentials", str(fleet_images.credentials), "--poll", "1", env=slurm_cluster.env)
    seen = _read_until(proc, lambda line: " RUNNING " in f"{line} " and "on imagesmith-node" in line)
    time.sleep(3)  # the verify inside the job is under way (pulling or running its container)
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=300)
    stderr = seen + rest
    assert proc.returncode == 130, stderr
    report = json.loads((out / "fleet-report.json").read_text())
    assert report["interrupted"] is True and report["ok"] is False
    cancelled = [c for c in report["cells"] if c["status"] == "cancelled"]
    assert cancelled and all("interrupted (Ctrl-C)" in c["reason"] for c in cancelled), report["cells"]
    ids = [c["job_id"] for c in report["cells"] if c["job_id"]]
    assert len(ids) == 4 and slurm_cluster.active_jobs(ids) == []
    assert "interrupted: cancelled" in stderr
    states = slurm_cluster.cmd("squeue", "--noheader", "--states=all", f"--jobs={','.join(ids)}", "-o", "%i %T").stdout
    assert all(line.split()[1] in ("CANCELLED", "COMPLETED", "FAILED") for line in states.splitlines()), states
    assert _eventually(lambda: containers_of(engine, fleet_images.good_id, fleet_images.bad_id) == [], 600)  # a hang guard


def _read_until(proc: subprocess.Popen[str], done: Callable[[str], bool], timeout: float = 600) -> str:
    lines: list[str] = []
    found = threading.Event()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if done(line):
                found.set()
                return

    threading.Thread(target=pump, daemon=True).start()
    assert found.wait(timeout), "".join(lines)
    return "".join(lines)


def _eventually(check: Callable[[], bool], seconds: float) -> bool:
    for _ in range(int(seconds)):
        if check():
            return True
        time.sleep(1)
    return check()


# -- each way a job goes wrong, on the real cluster, in process ------------------------------------------------


def run_one(tmp_path: Path, klass_yaml: str, ref: str, on_line: Callable[[str], None] = lambda line: None,
            **kwargs: Any) -> tuple[FleetReport, list[str]]:
    fleet = config.load(fleet_file(tmp_path, "classes:\n  c:\n    gpus: 0\n" + klass_yaml))
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        on_line(line)

    jobs = runner.cell_jobs(fleet, [config.parse_ref(ref)], tmp_path / "fleet", runner.run_id(), None)
    report = runner.FleetRun(jobs, {"slurm": Slurm()}, tmp_path / "fleet", fleet, say, poll_s=1, **kwargs).run()
    return report, lines


def sleeper(folder: Path, seconds: int) -> str:
    """An 'imagesmith' that never reports (a pull that hangs, a stuck prolog)."""
    path = folder / "stuck-imagesmith"
    path.write_text(f"#!/bin/sh\necho 'pulling...'\nsleep {seconds}\n")
    path.chmod(0o755)
    return str(path)


def test_a_job_past_its_time_limit_fails_its_cell(slurm_env: SlurmCluster, fleet_images: FleetImages, tmp_path: Path) -> None:
    klass = f"    slurm: {{partition: fleet-b, time_limit: 10s, imagesmith: {sleeper(tmp_path, 600)}}}\n"
    report, _ = run_one(tmp_path, klass, fleet_images.good)
    (cell,) = report.cells
    assert cell.status == "fail" and cell.state == "TIMEOUT", cell
    assert cell.reason.startswith("Slurm stopped the job at its time limit (10s) before it wrote a report; last output: pulling..."), cell.reason
    assert slurm_env.active_jobs([cell.job_id or ""]) == []


def test_a_job_on_a_node_that_never_comes_up_fails_at_the_start_deadline(
        slurm_env: SlurmCluster, fleet_images: FleetImages, tmp_path: Path) -> None:
    klass = f"    slurm: {{partition: fleet-a, constraint: ghost, start_deadline: 5s, imagesmith: {IMAGESMITH}}}\n"
    report, _ = run_one(tmp_path, klass, fleet_images.good)
    (cell,) = report.cells
    assert cell.status == "fail" and cell.state == "PENDING" and cell.ran_s is None, cell
    assert cell.reason.startswith("never started: still pending after ") and "ReqNodeNotAvail" in cell.reason, cell.reason
    assert slurm_env.active_jobs([cell.job_id or ""]) == []  # cancelled, not left in the queue


def test_an_impossible_constraint_fails_at_submission(slurm_env: SlurmCluster, fleet_images: FleetImages, tmp_path: Path) -> None:
    klass = f"    slurm: {{partition: fleet-b, constraint: no-such-feature, imagesmith: {IMAGESMITH}}}\n"
    report, _ = run_one(tmp_path, klass, fleet_images.good)
    (cell,) = report.cells
    assert cell.status == "fail" and cell.job_id is None
    assert cell.reason == "not submitted: sbatch refused the job: sbatch: error: Batch job submission failed: Invalid feature specification"


def test_a_preempted_job_fails_its_cell(slurm_env: SlurmCluster, fleet_images: FleetImages, tmp_path: Path) -> None:
    klass = f"    slurm: {{partition: fleet-b, max_requeues: 0, imagesmith: {sleeper(tmp_path, 600)}}}\n"

    def preempt(line: str) -> None:
        if line.split(": ", 1)[-1].split(" ")[1:2] == ["RUNNING"]:
            job_id = line.split(": ", 1)[1].split()[0]
            assert slurm_env.cmd("scontrol", "requeue", job_id).returncode == 0

    report, lines = run_one(tmp_path, klass, fleet_images.good, preempt)
    (cell,) = report.cells
    assert cell.status == "fail" and cell.restarts == 1, (cell, lines)
    assert cell.reason.startswith("preempted: the scheduler requeued the job 1 time(s) and the class allows 0"), cell.reason
    assert slurm_env.active_jobs([cell.job_id or ""]) == []


def test_a_job_killed_midway_fails_without_a_report(
        slurm_env: SlurmCluster, fleet_images: FleetImages, engine: Engine, tmp_path: Path) -> None:
    klass = f"    slurm: {{partition: fleet-b, imagesmith: {IMAGESMITH}}}\n"
    killed: list[int] = []

    def kill(line: str) -> None:
        if line.split(": ", 1)[-1].split(" ")[1:2] == ["RUNNING"] and not killed:
            job_id = line.split(": ", 1)[1].split()[0]
            pids: list[int] = []
            for _ in range(1200):  # its processes, once the job's step has started them (a hang guard only)
                pids = slurm_env.pids(job_id)
                if pids:
                    break
                time.sleep(0.5)
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

    try:
        report, lines = run_one(tmp_path, klass, fleet_images.good, kill)
        (cell,) = report.cells
        assert killed, lines
        assert cell.status == "fail" and cell.state == "FAILED" and cell.report is None, cell
        assert cell.reason.startswith("the job ended (FAILED, killed by signal 9) without a verify report"), cell.reason
    finally:  # SIGKILL gives imagesmith no chance to remove its container: the one thing a kill -9 leaves
        for pid in killed:
            engine.remove_containers("io.imagesmith.run", f"verify-{pid}")
