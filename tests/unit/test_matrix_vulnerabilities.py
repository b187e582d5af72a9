"""The matrix's advisory sources and vulnerability policy: (bad input, exact message) tables,
what is accepted, and matrix validate's early warning against the real OSV fixture."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pytest

from imagesmith.errors import ValidationError
from imagesmith.model import matrix, plan, vulns
from imagesmith.stages import vulngate
from tests.conftest import WriteMatrix

OSV = Path(__file__).resolve().parents[1] / "fixtures" / "osv"
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
    assert matrix.load(write_matrix(BASE)).vulnerabilities == vulns.Policy("critical", (), None)


def early(write_matrix: WriteMatrix, extra: str, on: dt.date = dt.date(2026, 12, 1)) -> vulngate.Early:
    shutil.copytree(OSV, write_matrix("").parent / "osv", dirs_exist_ok=True)
    m = matrix.load(write_matrix(BASE + "sources: {advisories: [osv]}\n" + extra))
    return vulngate.early(m, plan.expand(m, "20261201"), on, vulngate.load_snapshots(m))


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
    got = vulngate.early(m, plan.expand(m, "20261201"), dt.date(2026, 12, 1), vulngate.load_snapshots(m))
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
