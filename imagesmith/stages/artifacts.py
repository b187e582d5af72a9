"""Stage artifacts on disk: what one job leaves for the next.

``OUT/<target>/build.json`` is one target as a build job left it, a :class:`~imagesmith.model.buildreport.BuildRecord`
(the frozen records and their one reader are :mod:`imagesmith.model.buildreport`). One file per target, so jobs on
other machines never write the same file, and a folder gathered from many jobs' artifacts (GitLab extracts them side
by side; GitHub downloads them into one folder) holds the whole build. ``publish`` needs nothing else (no matrix):
these records and the ``verify.json`` beside each.

Every file is written atomically (temp file + rename) and read back through the loader and
:func:`imagesmith.model.buildreport.parse`: an artifact comes from another job, so it is input like a matrix is.
:func:`locked` serialises the commands that write into one output folder (two builds or publishes into the same
folder at once).
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import os
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from imagesmith import runstate
from imagesmith.atomic import write_json, write_text
from imagesmith.errors import UserError
from imagesmith.model import buildreport, loader, plan
from imagesmith.model.buildreport import BuildRecord, Release, Staged, TargetResult

BUILD_FILE = "build.json"
VERIFY_FILE = "verify.json"
STATEMENT_FILE = "verify.dsse.json"  # the verifier's signed statement beside it (imagesmith.stages.trust)
LOCK_FILE = ".imagesmith.lock"


# -- what a build makes of one target ------------------------------------------------------------


@dataclass
class TargetRun:
    """The builder's working record of one target, filled in as the build goes; :meth:`model` is its
    :class:`~imagesmith.model.buildreport.TargetResult`."""

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
    staged: Staged | None = None  # where the image waits in the staging repository

    @property
    def ok(self) -> bool:
        return self.status in ("built", "cached")

    def model(self) -> TargetResult:
        return TargetResult(self.target, self.status, self.image, self.image_id, self.context_hash, self.seconds,
                            self.steps, self.cached_steps, self.size_bytes, self.error, self.log, self.dockerfile,
                            copy.deepcopy(self.facts), tuple(self.mismatches), self.staged)


def record_of(result: TargetResult, target: plan.Target, release: Release, state: str = runstate.COMPLETE,
              interrupted_by: str | None = None) -> BuildRecord:
    """A build result as its artifact, in its build job's state."""
    return BuildRecord(target, release, result.status, result.image_id, result.context_hash, result.facts,
                       result.size_bytes, result.seconds, result.error, result.staged, socket.gethostname(),
                       dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), state, interrupted_by)


def result_of(record: BuildRecord, folder: Path) -> TargetResult:
    """A record as the build result verify and publish take (its log and Dockerfile in ``folder``)."""
    return TargetResult(record.target.id, record.status, record.target.image, record.image_id, record.context_hash,
                        record.seconds, size_bytes=record.size_bytes, error=record.error,
                        log=str(folder / "build.log"), dockerfile=str(folder / "Dockerfile"),
                        facts=dict(record.facts) if record.facts is not None else None, staged=record.staged)


def build_identity(t: plan.Target) -> plan.Target:
    """What decides a target's image, without its release tags (which carry the date)."""
    return replace(t, tag="", floating=())


# -- the files -----------------------------------------------------------------------------------


def write_build(path: Path, record: BuildRecord) -> None:
    write_json(path, record.to_json())


def write_builds(out: Path, records: list[BuildRecord]) -> list[Path]:
    paths = [out / r.target.id / BUILD_FILE for r in records]
    for path, record in zip(paths, records):
        write_build(path, record)
    return paths


def read_build(path: Path, root: Path | None = None) -> BuildRecord:
    """A build artifact inside ``root`` (default: its folder), through :mod:`imagesmith.model.loader`
    (confined, bounded, strict JSON, schema ``build-1``), then every value checked by
    :func:`imagesmith.model.buildreport.parse` (UserError naming the file and key otherwise)."""
    doc = loader.load_json_artifact(path, root=root, schema=buildreport.BUILD_SCHEMA, fix=buildreport.NOT_OURS)
    return buildreport.parse(doc, str(path))


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
