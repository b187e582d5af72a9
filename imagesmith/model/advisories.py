"""OSV advisory snapshots, read offline: the ``PyPI/all.zip`` / ``Debian/all.zip`` a site
mirrors (or a folder of OSV JSON files), validated into frozen records at once.

A snapshot is untrusted input like any other: a zip is never extracted (members are read
in memory, each under a size cap, with caps on the entry count and on the total
uncompressed size, and member names that climb out of the archive are refused); JSON is
strict (no NaN/Infinity, no duplicate keys); a malformed record is a UserError naming the
snapshot, the member and the key path. The snapshot's digest (sha256 of the zip, or of
the sorted list of ``<path> <sha256>`` lines of a folder's files) and its date (the newest
``modified``) are kept, so what was matched can be named in the evidence. A ``modified`` that is not
an RFC 3339 date-time is refused; :meth:`Snapshot.age` refuses one later than the clock.

GIT ranges are not versions and are skipped (counted in ``Snapshot.notes``). A range whose events
do not parse in its ecosystem is never guessed at: matched against a package it names, it is an error
naming the record (:func:`imagesmith.model.vulns.match`). A snapshot without a record is refused.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import os
import re
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterator, Mapping

from imagesmith.errors import UserError
from imagesmith.inert import inert
from imagesmith.model import loader
from imagesmith.model.located import VALUE_CONTROL

MAX_ZIP_BYTES = 1 << 30  # a snapshot zip on disk
MAX_TOTAL_BYTES = 4 << 30  # uncompressed, over all members
MAX_ENTRIES = 1_000_000
MAX_RECORD_BYTES = 8 << 20  # one advisory
MAX_TEXT = 4096  # an id, a name, a version, an event
RANGE_TYPES = ("ECOSYSTEM", "SEMVER", "GIT")
EVENT_KINDS = ("introduced", "fixed", "last_affected", "limit")
# RFC 3339's date-time (section 5.6), as OSV's modified/published/withdrawn are written: a "T", seconds, a zone
RFC3339 = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?([Zz]|[+-][0-9]{2}:[0-9]{2})")
FUTURE_SKEW = dt.timedelta(minutes=10)  # a record modified later than this ahead of the clock is refused
# Records whose ``related`` names the vulnerabilities they bundle (osv-scanner groups them: grouper_models.go)
BUNDLES_RELATED = ("DSA", "DLA", "USN")


def parse_time(text: str) -> dt.datetime | None:
    """An RFC 3339 date-time (``2025-08-29T19:45:46Z``, ``2023-05-04T03:49:48.383740Z``, ``...+02:00``) in UTC;
    None when it is not one (a date alone, no zone, a day that does not exist)."""
    m = RFC3339.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    micro = int((m.group(7) or "0")[:6].ljust(6, "0"))
    zone = m.group(8).upper()
    offset = dt.timedelta(0) if zone == "Z" else (1 if zone[0] == "+" else -1) * dt.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
    try:
        when = dt.datetime(year, month, day, hour, minute, second, micro, tzinfo=dt.timezone(offset))
    except ValueError:
        return None
    return when.astimezone(dt.timezone.utc)


def stamp(when: dt.datetime) -> str:
    """A UTC time as OSV writes it: ``2025-08-29T19:45:46Z``."""
    return when.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Event:
    kind: str  # introduced | fixed | last_affected | limit
    version: str


@dataclass(frozen=True)
class Range:
    type: str  # ECOSYSTEM | SEMVER
    events: tuple[Event, ...]


@dataclass(frozen=True)
class Affected:
    ecosystem: str  # PyPI | Debian:12 | Ubuntu:22.04:LTS ...
    name: str
    ranges: tuple[Range, ...] = ()
    versions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Advisory:
    id: str
    modified: str
    aliases: tuple[str, ...]
    summary: str
    withdrawn: str | None
    affected: tuple[Affected, ...]
    severity_label: str | None  # database_specific.severity (CRITICAL, HIGH, MODERATE, LOW)
    cvss_vectors: tuple[str, ...]  # severity[].score where it is a CVSS vector
    origin: str  # the member or file it came from
    location: str = field(default="", compare=False)  # the snapshot it came from (a zip, a folder, a URL)

    def names(self) -> tuple[str, ...]:
        """Every identifier this record groups by: its id and aliases (``aliases``, ``upstream``, and ``related`` of a
        DSA, DLA or USN)."""
        return (self.id, *self.aliases)

    @property
    def modified_at(self) -> dt.datetime | None:
        return parse_time(self.modified)


@dataclass(frozen=True)
class Snapshot:
    location: str
    digest: str  # sha256:<hex>
    date: str  # the newest modified of its records, as UTC (``2025-08-29T19:45:46Z``)
    advisories: tuple[Advisory, ...]
    notes: tuple[str, ...] = ()  # what was skipped, and why (counts)

    def summary(self) -> dict[str, Any]:
        return {"location": self.location, "digest": self.digest, "date": self.date, "advisories": len(self.advisories)}

    @property
    def newest(self) -> dt.datetime | None:
        return parse_time(self.date)

    def age(self, now: dt.datetime) -> dt.timedelta:
        """How old its newest record is at ``now``; a record modified after ``now`` (beyond a small clock skew) is a
        SnapshotError naming it: a snapshot from the future cannot say how old its data is."""
        future = [a for a in self.advisories if (a.modified_at or now) > now + FUTURE_SKEW]
        if future:
            a = max(future, key=lambda x: x.modified_at or now)
            raise SnapshotError(f"{self.location}: {a.origin}: modified: {a.modified[:40]!r} is later than this host's clock "
                                f"({stamp(now)}): a date in the future cannot say how old the snapshot is; fix the record or the "
                                f"clock (or mirror a fresh snapshot)")
        newest = self.newest
        return now - newest if newest is not None else dt.timedelta.max


class SnapshotError(UserError):
    """A snapshot that cannot be read as OSV records."""


@dataclass(frozen=True)
class Limits:
    zip_bytes: int = MAX_ZIP_BYTES
    total_bytes: int = MAX_TOTAL_BYTES
    entries: int = MAX_ENTRIES
    record_bytes: int = MAX_RECORD_BYTES


DEFAULT_LIMITS = Limits()


# -- records -------------------------------------------------------------------------------------


class _At:
    """Where a value sits: the snapshot, the member, the key path."""

    def __init__(self, location: str, origin: str) -> None:
        self.location, self.origin = location, origin

    def fail(self, path: str, what: str) -> SnapshotError:
        where = f"{self.location}: {self.origin}" + (f": {path}" if path else "")
        return SnapshotError(f"{where}: {what}; fix or drop this record (or mirror a fresh snapshot)")

    def text(self, raw: Any, path: str, required: bool = True) -> str:
        if raw is None and not required:
            return ""
        if not isinstance(raw, str) or not raw or len(raw) > MAX_TEXT or VALUE_CONTROL.search(raw):
            raise self.fail(path, f"expected a one-line string of at most {MAX_TEXT} characters, got {_kind(raw)}")
        return raw

    def mapping(self, raw: Any, path: str) -> Mapping[str, Any]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            raise self.fail(path, f"expected an object, got {_kind(raw)}")
        return raw

    def array(self, raw: Any, path: str) -> list[Any]:
        if raw is None:
            return []
        if not isinstance(raw, list):
            raise self.fail(path, f"expected an array, got {_kind(raw)}")
        return raw


def _kind(raw: Any) -> str:
    if isinstance(raw, str):
        return "an empty string" if not raw else "a string with a control character or over the length limit"
    return {dict: "an object", list: "an array", bool: "a boolean", type(None): "null", int: "a number", float: "a number"}.get(type(raw), type(raw).__name__)


def advisory_from(doc: Any, location: str, origin: str, notes: dict[str, int] | None = None) -> Advisory:
    """One OSV record (schema 1.x) as an Advisory; SnapshotError naming the key path otherwise."""
    at = _At(location, origin)
    d = at.mapping(doc, "")
    if not isinstance(doc, dict):
        raise at.fail("", "expected an OSV record (an object)")
    db = at.mapping(d.get("database_specific"), "database_specific")
    label = db.get("severity")
    return Advisory(
        id=at.text(d.get("id"), "id"),
        modified=_modified(at, d.get("modified")),
        aliases=_aliases(at, d),
        summary=_summary(d.get("summary"), d.get("details")),
        withdrawn=at.text(d.get("withdrawn"), "withdrawn", required=False) or None,
        affected=tuple(_affected(at, a, f"affected[{i}]", notes if notes is not None else {})
                       for i, a in enumerate(at.array(d.get("affected"), "affected"))),
        severity_label=at.text(label, "database_specific.severity") if label is not None else None,
        cvss_vectors=_vectors(at, d.get("severity")),
        origin=origin,
        location=location,
    )


def _modified(at: _At, raw: Any) -> str:
    """``modified`` as the OSV schema requires it: an RFC 3339 date-time. It dates the snapshot (its age is judged
    against ``vulnerabilities.max_age``), so a text that is no date is refused, never shown as the snapshot's date."""
    text = at.text(raw, "modified")
    if parse_time(text) is None:
        raise at.fail("modified", f"{text[:40]!r} is not an RFC 3339 date-time (e.g. 2025-08-29T19:45:46Z)")
    return text


def _aliases(at: _At, d: Mapping[str, Any]) -> tuple[str, ...]:
    """What the record groups by besides its id, as osv-scanner groups (internal/grouper): ``aliases`` and
    ``upstream`` (Debian's DEBIAN-CVE-* and DSA records name their CVE there), and ``related`` of a DSA, DLA or USN
    (older Debian and Ubuntu records named the CVEs they bundle there), without repeats."""
    keys = ["aliases", "upstream"] + (["related"] if str(d.get("id", "")).split("-")[0] in BUNDLES_RELATED else [])
    names = [at.text(a, f"{key}[{i}]") for key in keys for i, a in enumerate(at.array(d.get(key), key))]
    return tuple(dict.fromkeys(n for n in names if n != d.get("id")))


def _summary(summary: Any, details: Any) -> str:
    """The first line of ``summary`` (else ``details``), at most 200 characters, its control characters escaped
    (``\x1b``, ``\u202e``): free text of a record, shown on terminals, in release.md and in the VEX document."""
    text = summary if isinstance(summary, str) and summary else details if isinstance(details, str) else ""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return inert(first[:200], one_line=True)


def _vectors(at: _At, raw: Any) -> tuple[str, ...]:
    out = []
    for i, entry in enumerate(at.array(raw, "severity")):
        e = at.mapping(entry, f"severity[{i}]")
        kind, score = at.text(e.get("type"), f"severity[{i}].type"), at.text(e.get("score"), f"severity[{i}].score")
        if kind.startswith("CVSS_"):
            out.append(score)
    return tuple(out)


def _affected(at: _At, raw: Any, path: str, notes: dict[str, int]) -> Affected:
    a = at.mapping(raw, path)
    package = at.mapping(a.get("package"), path + ".package")
    ranges = []
    for i, r in enumerate(at.array(a.get("ranges"), path + ".ranges")):
        parsed = _range(at, r, f"{path}.ranges[{i}]")
        if parsed.type == "GIT":
            notes["GIT ranges (commits, not versions): ignored"] = notes.get("GIT ranges (commits, not versions): ignored", 0) + 1
        else:
            ranges.append(parsed)
    versions = tuple(at.text(v, f"{path}.versions[{i}]") for i, v in enumerate(at.array(a.get("versions"), path + ".versions")))
    return Affected(at.text(package.get("ecosystem"), path + ".package.ecosystem"), at.text(package.get("name"), path + ".package.name"),
                    tuple(ranges), versions)


def _range(at: _At, raw: Any, path: str) -> Range:
    r = at.mapping(raw, path)
    kind = at.text(r.get("type"), path + ".type")
    if kind not in RANGE_TYPES:
        raise at.fail(path + ".type", f"{kind!r} is not one of {', '.join(RANGE_TYPES)}")
    events = []
    for i, e in enumerate(at.array(r.get("events"), path + ".events")):
        event = at.mapping(e, f"{path}.events[{i}]")
        if len(event) != 1 or next(iter(event)) not in EVENT_KINDS:
            raise at.fail(f"{path}.events[{i}]", f"an event holds exactly one of {', '.join(EVENT_KINDS)}")
        key = next(iter(event))
        events.append(Event(key, at.text(event[key], f"{path}.events[{i}].{key}")))
    if not events:
        raise at.fail(path + ".events", "a range needs at least one event")
    return Range(kind, tuple(events))


# -- reading a snapshot ------------------------------------------------------------------------------


def load(location: str | Path, limits: Limits = DEFAULT_LIMITS) -> Snapshot:
    """A snapshot from a zip (``all.zip``) or a folder of OSV JSON files."""
    path = Path(location)
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise SnapshotError(f"{location}: cannot read the advisory snapshot ({exc.strerror}); mirror OSV's <ecosystem>/all.zip there") from None
    if stat.S_ISDIR(mode):
        return _from_records(str(location), *_folder(path, limits))
    if not stat.S_ISREG(mode):
        raise SnapshotError(f"{location}: not a regular file or folder; give an OSV all.zip or a folder of OSV .json files")
    if path.stat().st_size > limits.zip_bytes:
        raise SnapshotError(f"{location}: {path.stat().st_size} bytes, over the {limits.zip_bytes}-byte cap of a snapshot zip")
    try:
        data = loader.read_regular(path, cap=limits.zip_bytes)
    except loader.LoadError as exc:
        raise SnapshotError(f"{location}: {exc.why}; give an OSV all.zip or a folder of OSV .json files") from None
    return from_zip_bytes(data, str(location), limits)


def from_zip_bytes(data: bytes, location: str, limits: Limits = DEFAULT_LIMITS) -> Snapshot:
    """A snapshot from the bytes of a zip (a file, or a download)."""
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    return _from_records(location, digest, _zip_members(data, location, limits))


def _zip_members(data: bytes, location: str, limits: Limits) -> Iterator[tuple[str, bytes]]:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError) as exc:
        raise SnapshotError(f"{location}: not a readable zip ({exc}); mirror OSV's <ecosystem>/all.zip again") from None
    if len(infos) > limits.entries:
        raise SnapshotError(f"{location}: {len(infos)} entries, over the cap of {limits.entries}")
    total = sum(i.file_size for i in infos)
    if total > limits.total_bytes:
        raise SnapshotError(f"{location}: {total} bytes uncompressed, over the cap of {limits.total_bytes}")
    for info in infos:
        _check_member_name(info.filename, location)
        if info.is_dir() or not info.filename.endswith(".json"):
            continue
        if info.file_size > limits.record_bytes:
            raise SnapshotError(f"{location}: {info.filename}: {info.file_size} bytes, over the {limits.record_bytes}-byte cap of one record")
        yield info.filename, _read_member(archive, info, location, limits.record_bytes)


def _check_member_name(name: str, location: str) -> None:
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if name.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]) or "\0" in name:
        raise SnapshotError(f"{location}: member {name!r} names a path outside the archive; this is not an OSV snapshot, refuse it")


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, location: str, cap: int) -> bytes:
    try:
        with archive.open(info) as member:
            data = member.read(cap + 1)
    except (zipfile.BadZipFile, NotImplementedError, RuntimeError, ValueError, OSError, EOFError) as exc:
        raise SnapshotError(f"{location}: {info.filename}: cannot be read ({exc})") from None
    if len(data) > cap:  # the header lied about its size
        raise SnapshotError(f"{location}: {info.filename}: over the {cap}-byte cap of one record")
    return data


def _folder(root: Path, limits: Limits) -> tuple[str, Iterator[tuple[str, bytes]]]:
    files = sorted(_folder_files(root, root, limits))
    if len(files) > limits.entries:
        raise SnapshotError(f"{root}: {len(files)} files, over the cap of {limits.entries}")
    contents: list[tuple[str, bytes]] = []
    lines, total = [], 0
    for rel in files:
        data = _read_file(root / rel, rel, str(root), limits.record_bytes)
        total += len(data)
        if total > limits.total_bytes:
            raise SnapshotError(f"{root}: over the cap of {limits.total_bytes} bytes in all")
        contents.append((rel, data))
        lines.append(f"{rel} {hashlib.sha256(data).hexdigest()}\n")
    return "sha256:" + hashlib.sha256("".join(lines).encode()).hexdigest(), iter(contents)


def _folder_files(root: Path, folder: Path, limits: Limits) -> Iterator[str]:
    """Every .json file under ``folder``; a symlink is refused (it could lead anywhere)."""
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        rel = Path(entry.path).relative_to(root).as_posix()
        if entry.is_symlink():
            raise SnapshotError(f"{root}: {rel} is a symbolic link; a snapshot folder holds plain files only")
        if entry.is_dir(follow_symlinks=False):
            yield from _folder_files(root, Path(entry.path), limits)
        elif entry.name.endswith(".json") and entry.is_file(follow_symlinks=False):
            yield rel


def _read_file(path: Path, rel: str, location: str, cap: int) -> bytes:
    try:
        return loader.read_regular(path, cap=cap)
    except loader.LoadError as exc:
        raise SnapshotError(f"{location}: {rel}: {exc.why.replace('for this kind of file', 'of one record')}") from None


def _from_records(location: str, digest: str, members: Iterator[tuple[str, bytes]]) -> Snapshot:
    advisories, notes = [], {}  # type: list[Advisory], dict[str, int]
    for name, data in members:
        advisories.append(advisory_from(_parse(data, location, name), location, name, notes))
    if not advisories:
        raise SnapshotError(f"{location}: holds no OSV record (no .json member or file): an empty snapshot would match "
                            f"nothing and say so silently; mirror OSV's <ecosystem>/all.zip again")
    newest = max(parse_time(a.modified) or NEVER for a in advisories)
    return Snapshot(location, digest, stamp(newest), tuple(advisories), tuple(f"{n} {what}" for what, n in sorted(notes.items())))


NEVER = dt.datetime.min.replace(tzinfo=dt.timezone.utc)


def _parse(data: bytes, location: str, name: str) -> Any:
    try:
        return loader.parse_json(data, name)
    except loader.LoadError as exc:
        raise SnapshotError(f"{location}: {exc.file}: not strict JSON ({exc.why[:160]}); fix or drop this record (or mirror a fresh snapshot)") from None


Loader = Callable[[str], Snapshot]
