"""The matrix's advisory sources and vulnerability policy: (bad input, exact message) tables,
what is accepted, and matrix validate's early warning against the real OSV fixture."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pytest

from imagesmith.errors import ValidationError
from imagesmith.model import matrix, plan, vulns
from imagesmith.stages.evidence import vulngate
from tests.conftest import WriteMatrix

OSV = Path(__file__).resolve().parents[2] / "fixtures" / "osv"
BASE = 'version: 1\nmatrix: {torch: ["2.5"], cuda: [cpu], python: ["3.11"], os: [debian12]}\n'

BAD = [
    ("sources: {advisories: [nowhere.zip]}\n", "matrix.yaml:3 sources.advisories[0]: nowhere.zip: no such any (looked at {d}/nowhere.zip)"),
    ("sources: {advisories: [/etc/passwd]}\n",
     "matrix.yaml:3 sources.advisories[0]: /etc/passwd resolves to /etc/passwd, outside {d}; keep it in the matrix's folder, or allow its folder on the command line: --allow-root /etc"),
    ("sources: {advisories: ['https://mirror example/all.zip']}\n",
     "matrix.yaml:3 sources.advisories[0]: 'https://mirror example/all.zip' holds ' ', which a URL does not need; percent-encode it (%20 for a space)"),
    ("vulnerabilities: {threshold: severe}\n",
     "matrix.yaml:3 vulnerabilities.threshold: 'severe' is not one of critical, high, medium, low"),
    ("vulnerabilities: {treshold: high}\n", "matrix.yaml:3 vulnerabilities.treshold: unknown key; did you mean 'threshold'?"),
    ("vulnerabilities: {max_age_days: 0}\n", "matrix.yaml:3 vulnerabilities.max_age_days: 0 is out of range (1..3650)"),
    ("vulnerabilities: {allow: GHSA-53q9-r3pm-6pq6}\n",
     "matrix.yaml:3 vulnerabilities.allow: expected a list of allowances ({id, reason, expires}), got a string"),
    ("vulnerabilities:\n  allow:\n    - {id: GHSA-53q9-r3pm-6pq6, expires: 2027-03-01}\n",
     "matrix.yaml:5 vulnerabilities.allow[0].reason: an allowance needs a reason: why this image may ship with the advisory"),
    ("vulnerabilities:\n  allow:\n    - {id: GHSA-53q9-r3pm-6pq6, reason: trusted models}\n",
     "matrix.yaml:5 vulnerabilities.allow[0].expires: an allowance needs expires: a date (YYYY-MM-DD) when it is looked at again"),
    ("vulnerabilities:\n  allow:\n    - {id: GHSA-53q9-r3pm-6pq6, reason: trusted models, expires: next year}\n",
     "matrix.yaml:5 vulnerabilities.allow[0].expires: 'next year' is not a date; write YYYY-MM-DD"),
    ("vulnerabilities:\n  allow:\n    - {id: '$(reboot)', reason: trusted models, expires: 2027-03-01}\n",
     "matrix.yaml:5 vulnerabilities.allow[0].id: '$(reboot)' is not an advisory id (GHSA-xxxx-xxxx-xxxx, CVE-2025-32434, PYSEC-2024-1, DSA-5514-1)"),
    ("vulnerabilities: {max_age: soon}\n", "matrix.yaml:3 vulnerabilities.max_age: 'soon' is not a duration; write e.g. 90s, 30m, 1h30m or 2d"),
    ("vulnerabilities: {max_age: 30m}\n", "matrix.yaml:3 vulnerabilities.max_age: 30m is out of range (3600 s .. 3650 d)"),
    ("vulnerabilities: {stale: ignore}\n", "matrix.yaml:3 vulnerabilities.stale: 'ignore' is not one of fail, warn"),
    ("vulnerabilities:\n  allow:\n    - {id: CVE-2025-32434, reason: r, expires: 2027-03-01, package: 'torch; rm -rf /'}\n",
     "matrix.yaml:5 vulnerabilities.allow[0].package: 'torch; rm -rf /' is not a package name; write the PyPI name (torch) or the "
     "Debian source package (zlib) the advisory names"),
    ("vulnerabilities:\n  allow:\n    - {id: CVE-2025-32434, reason: r, expires: 2027-03-01, versions: 2.6.0}\n",
     "matrix.yaml:5 vulnerabilities.allow[0].versions: '2.6.0' is not a version range; write comparisons joined by commas, e.g. "
     "'<2.6.0' or '>=1:1.2.13, <1:1.3' (<=, >=, ==, !=, <, >)"),
    ("vulnerabilities:\n  allow:\n    - {id: CVE-2025-32434, reason: r, expires: 2027-03-01, versions: '<=latest!'}\n",
     "matrix.yaml:5 vulnerabilities.allow[0].versions: 'latest!' is neither a PEP 440 nor a Debian version"),
    ("vulnerabilities:\n  allow:\n    - {id: CVE-2025-32434, reason: r, expires: 2027-03-01, version: <2.6}\n",
     "matrix.yaml:5 vulnerabilities.allow[0].version: unknown key; did you mean 'versions'?"),
]


@pytest.mark.parametrize(("extra", "message"), BAD)
def test_bad_values_are_located(write_matrix: WriteMatrix, extra: str, message: str) -> None:
    path = write_matrix(BASE + extra)
    with pytest.raises(ValidationError) as info:
        matrix.load(path)
    assert str(info.value.problems[0]) == message.replace("{d}", str(path.parent))


def test_the_policy_as_records(write_matrix: WriteMatrix) -> None:
    shutil.copytree(OSV, write_matrix("").parent / "osv")
    path = write_matrix(BASE + "sources: {advisories: [osv, 'https://mirror.example.com/osv/PyPI/all.zip']}\n"
                        "vulnerabilities:\n  threshold: high\n  max_age_days: 7\n"
                        "  allow:\n    - {id: CVE-2025-32434, reason: models come from our registry only, expires: 2027-03-01}\n")
    m = matrix.load(path)
    assert m.sources.advisories == (str(path.parent / "osv"), "https://mirror.example.com/osv/PyPI/all.zip")
    assert m.vulnerabilities == vulns.Policy("high", (vulns.Allowance("CVE-2025-32434", "models come from our registry only", dt.date(2027, 3, 1)),), 7)


def test_no_policy_means_critical_blocks(write_matrix: WriteMatrix) -> None:
    assert matrix.load(write_matrix(BASE)).vulnerabilities == vulns.Policy("critical", (), None, 5 * 86400, "fail")


def test_an_allowance_with_package_and_versions_and_an_age(write_matrix: WriteMatrix) -> None:
    path = write_matrix(BASE + "vulnerabilities:\n  max_age: 36h\n  stale: warn\n  allow:\n"
                        "    - {id: CVE-2025-32434, reason: trusted models, expires: 2027-03-01, package: torch, versions: ' >=2.5, <2.6.0'}\n")
    assert matrix.load(path).vulnerabilities == vulns.Policy(
        "critical", (vulns.Allowance("CVE-2025-32434", "trusted models", dt.date(2027, 3, 1), "torch", ">=2.5, <2.6.0"),), None, 36 * 3600, "warn")


FRESH = dt.datetime(2025, 9, 1, 12, 0, tzinfo=dt.timezone.utc)  # three days after the fixture's newest record: not stale


def early(write_matrix: WriteMatrix, extra: str, on: dt.date = dt.date(2026, 12, 1)) -> vulngate.Early:
    shutil.copytree(OSV, write_matrix("").parent / "osv", dirs_exist_ok=True)
    m = matrix.load(write_matrix(BASE + "sources: {advisories: [osv]}\n" + extra))
    return vulngate.early(m, plan.expand(m, "20261201"), on, vulngate.load_snapshots(m), FRESH)


TORCH = "GHSA-53q9-r3pm-6pq6 (CVE-2025-32434) critical: torch 2.5.1, fixed in 2.6.0"
TARGET = "(targets: 2.5.1-cpu-py3.11-debian12-base)"


def test_a_pinned_torch_with_a_critical_advisory_is_an_error(write_matrix: WriteMatrix) -> None:
    found = early(write_matrix, "")
    assert [str(p) for p in found.errors] == [
        f"matrix.yaml:2 matrix.torch: {TORCH}: at or above the threshold critical; upgrade the package, or allow it with a "
        f"reason and an expiry date (vulnerabilities.allow) {TARGET}"]
    assert found.warnings == ()


def test_an_allowed_one_is_a_warning_naming_the_reason(write_matrix: WriteMatrix) -> None:
    found = early(write_matrix, "vulnerabilities:\n  allow:\n    - {id: GHSA-53q9-r3pm-6pq6, reason: trusted models only, expires: 2027-03-01}\n")
    assert found.errors == ()
    assert [str(p) for p in found.warnings] == [
        f"matrix.yaml:2 matrix.torch: warning: {TORCH} {TARGET}; allowed until 2027-03-01: trusted models only"]


def test_an_expired_allowance_is_an_error(write_matrix: WriteMatrix) -> None:
    found = early(write_matrix, "vulnerabilities:\n  allow:\n    - {id: CVE-2025-32434, reason: trusted models only, expires: 2026-11-30}\n")
    assert [str(p) for p in found.errors] == [
        f"matrix.yaml:2 matrix.torch: {TORCH}: its allowance expired on 2026-11-30; upgrade the package, or renew the "
        f"allowance with a reason (vulnerabilities.allow) {TARGET}",
        "matrix.yaml:5 vulnerabilities.allow: the allowance of CVE-2025-32434 expired on 2026-11-30; renew it (a new "
        "expires, the reason still true) or remove it"]


def test_a_package_of_another_layer_is_located_in_that_layer(write_matrix: WriteMatrix) -> None:
    m2 = BASE.replace('"2.5"', '"2.9"')
    shutil.copytree(OSV, write_matrix("").parent / "osv", dirs_exist_ok=True)
    m = matrix.load(write_matrix(m2 + "sources: {advisories: [osv]}\nlayers:\n  base: {}\n  cv: {packages: [torch==1.13.0]}\n"))
    got = vulngate.early(m, plan.expand(m, "20261201"), dt.date(2026, 12, 1), vulngate.load_snapshots(m), FRESH)
    assert [str(p) for p in got.errors] == [
        "matrix.yaml:6 layers.cv.packages: GHSA-53q9-r3pm-6pq6 (CVE-2025-32434) critical: torch 1.13.0, fixed in 2.6.0: at or "
        "above the threshold critical; upgrade the package, or allow it with a reason and an expiry date (vulnerabilities.allow) "
        "(targets: 2.9.1-cpu-py3.11-debian12-cv)"]
    assert [str(p) for p in got.warnings] == [
        "matrix.yaml:6 layers.cv.packages: warning: PYSEC-2022-43015 (CVE-2022-45907) unknown: torch 1.13.0, fixed in 1.13.1 "
        "(targets: 2.9.1-cpu-py3.11-debian12-cv)"]


def test_an_expired_allowance_fails_validate_even_without_snapshots(write_matrix: WriteMatrix, capsys: pytest.CaptureFixture[str]) -> None:
    from imagesmith import cli

    path = write_matrix(BASE + "vulnerabilities:\n  allow:\n    - {id: CVE-2025-32434, reason: trusted models only, expires: 2026-11-30}\n")
    with pytest.raises(SystemExit) as info:
        cli.main(["matrix", "validate", str(path), "--date", "20261201"])
    assert info.value.code == 1
    assert capsys.readouterr().err == ("error: matrix.yaml:4 vulnerabilities.allow: the allowance of CVE-2025-32434 expired on 2026-11-30; "
                                       "renew it (a new expires, the reason still true) or remove it\n")
    with pytest.raises(SystemExit) as ok:
        cli.main(["matrix", "validate", str(path), "--date", "20261129"])  # the day before: valid
    assert ok.value.code == 0
    assert capsys.readouterr().out.startswith("OK: 1 cells, 1 targets")


STALE = ("the advisory snapshot {d}/osv is 458d old (its newest record was modified at 2025-08-29T19:45:46Z), older than "
         "vulnerabilities.max_age (5d): advisories published since are not in it; mirror a fresh one (OSV's <ecosystem>/all.zip), "
         "or set vulnerabilities.stale: warn to release on it anyway")


def test_a_stale_snapshot_fails_validate(write_matrix: WriteMatrix) -> None:
    shutil.copytree(OSV, write_matrix("").parent / "osv", dirs_exist_ok=True)
    m = matrix.load(write_matrix(BASE.replace('"2.5"', '"2.9"') + "sources: {advisories: [osv]}\n"))
    now = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)
    got = vulngate.early(m, plan.expand(m, "20261201"), now.date(), vulngate.load_snapshots(m), now)
    assert [str(p) for p in got.errors] == ["matrix.yaml:3 sources.advisories: " + STALE.format(d=m.file.parent)]
    fresh = vulngate.early(m, plan.expand(m, "20261201"), now.date(), vulngate.load_snapshots(m), FRESH)
    assert fresh.errors == ()


def test_a_stale_snapshot_is_a_warning_where_the_matrix_allows_it(write_matrix: WriteMatrix) -> None:
    found = early(write_matrix, "vulnerabilities: {stale: warn, max_age: 2d}\n", on=dt.date(2026, 12, 1))
    assert str(found.warnings[0]) == (
        f"matrix.yaml:3 sources.advisories: warning: the advisory snapshot {found.snapshots[0].location} is 2d old (its newest "
        "record was modified at 2025-08-29T19:45:46Z), older than vulnerabilities.max_age (2d): advisories published since are "
        "not in it; mirror a fresh one (OSV's <ecosystem>/all.zip) (vulnerabilities.stale: warn: judged on it anyway)")
    assert [p.path for p in found.errors] == ["matrix.torch"]  # torch 2.5.1's critical finding, judged on it anyway


def test_validate_exits_1_on_a_stale_snapshot(write_matrix: WriteMatrix, capsys: pytest.CaptureFixture[str]) -> None:
    from imagesmith import cli

    shutil.copytree(OSV, write_matrix("").parent / "osv", dirs_exist_ok=True)
    path = write_matrix(BASE.replace('"2.5"', '"2.9"') + "sources: {advisories: [osv]}\n")
    with pytest.raises(SystemExit) as info:
        cli.main(["matrix", "validate", str(path), "--date", "20261201"])
    assert info.value.code == 1
    assert "sources.advisories: the advisory snapshot" in capsys.readouterr().err
    with pytest.raises(SystemExit) as ok:
        cli.main(["matrix", "validate", str(path), "--date", "20250902"])  # the end of that day: 4 days after the newest record
    assert ok.value.code == 0
