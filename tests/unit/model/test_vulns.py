"""Known vulnerabilities: OSV ranges applied with each ecosystem's own version order, a real
snapshot (tests/fixtures/osv) matched against the SBOM of a measured image, severity, policy."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from imagesmith.model import advisories, vulns
from imagesmith.model.advisories import Event, Range
from imagesmith.stages.evidence import sbom

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
OSV = FIXTURES / "osv"


def rng(*events: tuple[str, str], kind: str = "ECOSYSTEM") -> Range:
    return Range(kind, tuple(Event(k, v) for k, v in events))


def key(ecosystem: str, kind: str = "ECOSYSTEM") -> vulns.Key:
    found = vulns.version_key(ecosystem, kind)
    assert found is not None
    return found


PYPI, DEBIAN, SEMVER = key("PyPI"), key("Debian:12"), key("PyPI", "SEMVER")

# (version, range, affected, fixed reported) against PEP 440 (packaging)
PYPI_RANGES = [
    ("2.5.1", rng(("introduced", "0"), ("fixed", "2.6.0")), True, "2.6.0"),
    ("2.5.1+cu124", rng(("introduced", "0"), ("fixed", "2.6.0")), True, "2.6.0"),  # a local version
    ("2.6.0+cu124", rng(("introduced", "0"), ("fixed", "2.6.0")), False, None),
    ("2.6.0rc1", rng(("introduced", "0"), ("fixed", "2.6.0")), True, "2.6.0"),  # a pre-release comes before
    ("2.6.0.post1", rng(("introduced", "0"), ("fixed", "2.6.0")), False, None),
    ("2.6.0", rng(("introduced", "0"), ("fixed", "2.6.0")), False, None),
    ("1!0.1", rng(("introduced", "0"), ("fixed", "2.6.0")), False, None),  # an epoch outranks any release
    ("1.13.0", rng(("introduced", "1.0"), ("last_affected", "1.13.0")), True, None),
    ("1.13.1", rng(("introduced", "1.0"), ("last_affected", "1.13.0")), False, None),
    ("0.9", rng(("introduced", "1.0"), ("fixed", "1.2")), False, None),
    # two intervals: [1.0, 1.2) and [2.0, 2.3)
    ("2.1", rng(("introduced", "1.0"), ("fixed", "1.2"), ("introduced", "2.0"), ("fixed", "2.3")), True, "2.3"),
    ("1.5", rng(("introduced", "1.0"), ("fixed", "1.2"), ("introduced", "2.0"), ("fixed", "2.3")), False, None),
    ("1.1", rng(("fixed", "2.3"), ("introduced", "1.0"), ("fixed", "1.2"), ("introduced", "2.0")), True, "1.2"),  # events out of order
    ("3.0", rng(("introduced", "0"), ("limit", "3.0")), False, None),
    ("2.9", rng(("introduced", "0"), ("limit", "3.0")), True, None),
]


@pytest.mark.parametrize(("version", "r", "affected", "fixed"), PYPI_RANGES)
def test_pypi_ranges(version: str, r: Range, affected: bool, fixed: str | None) -> None:
    assert vulns.in_range(version, r, PYPI) == vulns.Hit(affected, fixed)


DEBIAN_RANGES = [
    ("1:1.2.13.dfsg-1", rng(("introduced", "0")), True, None),  # unfixed in bookworm
    ("1:1.2.13.dfsg-1", rng(("introduced", "0"), ("fixed", "1:1.3.dfsg-2")), True, "1:1.3.dfsg-2"),
    ("1.3.dfsg-9", rng(("introduced", "0"), ("fixed", "1:1.3.dfsg-2")), True, "1:1.3.dfsg-2"),  # no epoch < epoch 1
    ("2.36-9+deb12u14", rng(("introduced", "0"), ("fixed", "2.36-9+deb12u3")), False, None),  # u14 > u3, not as strings
    ("2.36-9+deb12u2", rng(("introduced", "0"), ("fixed", "2.36-9+deb12u3")), True, "2.36-9+deb12u3"),
    ("3.0.22-1~deb12u2", rng(("introduced", "0"), ("fixed", "3.0.22-1")), True, "3.0.22-1"),  # ~ sorts before
    ("3.0.22-1", rng(("introduced", "0"), ("fixed", "3.0.22-1~deb12u1")), False, None),
    ("252.39-1~deb12u2", rng(("introduced", "252.39-1~deb12u1"), ("last_affected", "252.39-1~deb12u2")), True, None),
]


@pytest.mark.parametrize(("version", "r", "affected", "fixed"), DEBIAN_RANGES)
def test_debian_ranges(version: str, r: Range, affected: bool, fixed: str | None) -> None:
    assert vulns.in_range(version, r, DEBIAN) == vulns.Hit(affected, fixed)


@pytest.mark.parametrize(("version", "affected"), [("1.2.3", True), ("v1.2.3", True), ("1.3.0-rc.1", True), ("1.3.0", False)])
def test_semver_ranges(version: str, affected: bool) -> None:
    assert vulns.in_range(version, rng(("introduced", "1.0.0"), ("fixed", "1.3.0"), kind="SEMVER"), SEMVER).affected is affected


@pytest.mark.parametrize(("version", "r"), [("2.5.1", rng(("introduced", "0"), ("fixed", "not a version!"))),
                                            ("not a version!", rng(("introduced", "0"), ("fixed", "2.6.0")))])
def test_a_version_of_another_ecosystem_is_not_guessed_at(version: str, r: Range) -> None:
    with pytest.raises(ValueError):
        vulns.in_range(version, r, PYPI)


# Debian pairs cross-checked against dpkg itself: python-debian must order them as dpkg does.
DEBIAN_PAIRS = [
    ("1:1.2.13.dfsg-1", "1.3.dfsg-2"), ("1.0~rc1", "1.0"), ("1.0~~", "1.0~"), ("1.0", "1.0-0"), ("1.0-1", "1.0-1+b1"),
    ("2.36-9+deb12u3", "2.36-9+deb12u14"), ("3.0.22-1~deb12u2", "3.0.22-1"), ("5.2.15-2", "5.2.15-2+b13"),
    ("1.0a", "1.0+"), ("1.0.", "1.0a"), ("2:0.1", "1:9.9"), ("0:1.0", "1.0"), ("1.0-1ubuntu0.22.04.1", "1.0-1ubuntu1"),
    ("4:12.2.0-3", "12.2.0-14+deb12u1"), ("1.13.4~dfsg+~1.11.4-3", "1.13.4~dfsg+~1.11.4-3+b1"), ("10.0.0", "10.0.0~rc"),
]


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="dpkg is not installed")
@pytest.mark.parametrize(("a", "b"), DEBIAN_PAIRS)
def test_debian_order_agrees_with_dpkg(a: str, b: str) -> None:
    for op, holds in (("lt", DEBIAN(a) < DEBIAN(b)), ("eq", DEBIAN(a) == DEBIAN(b)), ("gt", DEBIAN(a) > DEBIAN(b))):
        dpkg = subprocess.run(["dpkg", "--compare-versions", a, op, b], check=False).returncode == 0
        assert dpkg is holds, f"{a} {op} {b}: dpkg says {dpkg}, python-debian {holds}"


# -- packages from package URLs ------------------------------------------------------------------------

PURLS = [
    ("pkg:pypi/Typing_Extensions@4.16.0", vulns.Package("PyPI", "typing-extensions", "4.16.0", "r")),
    ("pkg:deb/debian/zlib1g@1:1.2.13.dfsg-1?arch=amd64&distro=debian-12&upstream=zlib%401:1.2.13.dfsg-1",
     vulns.Package("Debian:12", "zlib", "1:1.2.13.dfsg-1", "r")),
    ("pkg:deb/debian/bash@5.2.15-2+b13?arch=amd64&distro=debian-12&upstream=bash%405.2.15-2",
     vulns.Package("Debian:12", "bash", "5.2.15-2", "r")),
    ("pkg:deb/ubuntu/openssl@3.0.2-0ubuntu1.18?arch=amd64&distro=ubuntu-22.04", vulns.Package("Ubuntu:22.04", "openssl", "3.0.2-0ubuntu1.18", "r")),
    ("pkg:deb/debian/zlib1g@1.0?arch=amd64", None),  # no distro: no release to match
    ("pkg:oci/x@sha256:abc", None),
    ("pkg:pypi/torch", None),  # no version
    ("not a purl", None),
]


@pytest.mark.parametrize(("purl", "package"), PURLS)
def test_package_from_purl(purl: str, package: vulns.Package | None) -> None:
    assert vulns.package_from_purl(purl, "r") == package


# -- the real snapshot against the measured bookworm image ---------------------------------------------------


def bookworm_bom() -> dict[str, object]:
    doc = json.loads((FIXTURES / "inventory" / "debian12-cpu-base.json").read_text())
    inv = sbom.inventory_from(doc["inventory"])
    image = sbom.ImageIdentity("127.0.0.1:5000/imagesmith/local", "sha256:" + "a" * 64, doc["image_id"],
                               "imagesmith/debian:bookworm", "2026-11-30T00:00:00Z", {})
    return json.loads(sbom.build_bom(inv, image))  # type: ignore[no-any-return]


def test_the_bookworm_image_has_zlib_unfixed_and_glibc_fixed() -> None:
    snapshot = advisories.load(OSV)
    found = vulns.match(snapshot.advisories, vulns.packages_from_bom(bookworm_bom()))
    assert [(f.id, f.severity, f.score, f.package, f.version, f.fixed) for f in found] == [
        ("DEBIAN-CVE-2023-45853", "critical", 9.8, "zlib", "1:1.2.13.dfsg-1", None)]
    assert sorted(r.split("@")[0] for r in found[0].refs) == ["pkg:deb/debian/zlib1g", "pkg:deb/debian/zlib1g-dev"]
    assert found[0].aliases == ("CVE-2023-45853",)


@pytest.mark.parametrize(("version", "ids"), [
    ("2.5.1+cu124", [("GHSA-53q9-r3pm-6pq6", "critical", "2.6.0")]),
    ("2.13.0+cpu", []),  # the torch the bookworm image measured
    ("1.12.1", [("GHSA-53q9-r3pm-6pq6", "critical", "2.6.0"), ("PYSEC-2022-43015", "unknown", "1.13.1")]),
    ("1.13.0+cu117", [("GHSA-53q9-r3pm-6pq6", "critical", "2.6.0"), ("PYSEC-2022-43015", "unknown", "1.13.1")]),  # versions list, local
    ("1.13.1", [("GHSA-53q9-r3pm-6pq6", "critical", "2.6.0")]),  # fixed in an older version
])
def test_torch_versions_against_the_snapshot(version: str, ids: list[tuple[str, str, str]]) -> None:
    found = vulns.match(advisories.load(OSV).advisories, [vulns.Package("PyPI", "torch", version, "t")])
    assert [(f.id, f.severity, f.fixed) for f in found] == ids


def test_a_withdrawn_advisory_is_ignored() -> None:
    adv = advisories.load(OSV).advisories
    withdrawn = [a if a.id != "GHSA-53q9-r3pm-6pq6" else advisories.Advisory(**{**a.__dict__, "withdrawn": "2025-09-01T00:00:00Z"})
                 for a in adv]
    assert vulns.match(withdrawn, [vulns.Package("PyPI", "torch", "2.5.1", "t")]) == []


# -- severity ---------------------------------------------------------------------------------------------------

SEVERITY = [
    ((), "CRITICAL", ("critical", None)),
    ((), "MODERATE", ("medium", None)),
    ((), None, ("unknown", None)),
    (("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",), None, ("critical", 9.8)),
    (("CVSS:3.1/AV:L/AC:H/PR:H/UI:R/S:U/C:L/I:N/A:N",), "HIGH", ("high", 1.8)),  # the label outranks a low vector (1.8: 0.333 exploitability + 1.41 impact, rounded up)
    (("CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N",), "CRITICAL", ("critical", 9.3)),
    (("AV:N/AC:L/Au:N/C:P/I:P/A:P",), None, ("high", 7.5)),  # CVSS v2
    (("CVSS:3.1/garbage",), "LOW", ("low", None)),
]


@pytest.mark.parametrize(("vectors", "label", "expected"), SEVERITY)
def test_severity(vectors: tuple[str, ...], label: str | None, expected: tuple[str, float | None]) -> None:
    adv = advisories.Advisory("X-1", "2025-01-01T00:00:00Z", (), "", None, (), label, vectors, "x.json")
    assert vulns.severity(adv) == expected


# -- the policy --------------------------------------------------------------------------------------------------

TORCH = vulns.Finding("GHSA-53q9-r3pm-6pq6", ("CVE-2025-32434",), "", "critical", 9.3, "PyPI", "torch", "2.5.1", "2.6.0", ("t",))
MEDIUM = vulns.Finding("GHSA-m", (), "", "medium", 5.0, "PyPI", "jinja2", "3.1.3", "3.1.4", ("t",))
TODAY = dt.date(2026, 12, 1)
LABEL = "GHSA-53q9-r3pm-6pq6 (CVE-2025-32434) critical: torch 2.5.1, fixed in 2.6.0"

POLICIES = [
    (vulns.Policy(), [f"{LABEL}: at or above the threshold critical; upgrade the package, or allow it with a reason and an expiry date (vulnerabilities.allow)", None]),
    (vulns.Policy("medium"), [f"{LABEL}: at or above the threshold critical; upgrade the package, or allow it with a reason and an expiry date (vulnerabilities.allow)".replace("threshold critical", "threshold medium"),
                              "GHSA-m medium: jinja2 3.1.3, fixed in 3.1.4: at or above the threshold medium; upgrade the package, or allow it with a reason and an expiry date (vulnerabilities.allow)"]),
    (vulns.Policy(allow=(vulns.Allowance("CVE-2025-32434", "trusted models only", dt.date(2027, 3, 1)),)), [None, None]),
    (vulns.Policy(allow=(vulns.Allowance("GHSA-53q9-r3pm-6pq6", "trusted models only", dt.date(2026, 11, 30)),)),
     [f"{LABEL}: its allowance expired on 2026-11-30; upgrade the package, or renew the allowance with a reason (vulnerabilities.allow)", None]),
]


@pytest.mark.parametrize(("policy", "failures"), POLICIES)
def test_judge(policy: vulns.Policy, failures: list[str | None]) -> None:
    assert [v.failure for v in vulns.judge([TORCH, MEDIUM], policy, TODAY)] == failures


def test_an_allowance_travels_with_its_finding() -> None:
    allowance = vulns.Allowance("CVE-2025-32434", "trusted models only", dt.date(2027, 3, 1))
    verdict = vulns.judge([TORCH], vulns.Policy(allow=(allowance,)), TODAY)[0]
    assert verdict.finding.allowed == allowance
    assert verdict.finding.to_json()["allowed"] == {"id": "CVE-2025-32434", "reason": "trusted models only", "expires": "2027-03-01"}


def test_counts_by_severity() -> None:
    assert vulns.counts([TORCH, MEDIUM, TORCH]) == {"critical": 2, "high": 0, "medium": 1, "low": 0, "unknown": 0}


# -- issue 34, outcome 2: each ecosystem's version rules, local versions included ----------------------------------

# (package version, event, bound, affected). The range is {introduced: 0, <event>: bound} ({introduced: bound} alone
# for introduced). torch publishes every build with a local label (+cpu, +cu128): PEP 440 ignores it against a
# specifier, so <=2.13.0 (last_affected) holds 2.13.0+cpu; fixed and limit are OSV's "before this version" in
# packaging's order (a pre-release comes before its release, which PEP 440's exclusive <V would leave out).
PEP440_TABLE = [
    ("2.13.0+cpu", "last_affected", "2.13.0", True),
    ("2.13.0+cu128", "last_affected", "2.13.0", True),
    ("2.13.0", "last_affected", "2.13.0", True),
    ("2.13.0rc1", "last_affected", "2.13.0", True),
    ("2.13.0.post1", "last_affected", "2.13.0", False),
    ("2.13.1+cpu", "last_affected", "2.13.0", False),
    ("2.13.0+cpu", "limit", "2.13.0", False),
    ("2.12.1+cu126", "limit", "2.13.0", True),
    ("2.13.0+cpu", "fixed", "2.13.0", False),
    ("2.12.9+cu126", "fixed", "2.13.0", True),
    ("2.13.0rc2+cpu", "fixed", "2.13.0", True),
    ("1!1.0+cpu", "fixed", "2.13.0", False),
    ("2.13.0+cpu", "introduced", "2.13.0", True),
    ("2.12.0+cpu", "introduced", "2.13.0", False),
]


def pep440_says(version: str, kind: str, bound: str) -> bool:
    """What packaging says, by the rule above: <= and >= as PEP 440 specifiers (local labels ignored), < in
    packaging's order of public versions."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    if kind == "last_affected":
        return SpecifierSet(f"<={bound}").contains(version, prereleases=True)
    if kind == "introduced":
        return SpecifierSet(f">={bound}").contains(version, prereleases=True)
    return Version(Version(version).public) < Version(bound)


def one_event(kind: str, bound: str) -> Range:
    return rng(("introduced", bound)) if kind == "introduced" else rng(("introduced", "0"), (kind, bound))


@pytest.mark.parametrize(("version", "kind", "bound", "affected"), PEP440_TABLE)
def test_pypi_events_agree_with_packaging(version: str, kind: str, bound: str, affected: bool) -> None:
    assert pep440_says(version, kind, bound) is affected, "the table disagrees with packaging"
    assert vulns.in_range(version, one_event(kind, bound), PYPI).affected is affected


def test_a_last_affected_torch_with_a_local_version_is_a_finding() -> None:
    adv = advisories.advisory_from({"id": "GHSA-x", "modified": "2026-11-30T00:00:00Z", "affected": [
        {"package": {"ecosystem": "PyPI", "name": "torch"}, "ranges": [
            {"type": "ECOSYSTEM", "events": [{"introduced": "2.13.0"}, {"last_affected": "2.13.0"}]}]}]}, "s", "x.json")
    found = vulns.match([adv], [vulns.Package("PyPI", "torch", "2.13.0+cpu", "t"), vulns.Package("PyPI", "torch", "2.12.0+cpu", "u")])
    assert [(f.id, f.version) for f in found] == [("GHSA-x", "2.13.0+cpu")]


DPKG_TABLE = [
    ("1:1.2.13.dfsg-1", "fixed", "1:1.3.dfsg-2", True),
    ("1.3.dfsg-9", "fixed", "1:1.3.dfsg-2", True),  # no epoch is epoch 0
    ("2.36-9+deb12u14", "fixed", "2.36-9+deb12u3", False),  # u14 > u3 as numbers
    ("3.0.22-1~deb12u2", "fixed", "3.0.22-1", True),  # ~ sorts before anything
    ("252.39-1~deb12u2", "last_affected", "252.39-1~deb12u2", True),
    ("252.39-1~deb12u2+b1", "last_affected", "252.39-1~deb12u2", False),  # a binNMU is after
    ("5.2.15-2+b13", "limit", "5.2.15-3", True),
    ("5.2.15-3", "limit", "5.2.15-3", False),
    ("2:0.1", "introduced", "1:9.9", True),
    ("1.0~rc1", "introduced", "1.0", False),
]


@pytest.mark.parametrize(("version", "kind", "bound", "affected"), DPKG_TABLE)
def test_debian_events_agree_with_dpkg_order(version: str, kind: str, bound: str, affected: bool) -> None:
    from debian.debian_support import Version

    v, b = Version(version), Version(bound)
    said = v <= b if kind == "last_affected" else v >= b if kind == "introduced" else v < b
    assert said is affected, "the table disagrees with python-debian"
    if shutil.which("dpkg"):
        op = {"last_affected": "le", "introduced": "ge"}.get(kind, "lt")
        assert (subprocess.run(["dpkg", "--compare-versions", version, op, bound], check=False).returncode == 0) is affected
    assert vulns.in_range(version, one_event(kind, bound), DEBIAN).affected is affected


# -- issue 34, outcome 1: one finding per vulnerability ------------------------------------------------------------

GROUPS = FIXTURES / "osv-groups"


def both() -> list[advisories.Advisory]:
    return [*advisories.load(OSV).advisories, *advisories.load(GROUPS).advisories]


def test_a_ghsa_and_a_pysec_record_of_one_cve_are_one_finding_with_the_group_severity() -> None:
    [f] = vulns.match(both(), [vulns.Package("PyPI", "torch", "2.5.1+cu124", "t")])
    assert (f.id, f.severity, f.score, f.fixed, f.aliases) == (
        "GHSA-53q9-r3pm-6pq6", "critical", 9.3, "2.6.0", ("CVE-2025-32434", "PYSEC-2025-TEST1"))
    assert [(r.id, r.severity) for r in f.records] == [("GHSA-53q9-r3pm-6pq6", "critical"), ("PYSEC-2025-TEST1", "unknown")]
    assert f.label() == "GHSA-53q9-r3pm-6pq6 (CVE-2025-32434, PYSEC-2025-TEST1) critical: torch 2.5.1+cu124, fixed in 2.6.0"
    assert vulns.counts([f]) == {"critical": 1, "high": 0, "medium": 0, "low": 0, "unknown": 0}


def test_a_dsa_and_a_debian_cve_record_are_one_finding() -> None:
    glibc = "pkg:deb/debian/libc6@2.36-9+deb12u2?arch=amd64&distro=debian-12&upstream=glibc%402.36-9%2Bdeb12u2"
    package = vulns.package_from_purl(glibc)
    assert package is not None
    [f] = vulns.match(both(), [package])
    assert (f.id, f.severity, f.score, f.fixed) == ("DEBIAN-CVE-2023-4911", "high", 7.8, "2.36-9+deb12u3")
    assert f.record_ids() == ("DEBIAN-CVE-2023-4911", "DSA-5514-1")
    assert f.aliases == ("CVE-2023-4911", "DSA-5514-1")
    assert [r.to_json() for r in f.records][1] == {"id": "DSA-5514-1", "severity": "unknown", "score": None, "fixed": "2.36-9+deb12u3"}


def record(ident: str, severity: str | None = None, **names: list[str]) -> advisories.Advisory:
    doc: dict[str, object] = {"id": ident, "modified": "2026-11-30T00:00:00Z", **names, "affected": [
        {"package": {"ecosystem": "PyPI", "name": "jinja2"}, "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}]}]}]}
    if severity:
        doc["database_specific"] = {"severity": severity}
    return advisories.advisory_from(doc, "s", ident + ".json")


# (records, the findings as (id, severity, record ids)): osv-scanner's internal/grouper test cases, with severities
GROUPING = [
    ([record("CVE-1", aliases=["FOO-1"]), record("FOO-1", "LOW"), record("FOO-2", "HIGH", aliases=["FOO-1"])],
     [("FOO-2", "high", ("FOO-2", "CVE-1", "FOO-1"))]),  # one through FOO-1, led by its most severe record
    ([record("BAR-1", aliases=["CVE-2", "CVE-3"]), record("BAR-2", "MODERATE", aliases=["CVE-3", "CVE-4"]), record("BAR-3", aliases=["CVE-4"])],
     [("BAR-2", "medium", ("BAR-2", "BAR-1", "BAR-3"))]),  # transitively: BAR-1 and BAR-3 share nothing directly
    ([record("UNRELATED-1", aliases=["BAR-1337"]), record("UNRELATED-2", aliases=["BAR-1338"])],
     [("UNRELATED-1", "unknown", ("UNRELATED-1",)), ("UNRELATED-2", "unknown", ("UNRELATED-2",))]),
    ([record("DSA-1-1", related=["CVE-9"]), record("DEBIAN-CVE-9", "CRITICAL", upstream=["CVE-9"])],
     [("DEBIAN-CVE-9", "critical", ("DEBIAN-CVE-9", "DSA-1-1"))]),  # a DSA's related, as older Debian records wrote it
    ([record("GHSA-1", related=["CVE-9"]), record("PYSEC-9", "HIGH", aliases=["CVE-9"])],
     [("PYSEC-9", "high", ("PYSEC-9",)), ("GHSA-1", "unknown", ("GHSA-1",))]),  # related is not an alias elsewhere
]


@pytest.mark.parametrize(("records", "expected"), GROUPING)
def test_records_group_as_osv_scanner_groups(records: list[advisories.Advisory], expected: list[tuple[str, str, tuple[str, ...]]]) -> None:
    found = vulns.match(records, [vulns.Package("PyPI", "jinja2", "3.1.3", "t")])
    assert [(f.id, f.severity, f.record_ids()) for f in found] == expected


def test_one_cve_in_two_packages_is_two_findings() -> None:
    adv = record("CVE-7", "HIGH")
    other = advisories.advisory_from({"id": "GHSA-7", "modified": "2026-11-30T00:00:00Z", "aliases": ["CVE-7"], "affected": [
        {"package": {"ecosystem": "PyPI", "name": "markupsafe"}, "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}]}]}]}, "s", "g.json")
    found = vulns.match([adv, other], [vulns.Package("PyPI", "jinja2", "3.1.3", "t"), vulns.Package("PyPI", "markupsafe", "2.1.5", "t")])
    assert [(f.package, f.id) for f in found] == [("jinja2", "CVE-7"), ("markupsafe", "GHSA-7")]


def test_an_allowance_of_any_name_of_the_group_covers_it() -> None:
    [f] = vulns.match(both(), [vulns.Package("PyPI", "torch", "2.5.1", "t")])
    for ident in ("PYSEC-2025-TEST1", "CVE-2025-32434", "GHSA-53q9-r3pm-6pq6"):
        [v] = vulns.judge([f], vulns.Policy(allow=(vulns.Allowance(ident, "r", dt.date(2027, 1, 1)),)), TODAY)
        assert v.failure is None and v.finding.allowed is not None


# -- issue 34, outcome 5: allowances are precise -------------------------------------------------------------------

ALLOWANCES = [  # (allowance, does it cover TORCH: GHSA-53q9-r3pm-6pq6 on torch 2.5.1)
    (vulns.Allowance("CVE-2025-32434", "r", dt.date(2027, 1, 1)), True),
    (vulns.Allowance("CVE-2025-32434", "r", dt.date(2027, 1, 1), package="torch"), True),
    (vulns.Allowance("CVE-2025-32434", "r", dt.date(2027, 1, 1), package="Torch"), True),  # PEP 503
    (vulns.Allowance("CVE-2025-32434", "r", dt.date(2027, 1, 1), package="torchvision"), False),
    (vulns.Allowance("CVE-2025-32434", "r", dt.date(2027, 1, 1), package="torch", versions="<2.6.0"), True),
    (vulns.Allowance("CVE-2025-32434", "r", dt.date(2027, 1, 1), versions=">=2.5, <2.5.1"), False),
    (vulns.Allowance("CVE-2025-32434", "r", dt.date(2027, 1, 1), versions="==2.5.1"), True),
    (vulns.Allowance("CVE-2025-32434", "r", dt.date(2027, 1, 1), versions="<=1:2.5.1-1"), False),  # not a PyPI version
    (vulns.Allowance("GHSA-other", "r", dt.date(2027, 1, 1), package="torch"), False),
]


@pytest.mark.parametrize(("allowance", "covers"), ALLOWANCES)
def test_an_allowance_covers_its_package_and_versions_only(allowance: vulns.Allowance, covers: bool) -> None:
    assert allowance.covers(TORCH) is covers
    [v] = vulns.judge([TORCH], vulns.Policy(allow=(allowance,)), TODAY)
    assert (v.failure is None) is covers


def test_a_local_version_is_in_the_allowed_range_of_its_public_one() -> None:
    local = dataclasses.replace(TORCH, version="2.5.1+cu124")
    assert vulns.Allowance("CVE-2025-32434", "r", dt.date(2027, 1, 1), versions="<=2.5.1").covers(local)


def test_an_expired_allowance_is_reported_even_when_another_covers_the_finding() -> None:
    old = vulns.Allowance("GHSA-53q9-r3pm-6pq6", "r", dt.date(2026, 11, 30), package="torch")
    new = vulns.Allowance("CVE-2025-32434", "trusted models only", dt.date(2027, 3, 1), versions="<2.6.0")
    for order in ((old, new), (new, old)):  # whichever comes first
        [v] = vulns.judge([TORCH], vulns.Policy(allow=order), TODAY)
        assert v.failure is None and v.finding.allowed == new
        assert v.notes == (f"{LABEL}: the allowance GHSA-53q9-r3pm-6pq6 for torch expired on 2026-11-30; CVE-2025-32434 <2.6.0 "
                           "covers it until 2027-03-01: remove the expired one",)


def test_an_expired_allowance_of_a_finding_below_the_threshold_is_a_note() -> None:
    old = vulns.Allowance("GHSA-m", "r", dt.date(2026, 1, 1))
    [_, v] = vulns.judge([TORCH, MEDIUM], vulns.Policy(allow=(old,)), TODAY)
    assert v.failure is None
    assert v.notes == ("GHSA-m medium: jinja2 3.1.3, fixed in 3.1.4: the allowance GHSA-m expired on 2026-01-01",)


@pytest.mark.parametrize(("text", "problem"), [
    ("<2.6.0", None), (">=1:1.2.13, <1:1.3", None), ("==2.13.0+cpu", None),
    ("2.6.0", "'2.6.0' is not a version range; write comparisons joined by commas, e.g. '<2.6.0' or '>=1:1.2.13, <1:1.3' (<=, >=, ==, !=, <, >)"),
    ("<2.6; rm -rf /", "'<2.6; rm -rf /' is not a version range; write comparisons joined by commas, e.g. '<2.6.0' or '>=1:1.2.13, <1:1.3' (<=, >=, ==, !=, <, >)"),
    ("<!!", "'!!' is neither a PEP 440 nor a Debian version"),
])
def test_allowance_version_ranges(text: str, problem: str | None) -> None:
    assert vulns.versions_problem(text) == problem
