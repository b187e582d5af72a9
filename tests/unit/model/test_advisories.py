"""OSV snapshots read offline: the real fixture as a folder and as a zip (digest, date, notes),
and a hostile-snapshot corpus: each is a UserError with an exact message (exit 1), never a crash."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import zipfile
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagesmith import cli
from imagesmith.model import advisories, vulns
from imagesmith.model.advisories import Limits, SnapshotError

OSV = Path(__file__).resolve().parents[2] / "fixtures" / "osv"
GOOD = json.loads((OSV / "PyPI" / "GHSA-53q9-r3pm-6pq6.json").read_text())


def zip_of(members: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as z:
        for name, data in members.items():  # a fixed time: the same members always make the same bytes
            z.writestr(zipfile.ZipInfo(name, date_time=(2025, 8, 29, 0, 0, 0)), data, compress_type=compression)
    return buf.getvalue()


def fixture_zip() -> bytes:
    return zip_of({p.relative_to(OSV).as_posix(): p.read_bytes() for p in sorted(OSV.rglob("*.json"))})


def test_the_fixture_folder_reads_with_its_digest_and_date() -> None:
    s = advisories.load(OSV)
    lines = "".join(f"{p.relative_to(OSV).as_posix()} {hashlib.sha256(p.read_bytes()).hexdigest()}\n" for p in sorted(OSV.rglob("*.json")))
    assert s.digest == "sha256:" + hashlib.sha256(lines.encode()).hexdigest()
    assert s.date == "2025-08-29T19:45:46Z"
    assert sorted(a.id for a in s.advisories) == ["DEBIAN-CVE-2023-45853", "DSA-5514-1", "GHSA-53q9-r3pm-6pq6", "PYSEC-2022-43015"]
    assert s.notes == ("1 GIT ranges (commits, not versions): ignored",)


def test_the_fixture_as_a_zip_reads_the_same_records(tmp_path: Path) -> None:
    data = fixture_zip()
    (tmp_path / "all.zip").write_bytes(data)
    s = advisories.load(tmp_path / "all.zip")
    assert s.digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert sorted(s.advisories, key=lambda a: a.id) == sorted(advisories.load(OSV).advisories, key=lambda a: a.id)
    assert s.date == "2025-08-29T19:45:46Z"


def record(**changes: Any) -> bytes:
    doc = {**GOOD, **changes}
    return json.dumps({k: v for k, v in doc.items() if v is not None}).encode()


SMALL = Limits(zip_bytes=1 << 20, total_bytes=64 << 10, entries=4, record_bytes=16 << 10)
Z = "all.zip"

# (zip members, exact message): the snapshot is the file all.zip
HOSTILE: list[Any] = [
    ({"../evil.json": record()}, f"{Z}: member '../evil.json' names a path outside the archive; this is not an OSV snapshot, refuse it"),
    ({"/etc/evil.json": record()}, f"{Z}: member '/etc/evil.json' names a path outside the archive; this is not an OSV snapshot, refuse it"),
    ({"a\\..\\..\\evil.json": record()}, f"{Z}: member 'a\\\\..\\\\..\\\\evil.json' names a path outside the archive; this is not an OSV snapshot, refuse it"),
    ({f"{i}.json": record() for i in range(5)}, f"{Z}: 5 entries, over the cap of 4"),
    ({"big.json": b" " * (70 << 10)}, f"{Z}: {70 << 10} bytes uncompressed, over the cap of {64 << 10}"),
    ({"bomb.json": b"[" + b" " * (17 << 10) + b"]"}, f"{Z}: bomb.json: {(17 << 10) + 2} bytes, over the {16 << 10}-byte cap of one record"),
    ({"nan.json": b'{"id": "X", "modified": "2025", "x": NaN}'},
     f"{Z}: nan.json:1:38: not strict JSON (NaN is not JSON (NaN and Infinity are not numbers JSON allows)); fix or drop this record (or mirror a fresh snapshot)"),
    ({"dup.json": b'{"id": "X", "id": "Y"}'},
     f"{Z}: dup.json: not strict JSON (the key 'id' appears twice in one object (JSON readers disagree on which wins)); fix or drop this record (or mirror a fresh snapshot)"),
    ({"latin1.json": b'{"id": "\xe9"}'},
     f"{Z}: latin1.json: not strict JSON (is not UTF-8 text (at line 1 column 9; Latin-1?)); fix or drop this record (or mirror a fresh snapshot)"),
    ({"deep.json": b"[" * 8000 + b"]" * 8000},
     f"{Z}: deep.json: not strict JSON (nested deeper than 64 levels); fix or drop this record (or mirror a fresh snapshot)"),
    ({"inf.json": b'{"id": "X", "modified": "2025", "x": 1e400}'},
     f"{Z}: inf.json:1:38: not strict JSON (the number '1e400' is too large to be finite); fix or drop this record (or mirror a fresh snapshot)"),
    ({"list.json": b"[1, 2]"}, f"{Z}: list.json: expected an object, got an array; fix or drop this record (or mirror a fresh snapshot)"),
    ({"noid.json": record(id=None)}, f"{Z}: noid.json: id: expected a one-line string of at most 4096 characters, got null; fix or drop this record (or mirror a fresh snapshot)"),
    ({"r.json": record(modified=5)}, f"{Z}: r.json: modified: expected a one-line string of at most 4096 characters, got a number; fix or drop this record (or mirror a fresh snapshot)"),
    ({"r.json": record(affected={"package": {}})}, f"{Z}: r.json: affected: expected an array, got an object; fix or drop this record (or mirror a fresh snapshot)"),
    ({"r.json": record(affected=[{"package": {"ecosystem": "PyPI"}}])},
     f"{Z}: r.json: affected[0].package.name: expected a one-line string of at most 4096 characters, got null; fix or drop this record (or mirror a fresh snapshot)"),
    ({"r.json": record(affected=[{"package": {"ecosystem": "PyPI", "name": "torch"}, "ranges": [{"type": "RPM", "events": [{"introduced": "0"}]}]}])},
     f"{Z}: r.json: affected[0].ranges[0].type: 'RPM' is not one of ECOSYSTEM, SEMVER, GIT; fix or drop this record (or mirror a fresh snapshot)"),
    ({"r.json": record(affected=[{"package": {"ecosystem": "PyPI", "name": "torch"}, "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0", "fixed": "1"}]}]}])},
     f"{Z}: r.json: affected[0].ranges[0].events[0]: an event holds exactly one of introduced, fixed, last_affected, limit; fix or drop this record (or mirror a fresh snapshot)"),
    ({"r.json": record(affected=[{"package": {"ecosystem": "PyPI", "name": "torch"}, "ranges": [{"type": "ECOSYSTEM", "events": []}]}])},
     f"{Z}: r.json: affected[0].ranges[0].events: a range needs at least one event; fix or drop this record (or mirror a fresh snapshot)"),
    ({"r.json": record(affected=[{"package": {"ecosystem": "PyPI", "name": "torch\nINJECTED"}}])},
     f"{Z}: r.json: affected[0].package.name: expected a one-line string of at most 4096 characters, got a string with a control character or over the length limit; fix or drop this record (or mirror a fresh snapshot)"),
    ({"r.json": record(severity=[{"type": "CVSS_V3", "score": ["x"]}])},
     f"{Z}: r.json: severity[0].score: expected a one-line string of at most 4096 characters, got an array; fix or drop this record (or mirror a fresh snapshot)"),
    ({"r.json": record(database_specific={"severity": {"x": 1}})},
     f"{Z}: r.json: database_specific.severity: expected a one-line string of at most 4096 characters, got an object; fix or drop this record (or mirror a fresh snapshot)"),
]


@pytest.mark.parametrize(("members", "message"), HOSTILE)
def test_a_hostile_zip_is_refused_with_a_clear_message(tmp_path: Path, members: dict[str, bytes], message: str) -> None:
    (tmp_path / Z).write_bytes(zip_of(members))
    with pytest.raises(SnapshotError) as info:
        advisories.load(tmp_path / Z, SMALL)
    assert str(info.value).replace(str(tmp_path) + "/", "") == message


def test_a_zip_whose_header_lies_about_its_size(tmp_path: Path) -> None:
    data = bytearray(zip_of({"r.json": record()}, zipfile.ZIP_STORED))
    size = len(record())
    # the central directory's uncompressed size says 10 bytes; the member holds more
    at = data.rfind(b"PK\x01\x02")
    data[at + 24:at + 28] = (10).to_bytes(4, "little")
    (tmp_path / Z).write_bytes(bytes(data))
    with pytest.raises(SnapshotError) as info:
        advisories.load(tmp_path / Z, SMALL)
    assert str(info.value).replace(str(tmp_path) + "/", "").startswith(f"{Z}: r.json: ")
    assert size > 10


UNREADABLE: list[tuple[Callable[[Path], Path], str]] = [
    (lambda d: d / "missing.zip", "missing.zip: cannot read the advisory snapshot (No such file or directory); mirror OSV's <ecosystem>/all.zip there"),
    (lambda d: _write(d / "x.zip", b"PK\x03\x04 not a zip"), "x.zip: not a readable zip (File is not a zip file); mirror OSV's <ecosystem>/all.zip again"),
    (lambda d: _write(d / "x.zip", b"\0" * (2 << 20)), f"x.zip: {2 << 20} bytes, over the {1 << 20}-byte cap of a snapshot zip"),
    (lambda d: _link(d), "osv: PyPI/link.json is a symbolic link; a snapshot folder holds plain files only"),
]


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _link(d: Path) -> Path:
    (d / "osv" / "PyPI").mkdir(parents=True)
    (d / "osv" / "PyPI" / "link.json").symlink_to("/etc/passwd")
    return d / "osv"


@pytest.mark.parametrize(("make", "message"), UNREADABLE)
def test_an_unreadable_snapshot_says_what_to_do(tmp_path: Path, make: Callable[[Path], Path], message: str) -> None:
    with pytest.raises(SnapshotError) as info:
        advisories.load(make(tmp_path), SMALL)
    assert str(info.value).replace(str(tmp_path) + "/", "") == message


UNJUDGED = [
    ([{"introduced": "0"}, {"fixed": "not a version!!"}], "torch 2.5.1+cu124",
     "affected[0].ranges[0]: its fixed event 'not a version!!' is not a ECOSYSTEM version of this ecosystem, so it cannot say "
     "whether torch 2.5.1+cu124 is affected"),
    ([{"introduced": "1.x"}, {"fixed": "2.6.0"}], "torch 2.5.1+cu124",
     "affected[0].ranges[0]: its introduced event '1.x' is not a ECOSYSTEM version of this ecosystem, so it cannot say whether "
     "torch 2.5.1+cu124 is affected"),
    ([{"introduced": "0"}, {"fixed": "2.6.0"}], "torch not-a-version",
     "affected[0].ranges[0]: the package's version is not one of this ecosystem, so it cannot say whether torch not-a-version "
     "is affected"),
]


@pytest.mark.parametrize(("events", "package", "why"), UNJUDGED)
def test_a_range_that_cannot_be_judged_names_the_record(events: list[dict[str, str]], package: str, why: str) -> None:
    """A CRITICAL range holding the installed version, one event of which does not parse: an error, not exit 0 in silence."""
    doc = json.loads(record(affected=[{"package": {"ecosystem": "PyPI", "name": "torch"}, "ranges": [{"type": "ECOSYSTEM", "events": events}]}],
                            database_specific={"severity": "CRITICAL"}))
    adv = advisories.advisory_from(doc, "all.zip", "r.json")
    name, version = package.split(" ")
    with pytest.raises(SnapshotError) as info:
        vulns.match([adv], [vulns.Package("PyPI", name, version, "t")])
    assert str(info.value) == f"all.zip: r.json: GHSA-53q9-r3pm-6pq6: {why}; fix or drop this record (or mirror a fresh snapshot)"
    assert vulns.match([adv], [vulns.Package("PyPI", "numpy", "1.0", "n")]) == []  # a record about another package is not judged


@pytest.mark.parametrize(("make", "message"), [
    (lambda d: _write(d / "empty.zip", zip_of({})), "empty.zip: holds no OSV record (no .json member or file): an empty snapshot "
                                                    "would match nothing and say so silently; mirror OSV's <ecosystem>/all.zip again"),
    (lambda d: _write(d / "readme.zip", zip_of({"README.txt": b"x"})), "readme.zip: holds no OSV record (no .json member or file): "
                                                                       "an empty snapshot would match nothing and say so silently; "
                                                                       "mirror OSV's <ecosystem>/all.zip again"),
    (lambda d: _mkdir(d / "osv"), "osv: holds no OSV record (no .json member or file): an empty snapshot would match nothing and "
                                  "say so silently; mirror OSV's <ecosystem>/all.zip again"),
])
def test_an_empty_snapshot_is_refused(tmp_path: Path, make: Callable[[Path], Path], message: str) -> None:
    with pytest.raises(SnapshotError) as info:
        advisories.load(make(tmp_path), SMALL)
    assert str(info.value).replace(str(tmp_path) + "/", "") == message


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


@pytest.mark.parametrize(("field", "value"), [("id", "GHSA-x\u001b[2J"), ("aliases", ["CVE-1\u0007"]), ("id", "GHSA-\u202ex")])
def test_an_advisory_id_with_a_control_character_is_refused(field: str, value: Any) -> None:
    with pytest.raises(SnapshotError) as info:
        advisories.advisory_from(json.loads(record(**{field: value})), "all.zip", "r.json")
    assert "got a string with a control character or over the length limit" in str(info.value)


def test_a_summary_reaches_people_with_its_control_characters_escaped() -> None:
    doc = json.loads(record(summary="torch.load \u001b[2J\u001b]8;;https://evil.example\u0007click\u202eRCE"))
    adv = advisories.advisory_from(doc, "all.zip", "r.json")
    assert adv.summary == "torch.load \\x1b[2J\\x1b]8;;https://evil.example\\x07click\\u202eRCE"


@pytest.mark.parametrize("members", [{"../../x.json": record()}, {"x.json": b"NaN"}, {"x.json": record(affected=7)}, {}, {
    "x.json": record(database_specific={"severity": "CRITICAL"}, affected=[{"package": {"ecosystem": "PyPI", "name": "torch"},
                     "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "not a version!!"}]}]}])}])
def test_matrix_validate_exits_1_on_a_hostile_snapshot(tmp_path: Path, members: dict[str, bytes],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "all.zip").write_bytes(zip_of(members))
    (tmp_path / "matrix.yaml").write_text('version: 1\nmatrix: {torch: ["2.9"], cuda: [cpu], python: ["3.11"], os: [debian12]}\n'
                                          "sources: {advisories: [all.zip]}\n")
    with pytest.raises(SystemExit) as info:
        cli.main(["matrix", "validate", str(tmp_path / "matrix.yaml")])
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path}/all.zip: ") and len(err.splitlines()) == 1


CAPS = ("entries, over the cap", "uncompressed, over the cap", "-byte cap of one record")


@pytest.mark.parametrize(("members", "message"), [h for h in HOSTILE if not any(c in h[1] for c in CAPS)])
def test_the_hostile_corpus_exits_1_through_the_cli(tmp_path: Path, members: dict[str, bytes], message: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / Z).write_bytes(zip_of(members))
    (tmp_path / "matrix.yaml").write_text('version: 1\nmatrix: {torch: ["2.9"], cuda: [cpu], python: ["3.11"], os: [debian12]}\n'
                                          f"sources: {{advisories: [{Z}]}}\n")
    with pytest.raises(SystemExit) as info:
        cli.main(["matrix", "validate", str(tmp_path / "matrix.yaml")])
    assert info.value.code == 1
    assert capsys.readouterr().err == f"error: {tmp_path}/{message}\n"


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=12)
FIELDS = st.fixed_dictionaries({}, optional={
    "id": JSON | st.just("X-1"), "modified": JSON | st.just("2025-01-01T00:00:00Z"), "aliases": JSON,
    "withdrawn": JSON, "severity": JSON | st.just([{"type": "CVSS_V3", "score": "CVSS:3.1/AV:N"}]),
    "database_specific": JSON | st.just({"severity": "HIGH"}),
    "affected": JSON | st.lists(st.fixed_dictionaries({"package": st.fixed_dictionaries({"ecosystem": st.sampled_from(["PyPI", "Debian:12", 7]),
                                                                                        "name": st.sampled_from(["torch", "zlib", ""])}),
                                                       "ranges": JSON | st.lists(st.fixed_dictionaries({
                                                           "type": st.sampled_from(["ECOSYSTEM", "SEMVER", "GIT", "X"]),
                                                           "events": st.lists(st.dictionaries(st.sampled_from(["introduced", "fixed", "last_affected", "limit", "x"]),
                                                                                              st.text(max_size=6) | st.just("0") | st.just("1:1.2-1"),
                                                                                              min_size=1, max_size=2), max_size=3)}), max_size=2),
                                                       "versions": JSON | st.lists(st.text(max_size=6), max_size=3)}), max_size=2)})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # counts, not wall time: a loaded machine is slow
@given(FIELDS)
def test_any_record_is_read_or_refused_never_a_crash(doc: dict[str, Any]) -> None:
    """Records of every shape: either an Advisory that matches without an error, or a SnapshotError."""
    try:
        adv = advisories.advisory_from(doc, "all.zip", "r.json")
    except SnapshotError as exc:
        assert str(exc).startswith("all.zip: r.json")
        return
    packages = [vulns.Package("PyPI", "torch", "2.5.1+cu124", "t"), vulns.Package("Debian:12", "zlib", "1:1.2.13.dfsg-1", "z"),
                vulns.Package("PyPI", "torch", "not a version", "n")]
    try:
        found = vulns.match([adv], packages)
    except SnapshotError as exc:  # a range that names a package here but cannot be judged for it: said, never dropped
        assert str(exc).startswith(f"all.zip: r.json: {adv.id}: affected[") and "cannot say whether" in str(exc)
        return
    for f in found:
        assert f.severity in vulns.SEVERITIES


# -- a snapshot served over HTTP (sources.advisories: https://mirror/...) ------------------------------------------


@pytest.fixture()
def mirror() -> Any:
    import http.server

    from tests.loopback import serve

    files = {"/osv/PyPI/all.zip": fixture_zip(), "/osv/big.zip": b"\0" * (2 << 20)}

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = files.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

    with serve(Handler) as port:
        yield f"http://127.0.0.1:{port}"


def test_a_snapshot_from_a_mirror_is_downloaded_bounded_and_read(write_matrix: Any, mirror: str) -> None:
    from imagesmith.model import matrix
    from imagesmith.stages.evidence import vulngate

    m = matrix.load(write_matrix('version: 1\nmatrix: {torch: ["2.9"], cuda: [cpu], python: ["3.11"], os: [debian12]}\n'
                                 f"sources: {{advisories: ['{mirror}/osv/PyPI/all.zip']}}\n"))
    [s] = vulngate.load_snapshots(m)
    assert (s.location, s.digest) == (f"{mirror}/osv/PyPI/all.zip", "sha256:" + hashlib.sha256(fixture_zip()).hexdigest())
    assert len(s.advisories) == 4


@pytest.mark.parametrize(("path", "message"), [
    ("/osv/big.zip", "GET {m}/osv/big.zip: over the 1048576-byte cap of a snapshot; mirror the per-ecosystem all.zip"),
    ("/osv/none.zip", "GET {m}/osv/none.zip: HTTP 404; check the mirror's URL (sources.advisories)"),
])
def test_a_mirror_that_answers_wrong_is_a_user_error(mirror: str, path: str, message: str) -> None:
    from imagesmith.edges.registry import fetch_limited
    from imagesmith.errors import UserError

    with pytest.raises(UserError) as info:
        fetch_limited(mirror + path, 1 << 20)
    assert str(info.value) == message.replace("{m}", mirror)


def test_a_mirror_that_is_not_there(tmp_path: Path) -> None:
    from imagesmith.edges.registry import fetch_limited
    from imagesmith.errors import UserError

    with pytest.raises(UserError) as info:
        fetch_limited("http://127.0.0.1:9/all.zip", 1 << 20, timeout=5)
    assert str(info.value).startswith("GET http://127.0.0.1:9/all.zip: ConnectionError: ")
    assert str(info.value).endswith("; check the mirror's URL and that this host reaches it")


# -- issue 34, outcome 3: a snapshot says how old it is --------------------------------------------------------------

MODIFIED = [  # (modified, the error; None: accepted, with the snapshot's date)
    ("2025-08-29T19:45:46Z", None, "2025-08-29T19:45:46Z"),
    ("2023-05-04T03:49:48.383740Z", None, "2023-05-04T03:49:48Z"),
    ("2024-01-01T00:00:00.123456789Z", None, "2024-01-01T00:00:00Z"),  # Go's nanoseconds
    ("2024-01-01T02:00:00+02:00", None, "2024-01-01T00:00:00Z"),
    ("zzz not a date", "'zzz not a date' is not an RFC 3339 date-time (e.g. 2025-08-29T19:45:46Z)", ""),
    ("9999-12-31", "'9999-12-31' is not an RFC 3339 date-time (e.g. 2025-08-29T19:45:46Z)", ""),
    ("2025-02-30T00:00:00Z", "'2025-02-30T00:00:00Z' is not an RFC 3339 date-time (e.g. 2025-08-29T19:45:46Z)", ""),
    ("2025-08-29T19:45:46", "'2025-08-29T19:45:46' is not an RFC 3339 date-time (e.g. 2025-08-29T19:45:46Z)", ""),  # no zone
    ("2025-08-29 19:45:46Z", "'2025-08-29 19:45:46Z' is not an RFC 3339 date-time (e.g. 2025-08-29T19:45:46Z)", ""),
    ("２０２５-08-29T19:45:46Z", "'２０２５-08-29T19:45:46Z' is not an RFC 3339 date-time (e.g. 2025-08-29T19:45:46Z)", ""),
]


@pytest.mark.parametrize(("modified", "error", "date"), MODIFIED)
def test_modified_must_be_an_rfc3339_date_time(tmp_path: Path, modified: str, error: str | None, date: str) -> None:
    (tmp_path / "r.json").write_text(json.dumps({"id": "GHSA-x", "modified": modified}))
    if error is None:
        assert advisories.load(tmp_path).date == date
        return
    with pytest.raises(advisories.SnapshotError) as info:
        advisories.load(tmp_path)
    assert str(info.value) == f"{tmp_path}: r.json: modified: {error}; fix or drop this record (or mirror a fresh snapshot)"


def test_a_snapshot_is_as_old_as_its_newest_record() -> None:
    s = advisories.load(OSV)
    assert s.age(dt.datetime(2025, 9, 3, 19, 45, 46, tzinfo=dt.timezone.utc)) == dt.timedelta(days=5)


def test_a_record_from_the_future_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps({"id": "A", "modified": "2026-11-30T00:00:00Z"}))
    (tmp_path / "b.json").write_text(json.dumps({"id": "B", "modified": "9999-12-31T00:00:00Z"}))
    s = advisories.load(tmp_path)
    with pytest.raises(advisories.SnapshotError) as info:
        s.age(dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc))
    assert str(info.value) == (f"{tmp_path}: b.json: modified: '9999-12-31T00:00:00Z' is later than this host's clock "
                               "(2026-12-01T00:00:00Z): a date in the future cannot say how old the snapshot is; fix the record "
                               "or the clock (or mirror a fresh snapshot)")



def test_a_clock_a_few_minutes_behind_is_tolerated(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps({"id": "A", "modified": "2026-12-01T00:05:00Z"}))
    assert advisories.load(tmp_path).age(dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)) == dt.timedelta(minutes=-5)
