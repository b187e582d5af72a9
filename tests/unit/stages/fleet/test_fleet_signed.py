"""The fleet gate believes signatures, not files: a fleet report is written by
another job, so publish judges each cell again from the statement that
``fleet verify --verifier-key`` signed, and a verifier vouches only for the
GPU classes the trust policy names for it."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from imagesmith.edges import signing
from imagesmith.errors import UsageError, UserError
from imagesmith.model import fleet as config
from imagesmith.model import fleetreport as fleet_report
from imagesmith.stages.evidence import trust
from imagesmith.stages.fleet import gate, runner
from imagesmith.stages.fleet.jobs import FINISHED, RUNNING
from tests.doubles import verify_report
from tests.unit.stages.fleet.test_fleet_runner import DIGEST, REF, Clock, Scripted, good_report
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
    loaded = gate.load_gate(tmp_path / "fleet.yaml", [report], policy, ["run1"])
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
    got = gate.load_gate(tmp_path / "fleet.yaml", [report], policy, ["run1"])
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
        cell_path.write_bytes(trust.sign(verify_report(H200), None, trust.Subject(REF.name, REF.sha256), stranger["stranger"],
                                         {"class": "h200"}))
    elif tamper == "digest":
        other = "sha256:" + "cd" * 32
        cell_path.write_bytes(trust.sign(verify_report(H200), None, trust.Subject(REF.name, other), signers["gpu-h200"], {"class": "h200"}))
    elif tamper == "outside":
        (tmp_path / "elsewhere.dsse.json").write_bytes(cell_path.read_bytes())
        edit(report, lambda doc: doc["cells"][0].update(statement="../elsewhere.dsse.json"))
    else:
        cell_path.unlink()
    found = held_back(tmp_path, report, policy)
    assert found is not None and found.startswith("held back by the fleet: class h200 failed: its signed result is refused: ")
    assert why in found


def test_without_a_policy_the_gate_reads_the_report_as_written(tmp_path: Path) -> None:
    report = fleet_run(tmp_path, None, H200)
    loaded = gate.load_gate(tmp_path / "fleet.yaml", [report])
    assert loaded is not None and loaded.held_back(DIGEST) is None


# -- signed time and run decide; the rule comes from the operator; statements expire -----------------------------

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)


def signed_report(folder: Path, signer: signing.Key, cells: list[tuple[str, dict[str, Any], dt.datetime, str]],
                  started_at: str = "2026-11-30T11:00:00+00:00", run_id: str = "r") -> Path:
    """A fleet report in ``folder`` whose cells (class, report, signed at, signed run) each have their statement."""
    found = []
    for i, (klass, report, when, run) in enumerate(cells):
        name = f"c{i}/verify.dsse.json"
        (folder / f"c{i}").mkdir(parents=True)
        (folder / name).write_bytes(trust.sign(verify_report(report), None, trust.Subject(REF.name, REF.sha256), signer,
                                               {"class": klass, "run_id": run}, now=when))
        found.append(fleet_report.CellResult(str(REF), klass, "slurm", "pass", "every required check passed", statement=name))
    return fleet_report.write(fleet_report.FleetReport("fleet.yaml", run_id, "quick", started_at, ("h200",), tuple(found)),
                              folder / "fleet-report.json")


def gate_of(tmp_path: Path, reports: list[Path], policy: trust.TrustPolicy, runs: tuple[str, ...] = ("r1", "r2")) -> str | None:
    (tmp_path / "fleet.yaml").write_text(FLEET)
    loaded = gate.load_gate(tmp_path / "fleet.yaml", reports, policy, runs, now=NOW)
    assert loaded is not None
    return loaded.held_back(DIGEST)


FAILED = good_report(ok=False, gpus=["NVIDIA H200"])
T1, T2 = NOW - dt.timedelta(hours=5), NOW - dt.timedelta(hours=1)
FAIL_WINS = "held back by the fleet: class h200 failed: signed by gpu-h200: failed checks: versions.torch"


@pytest.mark.parametrize("layout, why", [
    # one report, the cells in either order: the newer signed time wins
    ([[(H200, T1, "r1"), (FAILED, T2, "r2")]], FAIL_WINS),
    ([[(FAILED, T2, "r2"), (H200, T1, "r1")]], FAIL_WINS),
    ([[(FAILED, T1, "r1"), (H200, T2, "r2")]], None),
    # two reports, the older result's report claiming the later started_at
    ([[(H200, T1, "r1")], [(FAILED, T2, "r2")]], FAIL_WINS),
    # the same second: the failure wins
    ([[(H200, T2, "r1"), (FAILED, T2, "r2")]], FAIL_WINS),
])
def test_the_newest_signed_time_wins_never_the_order_of_cells_or_started_at(
        tmp_path: Path, layout: list[list[tuple[dict[str, Any], dt.datetime, str]]], why: str | None) -> None:
    signers, policy = keys(tmp_path / "keys", {"gpu-h200": ["h200"]})
    reports = [signed_report(tmp_path / f"rep{i}", signers["gpu-h200"], [("h200", r, t, run) for r, t, run in cells],
                             started_at=f"2026-11-30T{23 - i:02d}:00:00+00:00")  # the first report says it is the newest
               for i, cells in enumerate(layout)]
    assert gate_of(tmp_path, reports, policy) == why


def test_a_result_signed_for_a_run_not_named_is_left_out(tmp_path: Path) -> None:
    signers, policy = keys(tmp_path / "keys", {"gpu-h200": ["h200"]})
    old_pass = signed_report(tmp_path / "old", signers["gpu-h200"], [("h200", H200, T1, "r0")], run_id="r1")  # the report lies
    assert gate_of(tmp_path, [old_pass], policy, ("r1",)) == (
        "held back by the fleet: class h200 has no result that counts: its signed result is of fleet run r0, not of r1 "
        "(--fleet-run)")
    both = signed_report(tmp_path / "both", signers["gpu-h200"], [("h200", H200, T1, "r0"), ("h200", FAILED, T2, "r1")])
    assert gate_of(tmp_path, [both], policy, ("r0",)) is None  # r1's failure is not about the run named
    assert gate_of(tmp_path, [both], policy, ("r0", "r1")) == FAIL_WINS


@pytest.mark.parametrize("since, why", [
    ("20261130T090000Z-aaaaaa", FAIL_WINS),  # both runs are since it: the newer signed failure wins
    ("20261130T100000Z-000000", FAIL_WINS),  # only the failing run is
    ("20261130T110000Z-000000", "held back by the fleet: class h200 has no result that counts: its signed result is of fleet "
                                "run 20261130T100000Z-bbbbbb, not of a run since 20261130T110000Z-000000 (--fleet-run-since)"),
])
def test_results_of_runs_since_the_last_accepted_one_count(tmp_path: Path, since: str, why: str) -> None:
    signers, policy = keys(tmp_path / "keys", {"gpu-h200": ["h200"]})
    (tmp_path / "fleet.yaml").write_text(FLEET)
    report = signed_report(tmp_path / "r", signers["gpu-h200"], [("h200", H200, T1, "20261130T090000Z-aaaaaa"),
                                                                 ("h200", FAILED, T2, "20261130T100000Z-bbbbbb")])
    loaded = gate.load_gate(tmp_path / "fleet.yaml", [report], policy, since=since, now=NOW)
    assert loaded is not None and loaded.held_back(DIGEST) == why


@pytest.mark.parametrize("policy_age, verifier_age, signed, why", [
    (None, None, NOW - dt.timedelta(days=31), "signed 31d ago (2026-10-30T12:00:00+00:00), older than the 30d the max_age of "
                                              "{policy} allows; verify the image again"),
    ("2d", None, NOW - dt.timedelta(days=3), "signed 3d ago (2026-11-27T12:00:00+00:00), older than the 2d the max_age of "
                                             "{policy} allows; verify the image again"),
    ("30d", "6h", NOW - dt.timedelta(hours=7), "signed 7h ago (2026-11-30T05:00:00+00:00), older than the 6h the max_age of "
                                               "verifier gpu-h200 in {policy} allows; verify the image again"),
    ("2d", None, NOW - dt.timedelta(days=1), None),
    (None, None, dt.datetime(2019, 1, 1, tzinfo=dt.timezone.utc), "signed 2890d 12h ago (2019-01-01T00:00:00+00:00), older than "
                                                                  "the 30d the max_age of {policy} allows; verify the image again"),
])
def test_a_statement_older_than_the_policy_allows_is_held_back_with_its_age(
        tmp_path: Path, policy_age: str | None, verifier_age: str | None, signed: dt.datetime, why: str | None) -> None:
    key, _ = key_files(tmp_path / "keys", "gpu-h200")
    path = tmp_path / "keys" / "trust-policy.yaml"
    path.write_text("version: 1\n" + (f"max_age: {policy_age}\n" if policy_age else "") + "verifiers:\n"
                    f"  - {{name: gpu-h200, key: gpu-h200.pub, classes: [h200]{', max_age: ' + verifier_age if verifier_age else ''}}}\n")
    policy = trust.load_policy(path)
    signer = signing.load_signing_key(key, {})
    assert signer is not None
    report = signed_report(tmp_path / "r", signer, [("h200", H200, signed, "r1")])
    got = gate_of(tmp_path, [report], policy)
    statement = report.parent / "c0" / "verify.dsse.json"
    assert got == (None if why is None else "held back by the fleet: class h200 has no result that counts: its signed result "
                   f"is too old: {statement}: " + why.format(policy=path))


def test_a_statement_signed_in_the_future_is_refused(tmp_path: Path) -> None:
    signers, policy = keys(tmp_path / "keys", {"gpu-h200": ["h200"]})
    report = signed_report(tmp_path / "r", signers["gpu-h200"], [("h200", H200, NOW + dt.timedelta(days=400), "r1")])
    assert gate_of(tmp_path, [report], policy) == (
        f"held back by the fleet: class h200 failed: its signed result is refused: {report.parent / 'c0' / 'verify.dsse.json'}: "
        "signed at 2028-01-04T12:00:00+00:00, 400d in the future: the verifier's clock is wrong; fix it and verify again")


def test_an_unbelievable_result_is_never_outvoted_by_an_older_pass(tmp_path: Path) -> None:
    signers, policy = keys(tmp_path / "keys", {"gpu-h200": ["h200"]})
    report = signed_report(tmp_path / "r", signers["gpu-h200"], [("h200", H200, T1, "r1"), ("h200", FAILED, T2, "r2")])
    (report.parent / "c1" / "verify.dsse.json").write_bytes(b"{}")  # the newer failure's statement spoiled
    assert gate_of(tmp_path, [report], policy).startswith(  # type: ignore[union-attr]
        "held back by the fleet: class h200 failed: its signed result is refused: ")


POLICY_FLEET = "fleet:\n  require: [l40s]\n  classes:\n    l40s: {gpu: NVIDIA L40S, gpus: 1}\n"


@pytest.mark.parametrize("report, why", [
    (good_report(gpus=["NVIDIA L40S"]), None),
    (good_report(gpus=[]), "held back by the fleet: class l40s failed: signed by gpu: the job saw 0 GPU(s); the class promises 1"),
    (good_report(gpus=["NVIDIA H200"]), "held back by the fleet: class l40s failed: signed by gpu: the job ran on NVIDIA H200, "
                                        "not the class's NVIDIA L40S: check the placement"),
])
def test_without_a_fleet_file_the_trust_policy_says_what_a_class_must_be(tmp_path: Path, report: dict[str, Any], why: str | None) -> None:
    key, _ = key_files(tmp_path / "keys", "gpu")
    path = tmp_path / "keys" / "trust-policy.yaml"
    path.write_text("version: 1\nverifiers:\n  - {name: gpu, key: gpu.pub, classes: [l40s]}\n" + POLICY_FLEET)
    signer = signing.load_signing_key(key, {})
    assert signer is not None
    rep = signed_report(tmp_path / "r", signer, [("l40s", report, T2, "r1")])
    loaded = gate.load_gate(None, [rep], trust.load_policy(path), ["r1"], now=NOW)
    assert loaded is not None and loaded.requires == ("l40s",) and loaded.held_back(DIGEST) == why


def test_without_a_rule_or_a_run_fleet_evidence_moves_nothing(tmp_path: Path) -> None:
    signers, policy = keys(tmp_path / "keys", {"gpu-h200": ["h200"]})
    report = signed_report(tmp_path / "r", signers["gpu-h200"], [("h200", H200, T2, "r1")])  # its report says requires: [h200]
    with pytest.raises(UserError) as err:
        gate.load_gate(None, [report], policy, ["r1"])
    assert str(err.value) == f"{report}: {gate.NEEDS_RULE}"
    (tmp_path / "fleet.yaml").write_text(FLEET)
    with pytest.raises(UserError) as err:
        gate.load_gate(tmp_path / "fleet.yaml", [report], policy)
    assert str(err.value) == f"{report}: {gate.NEEDS_RUN}"
    with pytest.raises(UsageError) as usage:
        gate.load_gate(tmp_path / "fleet.yaml", [report], policy, ["r1; rm -rf /"])
    assert str(usage.value) == ("--fleet-run 'r1; rm -rf /': not a fleet run id (letters, digits, '.', '_', '-'; e.g. "
                                "20261130T101500Z-1a2b3c)")


def test_a_report_the_verifier_will_not_sign_fails_its_cell_with_no_statement(tmp_path: Path) -> None:
    signers, _ = keys(tmp_path / "keys", {"gpu-h200": ["h200"]})
    nan = H200 | {"checks": [H200["checks"][0] | {"value": float("nan")}]}  # read as a number, never signed
    report = fleet_run(tmp_path, signers["gpu-h200"], nan)
    cell = json.loads(report.read_text())["cells"][0]
    assert (cell["status"], cell["statement"]) == ("fail", None)
    assert cell["reason"].startswith("the verify report:1:") and cell["reason"].endswith(
        ": NaN is not JSON (NaN and Infinity are not numbers JSON allows); nothing was signed: the image under test "
        "wrote a report imagesmith does not believe")
    assert not list(report.parent.rglob("verify.dsse.json"))


def test_a_report_the_parse_refuses_is_no_report_and_gets_no_statement(tmp_path: Path) -> None:
    # mode.gpus "1": the node's report is refused where the host reads it (the parse), so the cell has no report
    signers, _ = keys(tmp_path / "keys", {"gpu-h200": ["h200"]})
    report = fleet_run(tmp_path, signers["gpu-h200"], H200 | {"mode": {"mode": "gpu", "gpus": "1"}})
    cell = json.loads(report.read_text())["cells"][0]
    assert (cell["status"], cell["statement"], cell["report"]) == ("fail", None, None)
    assert cell["reason"].startswith("the job ended (COMPLETED, exit status 0) without a verify report")
    assert not list(report.parent.rglob("verify.dsse.json"))
