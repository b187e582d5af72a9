"""The fleet gate believes signatures, not files: a fleet report is written by
another job, so publish judges each cell again from the statement that
``fleet verify --verifier-key`` signed, and a verifier vouches only for the
GPU classes the trust policy names for it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from imagesmith.edges import signing
from imagesmith.stages import trust
from imagesmith.stages.fleet import config, gate, runner
from imagesmith.stages.fleet.jobs import FINISHED, RUNNING
from tests.unit.test_fleet_runner import DIGEST, REF, Clock, Scripted, good_report
from tests.unit.trustkeys import key_files

FLEET = """\
classes:
  h200: {gpus: 1, gpu: NVIDIA H200, slurm: {partition: p}}
  l40s: {gpus: 1, gpu: NVIDIA L40S, slurm: {partition: q}}
floating:
  require: [h200]
"""


def keys(folder: Path, classes: dict[str, list[str]]) -> tuple[dict[str, signing.Key], trust.TrustPolicy]:
    """A key per verifier and a trust policy naming each with its classes."""
    found, entries = {}, []
    for name, allowed in classes.items():
        key, pub = key_files(folder, name)
        loaded = signing.load_signing_key(key, {})
        assert loaded is not None
        found[name] = loaded
        entries.append((name, pub.name, allowed))
    (folder / "trust-policy.yaml").write_text(trust.policy_text(entries))
    return found, trust.load_policy(folder / "trust-policy.yaml")


def fleet_run(tmp_path: Path, signer: signing.Key | None, report: dict[str, Any], classes: tuple[str, ...] = ("h200",),
              out: str = "out") -> Path:
    """fleet verify of REF on ``classes`` with a scheduler whose job passes with ``report``; the fleet report's path."""
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET)
    fleet = config.load(path)
    clock = Clock()
    jobs = runner.cell_jobs(fleet, (REF,), tmp_path / out, "run1", None, classes)
    sched = Scripted([(RUNNING, "RUNNING"), (FINISHED, "COMPLETED")], report)
    runner.FleetRun(jobs, {"slurm": sched}, tmp_path / out, fleet, lambda line: None, poll_s=5, clock=clock,
                    sleep=clock.sleep, signer=signer).run()
    return tmp_path / out / runner.REPORT_NAME


def held_back(tmp_path: Path, report: Path, policy: trust.TrustPolicy) -> str | None:
    loaded = gate.load_gate(tmp_path / "fleet.yaml", [report], policy)
    assert loaded is not None
    return loaded.held_back(DIGEST)


def edit(report: Path, change: Any) -> None:
    doc = json.loads(report.read_text())
    change(doc)
    report.write_text(json.dumps(doc))


H200 = good_report(gpus=["NVIDIA H200"])


def test_a_cell_signed_by_the_class_verifier_lifts_the_hold(tmp_path: Path) -> None:
    signers, policy = keys(tmp_path / "keys", {"gpu-h200": ["h200"]})
    report = fleet_run(tmp_path, signers["gpu-h200"], H200)
    cell = json.loads(report.read_text())["cells"][0]
    assert cell["statement"] == f"{DIGEST[7:19]}/h200/verify.dsse.json" and cell["status"] == "pass"
    assert held_back(tmp_path, report, policy) is None
    got = gate.load_gate(tmp_path / "fleet.yaml", [report], policy)
    assert got is not None and got.cells[0].reason == "signed by gpu-h200: every required check passed"


def test_an_unsigned_fleet_report_that_says_pass_holds_the_tag_back(tmp_path: Path) -> None:
    _, policy = keys(tmp_path / "keys", {"gpu-h200": ["h200"]})
    report = fleet_run(tmp_path, None, H200)
    assert json.loads(report.read_text())["cells"][0]["status"] == "pass"  # the file says pass ...
    assert held_back(tmp_path, report, policy) == (  # ... and is not believed
        "held back by the fleet: class h200 failed: its result is not signed; run imagesmith fleet verify "
        f"--verifier-key KEY with a key {policy.file} names for class h200")


def test_a_verifier_vouches_only_for_its_classes(tmp_path: Path) -> None:
    signers, policy = keys(tmp_path / "keys", {"gpu-l40s": ["l40s"], "gpu-h200": ["h200"]})
    report = fleet_run(tmp_path, signers["gpu-l40s"], H200)  # the L40S runners' key signs an H200 result
    assert held_back(tmp_path, report, policy) == (
        "held back by the fleet: class h200 failed: its result is signed by verifier gpu-l40s, whom "
        f"{policy.file} trusts only for class(es) l40s")


def test_a_wildcard_verifier_vouches_for_every_class(tmp_path: Path) -> None:
    signers, policy = keys(tmp_path / "keys", {"single-host": ["*"]})
    assert held_back(tmp_path, fleet_run(tmp_path, signers["single-host"], H200), policy) is None


def test_a_forged_status_is_judged_again_from_the_signed_checks(tmp_path: Path) -> None:
    signers, policy = keys(tmp_path / "keys", {"gpu-h200": ["h200"]})
    report = fleet_run(tmp_path, signers["gpu-h200"], good_report(ok=False, gpus=["NVIDIA H200"]))

    def forge(doc: dict[str, Any]) -> None:
        doc["ok"], doc["cells"][0]["status"], doc["cells"][0]["reason"] = True, "pass", "every required check passed"

    edit(report, forge)
    assert held_back(tmp_path, report, policy) == (
        "held back by the fleet: class h200 failed: signed by gpu-h200: failed checks: versions.torch")


def test_a_signed_result_on_the_wrong_gpus_does_not_pass(tmp_path: Path) -> None:
    signers, policy = keys(tmp_path / "keys", {"fleet": ["h200", "l40s"]})
    report = fleet_run(tmp_path, signers["fleet"], good_report(gpus=["NVIDIA L40S"]))
    assert held_back(tmp_path, report, policy) == (
        "held back by the fleet: class h200 failed: signed by fleet: the job ran on NVIDIA L40S, not the class's "
        "NVIDIA H200: check the placement")


def test_a_statement_signed_for_one_class_cannot_stand_for_another(tmp_path: Path) -> None:
    signers, policy = keys(tmp_path / "keys", {"fleet": ["h200", "l40s"]})
    report = fleet_run(tmp_path, signers["fleet"], H200, classes=("l40s",))  # signed as class l40s (GPU check fails)

    def relabel(doc: dict[str, Any]) -> None:
        doc["cells"][0]["class"] = "h200"

    edit(report, relabel)
    assert held_back(tmp_path, report, policy) == (
        "held back by the fleet: class h200 failed: its signed result is about class l40s, not h200")


@pytest.mark.parametrize("tamper, why", [
    ("stranger", "is signed by no verifier that"),
    ("digest", "its subject is 127.0.0.1:5000/ml/pytorch@sha256:cdcd"),
    ("outside", "outside"),
    ("missing", "No such file"),
])
def test_a_statement_publish_must_not_believe_holds_the_tag_back(tmp_path: Path, tamper: str, why: str) -> None:
    signers, policy = keys(tmp_path / "keys", {"gpu-h200": ["h200"]})
    report = fleet_run(tmp_path, signers["gpu-h200"], H200)
    cell_path = report.parent / json.loads(report.read_text())["cells"][0]["statement"]
    if tamper == "stranger":
        stranger, _ = keys(tmp_path / "stranger", {"stranger": ["*"]})
        cell_path.write_bytes(trust.sign(H200, None, trust.Subject(REF.name, REF.sha256), stranger["stranger"],
                                         {"class": "h200"}))
    elif tamper == "digest":
        other = "sha256:" + "cd" * 32
        cell_path.write_bytes(trust.sign(H200, None, trust.Subject(REF.name, other), signers["gpu-h200"], {"class": "h200"}))
    elif tamper == "outside":
        (tmp_path / "elsewhere.dsse.json").write_bytes(cell_path.read_bytes())
        edit(report, lambda doc: doc["cells"][0].update(statement="../elsewhere.dsse.json"))
    else:
        cell_path.unlink()
    found = held_back(tmp_path, report, policy)
    assert found is not None and found.startswith("held back by the fleet: class h200 failed: its signed result is refused: ")
    assert why in found


def test_the_newest_signed_pass_wins_over_an_older_failure(tmp_path: Path) -> None:
    signers, policy = keys(tmp_path / "keys", {"gpu-h200": ["h200"]})
    old = fleet_run(tmp_path, signers["gpu-h200"], good_report(ok=False, gpus=["NVIDIA H200"]), out="old")
    new = fleet_run(tmp_path, signers["gpu-h200"], H200, out="new")
    edit(old, lambda doc: doc.update(started_at="2026-01-01T00:00:00+00:00"))
    loaded = gate.load_gate(tmp_path / "fleet.yaml", [new, old], policy)
    assert loaded is not None and loaded.held_back(DIGEST) is None
    assert [c.status for c in loaded.cells] == ["fail", "pass"]


def test_without_a_policy_the_gate_reads_the_report_as_written(tmp_path: Path) -> None:
    report = fleet_run(tmp_path, None, H200)
    loaded = gate.load_gate(tmp_path / "fleet.yaml", [report])
    assert loaded is not None and loaded.held_back(DIGEST) is None
