"""The release gate: every image's SBOM (from the real bookworm inventory) matched against the
real OSV fixture before it is pushed; the VEX document, the predicate field, evidence counts."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from imagesmith.model import advisories, vulns
from imagesmith.stages.evidence import attestation, evidence, reuse, vex, vulngate
from imagesmith.stages.evidence.attestation import Statement
from imagesmith.stages.release import publish
from tests.doubles import verify_report
from tests.unit.stages.release.test_publish import FakeEngine, FakeRegistry, World, item

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
INVENTORY = json.loads((FIXTURES / "inventory" / "debian12-cpu-base.json").read_text())["inventory"]
NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)
AGELESS = 3650 * 86400  # the fixture's newest record is from 2025-08-29: these tests are not about its age
DEFAULT = vulns.Policy(max_age=AGELESS)
ZLIB = "DEBIAN-CVE-2023-45853 (CVE-2023-45853) critical: zlib 1:1.2.13.dfsg-1, no fixed version"


@pytest.fixture()
def world(tmp_path: Path) -> World:
    reg = FakeRegistry()
    return World(reg, FakeEngine(reg), tmp_path, [])


def gate(policy: vulns.Policy = DEFAULT) -> vulngate.Gate:
    return vulngate.Gate([advisories.load(FIXTURES / "osv")], policy, clock=lambda: NOW)


def release(world: World, policy: vulns.Policy, *items: publish.Item) -> dict[str, Any]:
    measured: list[str] = []

    def inventory(image_id: str) -> dict[str, Any]:
        measured.append(image_id)
        return dict(INVENTORY)

    step = publish.vulnerability_step(gate(policy), "reg.test:5000/ml/pytorch", {}, inventory, world.out)
    data = world.release(list(items), vulnerability_gate=step)
    assert len(measured) == len({i.image_id for i in items if i.verified})  # measured once per image
    return data


def test_a_critical_finding_keeps_the_target_back_with_the_reason(world: World) -> None:
    data = release(world, DEFAULT, item("2.9.1"))
    t = data["targets"][0]
    assert (t["status"], t["digest"], t["reference"]) == ("vulnerable", None, "")
    assert t["error"] == (f"not released: known vulnerabilities at or above critical: {ZLIB}: at or above the threshold critical; "
                          "upgrade the package, or allow it with a reason and an expiry date (vulnerabilities.allow)")
    assert t["vulnerabilities"]["counts"] == {"critical": 1, "high": 0, "medium": 0, "low": 0, "unknown": 0}
    assert t["vulnerabilities"]["blocking"] == 1 and not data["ok"]
    assert world.reg.writes == []  # nothing pushed
    assert "vulnerable" in (world.out / "release.md").read_text()


def test_an_allowed_finding_is_released_and_recorded(world: World) -> None:
    allow = vulns.Allowance("CVE-2023-45853", "no MiniZip in the image; zlib's inflate/deflate only", dt.date(2027, 3, 1))
    data = release(world, vulns.Policy(allow=(allow,), max_age=AGELESS), item("2.9.1"), item("2.9.1", "cv", verified=False))
    t = data["targets"][0]
    assert t["status"] == "pushed" and data["targets"][1]["status"] == "not-verified"
    assert t["vulnerabilities"]["blocking"] == 0
    assert [(f["id"], f["allowed"]) for f in t["vulnerabilities"]["findings"]] == [
        ("DEBIAN-CVE-2023-45853", {"id": "CVE-2023-45853", "reason": "no MiniZip in the image; zlib's inflate/deflate only",
                                  "expires": "2027-03-01"})]
    assert t["vulnerabilities"]["snapshots"][0]["date"] == "2025-08-29T19:45:46Z"


def test_an_expired_allowance_keeps_it_back(world: World) -> None:
    allow = vulns.Allowance("DEBIAN-CVE-2023-45853", "no MiniZip", dt.date(2026, 11, 30))
    t = release(world, vulns.Policy(allow=(allow,), max_age=AGELESS), item("2.9.1"))["targets"][0]
    assert t["status"] == "vulnerable" and "its allowance expired on 2026-11-30" in t["error"]


def test_an_image_whose_inventory_cannot_be_measured_is_not_released_blind(world: World) -> None:
    from imagesmith.errors import ContainerRefused

    def inventory(image_id: str) -> dict[str, Any]:
        raise ContainerRefused("the engine would not start the container: no python3 in the image")

    step = publish.vulnerability_step(gate(), "reg.test:5000/ml/pytorch", {}, inventory, world.out)
    data = world.release([item("2.9.1"), item("2.9.1", "cv")], vulnerability_gate=step)
    assert [(t["status"], t["error"]) for t in data["targets"]] == [
        ("failed", "not released: its known vulnerabilities could not be matched (the engine would not start the container: "
                   "no python3 in the image)")] * 2
    assert world.reg.writes == []


def result(policy: vulns.Policy = DEFAULT) -> vulngate.ImageResult:
    from imagesmith.stages.evidence import sbom

    inv = sbom.inventory_from(INVENTORY)
    identity = sbom.ImageIdentity("reg.test:5000/ml/pytorch", "sha256:" + "ab" * 32, "sha256:" + "cd" * 32, "imagesmith/debian:bookworm",
                                  "2026-11-30T00:00:00Z", {})
    return gate(policy)(json.loads(sbom.build_bom(inv, identity)))


def test_the_vex_document_links_into_the_sbom() -> None:
    found = result()
    doc = json.loads(vex.document("reg.test:5000/ml/pytorch", "sha256:" + "ab" * 32, found.findings, found.snapshots, found.matched_at))
    [v] = doc["vulnerabilities"]
    link = vex.sbom_link("reg.test:5000/ml/pytorch", "sha256:" + "ab" * 32)
    assert link.startswith("urn:cdx:") and link.endswith("/1#")
    assert v["id"] == "DEBIAN-CVE-2023-45853" and v["ratings"] == [{"score": 9.8, "severity": "critical"}]
    assert sorted(a["ref"].split("@")[0] for a in v["affects"]) == [link + "pkg:deb/debian/zlib1g", link + "pkg:deb/debian/zlib1g-dev"]
    assert v["recommendation"] == "no fixed version is known" and "analysis" not in v
    assert doc["metadata"]["properties"][0]["value"].startswith(str(FIXTURES / "osv") + " sha256:")
    assert vex.counts(doc) == {"critical": 1, "high": 0, "medium": 0, "low": 0, "unknown": 0, "allowed": 0}


def test_the_vex_document_validates_against_cyclonedx_1_6() -> None:
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    allow = vulns.Allowance("CVE-2023-45853", "no MiniZip", dt.date(2027, 3, 1))
    found = result(vulns.Policy(allow=(allow,), max_age=AGELESS))
    data = vex.document("reg.test:5000/ml/pytorch", "sha256:" + "ab" * 32, found.findings, found.snapshots, found.matched_at)
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(data.decode()) is None
    assert vex.counts(json.loads(data))["allowed"] == 1


def test_the_predicate_field_passes_the_verification_schema() -> None:
    report = {"tier": "quick", "summary": {"ok": True}, "started_at": "2026-12-01T12:00:00Z", "environment": {},
              "vulnerabilities": result().predicate()}
    predicate = attestation.verification_predicate(verify_report(report))
    assert attestation.predicate_problems(predicate) == []
    assert predicate["vulnerabilities"] == {
        "snapshots": [{"location": str(FIXTURES / "osv"), "digest": advisories.load(FIXTURES / "osv").digest,
                       "date": "2025-08-29T19:45:46Z", "advisories": 4}],
        "matched_at": "2026-12-01T12:00:00+00:00", "threshold": "critical",
        "counts": {"critical": 1, "high": 0, "medium": 0, "low": 0, "unknown": 0}, "blocking": 1}
    assert attestation.predicate_problems(predicate | {"vulnerabilities": {"counts": {"critical": -1}}}) != []


def vex_attestation(found: vulngate.ImageResult) -> evidence.Attestation:
    doc = json.loads(vex.document("h/r", "sha256:" + "ab" * 32, found.findings, found.snapshots, found.matched_at))
    st = Statement("h/r", "sha256:" + "ab" * 32, attestation.VEX_PREDICATE, doc)
    return evidence.Attestation("sha256:" + "11" * 32, evidence.VEX_ARTIFACT, 10, "vulnerabilities", attestation.VEX_PREDICATE,
                                statement=st)


def test_imagesmith_evidence_counts_by_severity() -> None:
    found = evidence.Evidence("h/r", "sha256:" + "ab" * 32, "m", 1, "referrers API", (), [vex_attestation(result())])
    assert found.to_json()["vulnerabilities"] == [{"critical": 1, "high": 0, "medium": 0, "low": 0, "unknown": 0, "allowed": 0}]


@pytest.mark.parametrize(("other", "same"), [("same", True), ("allowed", False), ("no-snapshot", False)])
def test_what_counts_as_the_same_vulnerability_document(other: str, same: bool) -> None:
    base = result()
    doc = evidence.vex_document("h/r", "sha256:" + "ab" * 32, vex.document("h/r", "sha256:" + "ab" * 32, base.findings, base.snapshots,
                                                                           base.matched_at), "t")
    if other == "allowed":
        base = result(vulns.Policy(allow=(vulns.Allowance("CVE-2023-45853", "no MiniZip", dt.date(2027, 3, 1)),), max_age=AGELESS))
    later = vex.document("h/r", "sha256:" + "ab" * 32, base.findings, () if other == "no-snapshot" else base.snapshots,
                         base.matched_at + dt.timedelta(days=1))
    st = Statement("h/r", "sha256:" + "ab" * 32, attestation.VEX_PREDICATE, json.loads(later))
    assert doc.same_as(st, b"") is same


# -- verify --reuse-evidence: the vulnerability match must be recent enough ------------------------------------


def signed_verification(vulnerabilities: Any) -> evidence.Attestation:
    p = {"tier": "quick", "mode": "cpu", "passed": True, "gpu": None, "started_at": "2026-11-01T00:00:00Z",
         "checks": [{"id": "versions.torch", "status": "pass"}]}
    if vulnerabilities is not None:
        p["vulnerabilities"] = vulnerabilities
    st = Statement("h/r", "sha256:" + "ab" * 32, attestation.VERIFICATION_PREDICATE, p)
    return evidence.Attestation("sha256:" + "cd" * 32, evidence.VERIFICATION_ARTIFACT, 10, "verification", signed_by=("k1",), statement=st)


@pytest.mark.parametrize(("vulnerabilities", "max_age", "why"), [
    ({"matched_at": "2026-11-25T12:00:00+00:00"}, 7, None),
    ({"matched_at": "2026-11-20T12:00:00+00:00"}, 7, "its vulnerabilities were matched 11 days ago, more than the 7 the matrix allows (vulnerabilities.max_age_days)"),
    ({"matched_at": "2026-11-20T12:00:00Z"}, 30, None),
    (None, 7, "it carries no known-vulnerability match"),
    ({"matched_at": "yesterday"}, 7, "its vulnerability match time 'yesterday' is not a time"),
])
def test_reuse_refuses_a_vulnerability_match_older_than_the_policy(vulnerabilities: Any, max_age: int, why: str | None) -> None:
    a = signed_verification(vulnerabilities)
    assert reuse.stale_vulnerabilities(a.statement.predicate if a.statement else {}, max_age, NOW) == why
    found = evidence.Evidence("h/r", "sha256:" + "ab" * 32, "m", 1, "referrers API", ("k1",), [a])
    assert (reuse.reusable(found, reuse.Wanted("quick", None, 0, max_age_days=max_age, now=NOW))[0] is a) is (why is None)
    assert reuse.reusable(found, reuse.Wanted("quick", None, 0))[0] is a  # without a policy, age is not asked


# -- the reports list the findings -------------------------------------------------------------------------------


def run_of(release_json: dict[str, Any]) -> Any:
    from imagesmith.model import releasereport
    from imagesmith.report.model import Run, Target

    rel = releasereport.parse(release_json)
    return Run("run", "run-report.json", "", "matrix.yaml", tuple(Target(t, release=r) for t, r in rel.by_target().items()), rel)


def test_the_reports_list_the_findings(world: World) -> None:
    from imagesmith import report
    from imagesmith.report import markdown

    allow = vulns.Allowance("CVE-2023-45853", "no MiniZip <script>", dt.date(2027, 3, 1))
    allowed = release(world, vulns.Policy(allow=(allow,), max_age=AGELESS), item("2.9.1"))
    md = markdown.release_document(allowed)
    assert "| 2.9.1-base | DEBIAN-CVE-2023-45853 | critical | zlib 1:1.2.13.dfsg-1 | - | until 2027-03-01: no MiniZip \\<script> |" in md, md
    blocked_world = World(FakeRegistry(), FakeEngine(FakeRegistry()), world.out / "b", [])
    blocked = release(blocked_world, DEFAULT, item("2.9.1"))
    assert "| 2.9.1-base | DEBIAN-CVE-2023-45853 | critical | zlib 1:1.2.13.dfsg-1 | - | blocks |" in markdown.release_document(blocked)
    xml = report.to_junit(run_of(blocked))
    assert "DEBIAN-CVE-2023-45853 critical: zlib 1:1.2.13.dfsg-1, fixed in -" in xml and 'type="release"' in xml
    page = report.to_html(run_of(allowed))
    assert "<h3>Known vulnerabilities</h3>" in page and "DEBIAN-CVE-2023-45853" in page
    assert "no MiniZip &lt;script&gt;" in page and "no MiniZip <script>" not in page


def test_imagesmith_evidence_prints_the_counts(capsys: pytest.CaptureFixture[str]) -> None:
    from imagesmith.cli.evidence import print_evidence

    allow = vulns.Allowance("CVE-2023-45853", "no MiniZip", dt.date(2027, 3, 1))
    found = evidence.Evidence("h/r", "sha256:" + "ab" * 32, "m", 1, "referrers API", (),
                              [vex_attestation(result(vulns.Policy(allow=(allow,), max_age=AGELESS)))])
    print_evidence(found)
    out = capsys.readouterr().out
    assert "vulnerabilities: 1 critical, 0 high, 0 medium, 0 low, 0 unknown (1 allowed by the matrix)\n" in out


# -- issue 34: snapshots expire, allowances are precise ---------------------------------------------------------------

OLD = (f"the advisory snapshot {FIXTURES / 'osv'} is 458d old (its newest record was modified at 2025-08-29T19:45:46Z), older "
       "than vulnerabilities.max_age (5d): advisories published since are not in it; mirror a fresh one (OSV's <ecosystem>/all.zip)")


def test_a_stale_snapshot_keeps_every_target_back(world: World) -> None:
    allow = vulns.Allowance("CVE-2023-45853", "no MiniZip", dt.date(2027, 3, 1))
    t = release(world, vulns.Policy(allow=(allow,)), item("2.9.1"))["targets"][0]
    assert t["status"] == "vulnerable"
    assert t["error"] == (f"not released: known vulnerabilities not judged: {OLD}, or set vulnerabilities.stale: warn to release "
                          "on it anyway")
    assert t["vulnerabilities"]["blocking"] == 0 and world.reg.writes == []


def test_a_stale_snapshot_where_the_matrix_allows_it_is_recorded(world: World) -> None:
    allow = vulns.Allowance("CVE-2023-45853", "no MiniZip", dt.date(2027, 3, 1))
    t = release(world, vulns.Policy(allow=(allow,), stale="warn"), item("2.9.1"))["targets"][0]
    assert t["status"] == "pushed"
    assert t["vulnerabilities"]["stale"] == [f"{OLD} (vulnerabilities.stale: warn: judged on it anyway)"]


def test_an_expired_allowance_another_outlives_is_recorded(world: World) -> None:
    old = vulns.Allowance("DEBIAN-CVE-2023-45853", "no MiniZip", dt.date(2026, 1, 1), package="zlib")
    new = vulns.Allowance("CVE-2023-45853", "no MiniZip", dt.date(2027, 3, 1), versions="<1:1.3")
    t = release(world, vulns.Policy(allow=(old, new), max_age=AGELESS), item("2.9.1"))["targets"][0]
    assert t["status"] == "pushed"
    assert t["vulnerabilities"]["notes"] == [
        f"{ZLIB}: the allowance DEBIAN-CVE-2023-45853 for zlib expired on 2026-01-01; CVE-2023-45853 <1:1.3 covers it until "
        "2027-03-01: remove the expired one"]


def test_the_release_gate_refuses_a_record_from_the_future_before_anything_is_pushed(write_matrix: Any,
                                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from imagesmith.cli.common import vulnerability_gate
    from imagesmith.model import matrix

    folder = write_matrix("").parent / "osv"
    folder.mkdir()
    (folder / "a.json").write_text(json.dumps({"id": "GHSA-x", "modified": "2099-01-01T00:00:00Z"}))
    m = matrix.load(write_matrix('version: 1\nmatrix: {torch: ["2.9"], cuda: [cpu], python: ["3.11"], os: [debian12]}\n'
                                 "sources: {advisories: [osv]}\n"))
    with pytest.raises(advisories.SnapshotError) as info:
        vulnerability_gate(m)
    assert str(info.value).startswith(f"{folder}: a.json: modified: '2099-01-01T00:00:00Z' is later than this host's clock")


def test_the_release_gate_says_a_stale_snapshot_keeps_every_target_back(write_matrix: Any, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    from imagesmith.cli.common import vulnerability_gate
    from imagesmith.model import matrix

    shutil.copytree(FIXTURES / "osv", write_matrix("").parent / "osv")
    m = matrix.load(write_matrix('version: 1\nmatrix: {torch: ["2.9"], cuda: [cpu], python: ["3.11"], os: [debian12]}\n'
                                 "sources: {advisories: [osv]}\n"))
    assert vulnerability_gate(m) is not None
    err = capsys.readouterr().err
    assert "error: the advisory snapshot " in err and err.rstrip().endswith("to release on it anyway: no target is released")
