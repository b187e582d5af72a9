"""Known vulnerabilities: OSV ranges applied with each ecosystem's own version order, a real
snapshot (tests/fixtures/osv) matched against the SBOM of a measured image, severity, policy."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from imagesmith.model import advisories, vulns
from imagesmith.model.advisories import Event, Range
from imagesmith.stages import sbom

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
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
    assert verdict.finding.to_json()["allowed"] == {"reason": "trusted models only", "expires": "2027-03-01"}


def test_counts_by_severity() -> None:
    assert vulns.counts([TORCH, MEDIUM, TORCH]) == {"critical": 2, "high": 0, "medium": 1, "low": 0, "unknown": 0}
