"""Typed stage artifacts on disk: what one job leaves for the next.

``OUT/<target>/build.json`` (:data:`BUILD_SCHEMA`) is one target as a build
job left it: the plan's record of the target, the release settings of the
plan (where ``publish`` promotes to and how it tags), what the build made
(status, image ID, context hash, measured facts) and where the image was
staged (repository, content tag, manifest digest). One file per target, so
jobs on other machines never write the same file, and a folder gathered from
many jobs' artifacts (GitLab extracts them side by side; GitHub downloads
them into one folder) holds the whole build. ``publish`` needs nothing else
(no matrix): these records and the ``verify.json`` beside each.

Every file is written atomically (temp file + rename) and read back as frozen
dataclasses, every value checked: an artifact comes from another job, so it
is input like a matrix is. :func:`locked` serialises the commands that write
into one output folder (two builds or publishes into the same folder at once).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import socket
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from imagesmith import __version__, runstate
from imagesmith.atomic import write_json, write_text
from imagesmith.errors import UserError
from imagesmith.model import fields, loader, plan, schemas
from imagesmith.model.matrix.records import ImageSpec, Matrix
from imagesmith.model.ref import ImageRef, names_host
from imagesmith.model.tags import DOCKER_TAG, FloatingTag, TagPolicy

BUILD_SCHEMA = schemas.BUILD_ARTIFACT
BUILD_FILE = "build.json"
VERIFY_FILE = "verify.json"
STATEMENT_FILE = "verify.dsse.json"  # the verifier's signed statement beside it (imagesmith.stages.trust)
LOCK_FILE = ".imagesmith.lock"
STATUSES = ("built", "cached", "failed", "skipped", "cancelled", "queued")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
REPOSITORY = re.compile(r"[a-z0-9]+(?:[._/-][a-z0-9]+)*")
HOST = re.compile(r"[A-Za-z0-9.-]+(?::[0-9]{1,5})?|\[[0-9A-Fa-f:]+\](?::[0-9]{1,5})?")


# -- the records ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Release:
    """The plan's release settings: registry, repository, tag policy, build date."""

    matrix: str
    date: str
    registry: str | None
    repository: str
    tags: TagPolicy

    @property
    def image(self) -> ImageSpec:
        return ImageSpec(self.repository, self.registry)

    @classmethod
    def of(cls, m: Matrix, date: str) -> "Release":
        return cls(m.file.name, date, m.image.registry, m.image.repository, m.tags)


@dataclass(frozen=True)
class Staged:
    """Where a built image waits for verification: ``repository@digest``, also
    tagged ``repository:tag`` (a content tag, never a release tag)."""

    repository: str  # host/path
    tag: str
    digest: str
    pushed: bool = False  # this job sent it (False: the registry had it already)
    adopted: bool = False  # taken from another job's artifact, not built here

    @property
    def reference(self) -> str:
        return f"{self.repository}@{self.digest}"

    @property
    def ref(self) -> ImageRef:
        """``repository@digest`` by the reference grammar (the repository is checked to name a host where an
        artifact is read: :func:`check_repository`)."""
        return ImageRef.parse(self.reference)

    @property
    def host(self) -> str:
        return self.ref.host

    @property
    def path(self) -> str:
        return self.ref.repository


NOT_OURS = "it is not a build artifact this imagesmith wrote (build again with imagesmith build)"
ONE_LINE = re.compile(r"[^\x00-\x1f\x7f]{1,400}")  # a printable line, bounded


@dataclass(frozen=True)
class BuildRecord:
    """One target after a build job."""

    target: plan.Target
    release: Release
    status: str
    image_id: str | None
    context_hash: str = ""
    facts: Mapping[str, Any] | None = None
    size_bytes: int = 0
    seconds: float = 0.0
    error: str | None = None
    staged: Staged | None = None
    host: str = ""
    written_at: str = ""
    state: str = runstate.COMPLETE  # of the build job that wrote it (imagesmith.runstate)
    interrupted_by: str | None = None  # SIGINT, SIGTERM or the error that stopped that job

    @property
    def ok(self) -> bool:
        return self.status in ("built", "cached") and bool(self.image_id)

    @property
    def complete(self) -> bool:
        return self.state == runstate.COMPLETE

    def job_state(self) -> dict[str, str | None]:
        """Its build job's state as runstate reads it (state, interrupted_by)."""
        return {"state": self.state, "interrupted_by": self.interrupted_by}


@dataclass
class TargetResult:
    target: str
    status: str = "queued"  # built | cached | failed | skipped | cancelled
    image: str = ""
    image_id: str | None = None
    context_hash: str = ""
    seconds: float = 0.0
    steps: int = 0
    cached_steps: int = 0
    size_bytes: int = 0
    error: str | None = None
    log: str = ""
    dockerfile: str = ""
    facts: dict[str, Any] | None = None
    mismatches: list[str] = field(default_factory=list)
    staged: dict[str, Any] | None = None  # artifacts.Staged: where the image waits in the staging repository

    @property
    def ok(self) -> bool:
        return self.status in ("built", "cached")


def record_of(result: TargetResult, target: plan.Target, release: Release, state: str = runstate.COMPLETE,
              interrupted_by: str | None = None) -> BuildRecord:
    """A build result as its artifact, in its build job's state."""
    staged = Staged(**result.staged) if result.staged else None
    return BuildRecord(target, release, result.status, result.image_id, result.context_hash, result.facts,
                       result.size_bytes, result.seconds, result.error, staged, socket.gethostname(),
                       dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), state, interrupted_by)


def result_fields(record: BuildRecord) -> dict[str, Any]:
    """The ``build.TargetResult`` fields of a record (for verify and publish)."""
    return {"target": record.target.id, "status": record.status, "image": record.target.image,
            "image_id": record.image_id, "context_hash": record.context_hash, "seconds": record.seconds,
            "size_bytes": record.size_bytes, "error": record.error,
            "facts": dict(record.facts) if record.facts is not None else None,
            "staged": asdict(record.staged) if record.staged else None}


def build_identity(t: plan.Target) -> plan.Target:
    """What decides a target's image, without its release tags (which carry the date)."""
    return replace(t, tag="", floating=())


# -- JSON ----------------------------------------------------------------------------------------


def build_json(record: BuildRecord) -> dict[str, Any]:
    r = record.release
    return {"schema": BUILD_SCHEMA, "imagesmith": __version__, "host": record.host, "written_at": record.written_at,
            "state": record.state, **({"interrupted_by": record.interrupted_by} if record.interrupted_by else {}),
            "release": {"matrix": r.matrix, "date": r.date, "registry": r.registry, "repository": r.repository,
                        "tags": policy_json(r.tags)},
            "target": asdict(record.target),
            "result": {"status": record.status, "image_id": record.image_id, "context_hash": record.context_hash,
                       "facts": record.facts, "size_bytes": record.size_bytes, "seconds": record.seconds,
                       "error": record.error},
            "staged": asdict(record.staged) if record.staged else None}


def policy_json(p: TagPolicy) -> dict[str, Any]:
    return {"immutable": p.immutable, "prerelease": p.prerelease,
            "floating": [{"tag": f.template, "when": dict(f.when)} for f in p.floating]}


def write_build(path: Path, record: BuildRecord) -> None:
    write_json(path, build_json(record))


def write_builds(out: Path, records: list[BuildRecord]) -> list[Path]:
    paths = [out / r.target.id / BUILD_FILE for r in records]
    for path, record in zip(paths, records):
        write_build(path, record)
    return paths


_READ = fields.Wording(kind=fields.type_name, not_number="{value!r} is not a number")


def _reader(path: Path) -> fields.Fields:
    """Checks one artifact's values; every problem names the file and the key (and that it is not ours)."""
    return fields.Fields(str(path), NOT_OURS, _READ)


def read_build(path: Path, root: Path | None = None) -> BuildRecord:
    """A build artifact inside ``root`` (default: its folder), through :mod:`imagesmith.model.loader`
    (confined, bounded, strict JSON, schema ``build-1``), then every value checked
    (UserError naming the file and key otherwise)."""
    r = _reader(path)
    doc = loader.load_json_artifact(path, root=root, schema=BUILD_SCHEMA, fix=NOT_OURS)
    result = r.mapping(doc.get("result"), "result")
    status = r.valid(result, "status", "result")
    if status not in STATUSES:
        raise r.fail("result.status", f"{status!r} is not one of {', '.join(STATUSES)}")
    facts = result.get("facts")
    if facts is not None:
        r.mapping(facts, "result.facts")
    return BuildRecord(
        target=_target(r, doc.get("target")), release=_release(r, r.mapping(doc.get("release"), "release")),
        status=status, image_id=r.valid(result, "image_id", "result", DIGEST, optional=True),
        context_hash=r.valid(result, "context_hash", "result", re.compile(r"|sha256:[0-9a-f]{64}")),
        facts=facts, size_bytes=int(r.amount(result, "size_bytes", "result")),
        seconds=float(r.amount(result, "seconds", "result")), error=r.valid(result, "error", "result", optional=True),
        staged=_staged(r, doc.get("staged")), host=str(doc.get("host") or ""), written_at=str(doc.get("written_at") or ""),
        state=runstate.state_of(doc), interrupted_by=r.valid(doc, "interrupted_by", "build", ONE_LINE, optional=True))


def _target(r: fields.Fields, raw: Any) -> plan.Target:
    d = r.mapping(raw, "target")
    try:
        t = plan.target_from_json(d)
    except (KeyError, TypeError, ValueError) as exc:
        raise r.fail("target", f"not a plan target ({type(exc).__name__}: {exc})") from None
    if not DOCKER_TAG.fullmatch(t.id) or (t.parent is not None and not DOCKER_TAG.fullmatch(t.parent)):
        raise r.fail("target.id", f"{t.id!r} is not a target id")
    return t


def _release(r: fields.Fields, d: Mapping[str, Any]) -> Release:
    tags = r.mapping(d.get("tags"), "release.tags")
    floating = []
    for i, f in enumerate(tags.get("floating") or []):
        f = r.mapping(f, f"release.tags.floating[{i}]")
        when = r.mapping(f.get("when") or {}, f"release.tags.floating[{i}].when")
        floating.append(FloatingTag(r.valid(f, "tag", f"release.tags.floating[{i}]"),
                                    tuple((str(k), str(v)) for k, v in when.items())))
    policy = TagPolicy(r.valid(tags, "immutable", "release.tags"), tuple(floating), tags.get("prerelease") is True)
    return Release(r.valid(d, "matrix", "release"), r.valid(d, "date", "release", re.compile(r"[0-9]{8}")),
                   r.valid(d, "registry", "release", HOST, optional=True), r.valid(d, "repository", "release", REPOSITORY),
                   policy)


def _staged(r: fields.Fields, raw: Any) -> Staged | None:
    if raw is None:
        return None
    d = r.mapping(raw, "staged")
    repository = r.valid(d, "repository", "staged")
    check_repository(repository, lambda why: r.fail("staged.repository", why))
    return Staged(repository, r.valid(d, "tag", "staged", DOCKER_TAG), r.valid(d, "digest", "staged", DIGEST),
                  d.get("pushed") is True, d.get("adopted") is True)


def check_repository(name: str, fail: Callable[[str], Exception]) -> None:
    """``host[:port]/path``: a registry host and a repository path."""
    host, sep, path = name.partition("/")
    if not sep or not HOST.fullmatch(host) or not names_host(host):
        raise fail(f"{name!r} does not start with a registry host (e.g. harbor.example.com/ml/staging)")
    if not REPOSITORY.fullmatch(path):
        raise fail(f"{name!r}: {path!r} is not a repository path (lowercase letters, digits, . _ - /)")


# -- a folder of artifacts -----------------------------------------------------------------------


@dataclass(frozen=True)
class Found:
    """A build record and the folder it was found in (its verify.json sits beside it)."""

    record: BuildRecord
    folder: Path

    @property
    def verify_path(self) -> Path:
        return self.folder / VERIFY_FILE


def find_builds(out: Path) -> dict[str, Found]:
    """Every ``build.json`` in ``out``'s subfolders, by target. Several jobs' copies of one
    target must agree (same image, same staged digest); the one with a verify.json wins."""
    found: dict[str, Found] = {}
    for path in artifact_paths(out):
        item = Found(read_build(path, root=out), path.parent)
        tid = item.record.target.id
        other = found.get(tid)
        _same(other, item)
        if other is None or (not other.verify_path.is_file() and item.verify_path.is_file()):
            found[tid] = item
    return found


def artifact_paths(out: Path) -> list[Path]:
    """``OUT/*/build.json``, broken links and non-files included (the loader says what is wrong with them)."""
    return sorted(d / BUILD_FILE for d in out.glob("*") if d.is_dir() and os.path.lexists(d / BUILD_FILE))


def _same(a: Found | None, b: Found) -> None:
    if a is None:
        return
    ra, rb = a.record, b.record
    if (ra.image_id, ra.staged and ra.staged.digest) != (rb.image_id, rb.staged and rb.staged.digest):
        raise UserError(f"{a.folder / BUILD_FILE} and {b.folder / BUILD_FILE} both describe {ra.target.id} but name different "
                        f"images ({ra.image_id} vs {rb.image_id}); gather the artifacts of one pipeline only")


def remove_stale(out: Path, planned: set[str]) -> list[str]:
    """After a build of the whole plan: drop the artifacts (build.json, verify.json) of targets the plan
    no longer has, so that a publish from OUT never releases them. The targets removed."""
    gone = []
    for path in artifact_paths(out):
        try:
            tid = read_build(path, root=out).target.id
        except UserError:
            continue  # not ours to judge; publish will say what is wrong with it
        if tid not in planned:
            path.unlink()
            (path.parent / VERIFY_FILE).unlink(missing_ok=True)
            (path.parent / STATEMENT_FILE).unlink(missing_ok=True)
            gone.append(tid)
    return gone


def one_release(found: Mapping[str, Found]) -> Release:
    """The release settings all the gathered artifacts share (they come from one plan)."""
    releases = {f.record.release for f in found.values()}
    if not releases:
        raise UserError("no build artifacts (*/build.json) found; run imagesmith build --out DIR first, or gather the build jobs' artifacts into DIR")
    if len(releases) > 1:
        seen = ", ".join(sorted(f"{r.registry}/{r.repository} {r.date}" for r in releases))
        raise UserError(f"the build artifacts come from different plans ({seen}); gather the artifacts of one pipeline only")
    return releases.pop()


# -- one writer per output folder ----------------------------------------------------------------


@contextlib.contextmanager
def locked(out: Path, command: str, note: Callable[[str], None] | None = None,
           timeout_s: float = -1) -> Iterator[None]:
    """Hold ``OUT/.imagesmith.lock`` while ``command`` writes into ``out``: a second
    imagesmith command on the same folder waits (and says for whom)."""
    from filelock import FileLock, Timeout

    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_FILE
    lock = FileLock(str(path), mode=0o644)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if note is not None:
            note(f"waiting: {out} is being written by another imagesmith command ({_holder(out)})")
        try:
            lock.acquire(timeout=timeout_s)
        except Timeout:
            raise UserError(f"{out} is still being written by another imagesmith command ({_holder(out)}); "
                            f"wait for it or use another --out") from None
    try:
        write_text(out / ".imagesmith.owner", f"{command} pid {os.getpid()} on {socket.gethostname()}\n")
        yield
    finally:
        lock.release()


def _holder(out: Path) -> str:
    try:  # in OUT, where another job may have left anything: one bounded line, never a FIFO
        text = loader.read_confined(out / ".imagesmith.owner", cap=4096).decode("utf-8", errors="replace").strip()
    except UserError:
        return "unknown"
    return text.splitlines()[0][:200] if text else "unknown"
