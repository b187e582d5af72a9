"""imagesmith fleet validate / render / verify as a user runs them: messages and exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
REF = "harbor.example.com/ml/pytorch@sha256:" + "ab" * 32


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "imagesmith.cli", *args], capture_output=True, text=True, cwd=cwd)


def test_validate_ok_and_errors(tmp_path: Path) -> None:
    ok = run("fleet", "validate", "examples/fleet-local.yaml")
    assert ok.returncode == 0 and ok.stdout == "OK: 2 classes (slurm: cpu-a, cpu-b); floating tags require cpu-a, cpu-b\n"
    bad = tmp_path / "fleet.yaml"
    bad.write_text("classes:\n  a:\n    gpus: 0\n    slurm: {partition: 'x;y'}\n")
    done = run("fleet", "validate", str(bad))
    assert done.returncode == 1
    assert done.stderr == "error: fleet.yaml:4 classes.a.slurm.partition: 'x;y' is not a Slurm partition name; write letters, digits, '.', '_' or '-' (at most 64)\n"


def test_render_prints_the_sbatch_line_the_script_and_the_job(tmp_path: Path) -> None:
    done = run("fleet", "render", "--fleet", "examples/fleet.yaml", REF, "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    parts = done.stdout.split("# --- ")
    assert parts[1].startswith(f"h200 x {REF}\nsbatch --parsable --job-name=imagesmith-h200-abababababab --partition=gpu-h200")
    assert "exec srun '--container-image=harbor.example.com#ml/pytorch@sha256:" in parts[2]
    job = yaml.safe_load(parts[3].split("\n", 1)[1])
    assert job["kind"] == "Job" and job["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L40S"}
    assert not list(tmp_path.iterdir())  # render writes nothing


def test_verify_refuses_a_tag_and_says_what_to_write() -> None:
    done = run("fleet", "verify", "--fleet", "examples/fleet-local.yaml", "harbor.example.com/ml/pytorch:v2.9")
    assert done.returncode == 1
    assert done.stderr.startswith("error: 'harbor.example.com/ml/pytorch:v2.9' is not an image pinned by digest; write REGISTRY/REPOSITORY@sha256:")


def test_verify_without_images_says_how_to_give_them() -> None:
    done = run("fleet", "verify", "--fleet", "examples/fleet-local.yaml")
    assert (done.returncode, done.stderr) == (
        1, "error: nothing to verify: give REGISTRY/REPO@sha256:... references, or --release build/release.json\n")


def test_verify_takes_every_released_digest(tmp_path: Path) -> None:
    release = tmp_path / "release.json"
    release.write_text('{"schema": "imagesmith.release/1", "registry": "harbor.example.com", "repository": "ml/pytorch", "targets": ['
                       f'{{"target": "a", "status": "pushed", "digest": "sha256:{"ab" * 32}"}}, {{"target": "b", "status": "not-verified", "digest": null}}]}}')
    done = run("fleet", "render", "--fleet", "examples/fleet-local.yaml", REF, "--out", str(tmp_path / "o"))
    assert done.stdout.count("# --- ") == 2
    from imagesmith.pipeline.fleet import release_refs as _release_refs

    assert [str(r) for r in _release_refs(release)] == [REF]


def test_publish_and_build_take_the_fleet_gate() -> None:
    for command in ("publish", "build"):
        text = run(command, "--help").stdout
        assert "--fleet FILE" in text and "--fleet-report FILE" in text

        assert "--fleet-run RUN" in text


def _fleet_report(folder: Path) -> Path:
    from imagesmith.model import fleetreport as report

    cell = report.CellResult(REF, "cpu-a", "slurm", "pass", "every required check passed")
    return report.write(report.FleetReport("fleet.yaml", "r1", "quick", "x", ("cpu-a",), (cell,)), folder / "fleet-report.json")


def test_publish_names_the_option_fleet_evidence_lacks(tmp_path: Path) -> None:
    from tests.unit.trustkeys import policy_file

    policy, rep = policy_file(tmp_path / "keys"), _fleet_report(tmp_path)
    base = ["publish", "--out", str(tmp_path / "out"), "--trust-policy", str(policy), "--fleet-report", str(rep), "-q"]
    no_rule = run(*base, "--fleet-run", "r1")
    assert (no_rule.returncode, no_rule.stderr.splitlines()[-1]) == (1, (
        f"error: {rep}: floating tags move on fleet evidence only against a rule the operator gives: --fleet fleet.yaml, or a "
        "fleet section (require, classes) in the trust policy; a fleet report's own requires is not believed"))
    no_run = run(*base, "--fleet", "examples/fleet-local.yaml")
    assert (no_run.returncode, no_run.stderr.splitlines()[-1]) == (1, (
        f"error: {rep}: name the fleet run(s) whose signed results count: --fleet-run RUN (fleet verify prints its run and "
        "--run-id sets it), or --fleet-run-since RUN; a fleet report's own run_id is not believed"))


@pytest.mark.parametrize("run_id", ["r1; id", "", "x" * 65, "-r"])
def test_fleet_verify_refuses_a_run_id_that_is_not_one(run_id: str, tmp_path: Path) -> None:
    done = run("fleet", "verify", "--fleet", "examples/fleet-local.yaml", REF, "--out", str(tmp_path / "f"), "--run-id", run_id)
    assert done.returncode == 2 and "--run-id" in done.stderr and not (tmp_path / "f").exists(), done.stderr
