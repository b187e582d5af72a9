"""What a build job reports, as frozen records: of one target (``imagesmith.build/1``, OUT/<target>/build.json,
:class:`BuildRecord`), and of all its targets (``imagesmith.build-report/1``, OUT/report.json, :class:`BuildReport`
with a :class:`TargetResult` for each).

One file per target: the plan's record of the target, the release settings of the plan (where ``publish`` promotes
to and how it tags: :class:`Release`), what the build made (status, image ID, context hash, measured facts) and where
the image was staged (repository, content tag, manifest digest: :class:`Staged`). ``publish`` needs nothing else (no
matrix): these records and the ``verify.json`` beside each.

A build artifact comes from another job, so it is input like a matrix is. Where it enters, the loader lets the file
in (:func:`imagesmith.model.loader.load_json_artifact`: confined, bounded, strict JSON, schema ``build-1``) and
:func:`parse` takes its values out with the reader kit (:mod:`imagesmith.model.fields`), every value checked: a bad
one is a :class:`~imagesmith.model.loader.LoadError` naming the file and the key path (and that it is not ours).
:meth:`BuildRecord.to_json` is the document a build job writes. A build report enters the same way (schema
``build-report-1``) and :func:`parse_report` reads it, for ``verify --build-report``, the run report and the renderers;
:meth:`BuildReport.to_json` is what the builder writes. The files themselves (written atomically, found in
a folder gathered from many jobs, one writer per folder) are :mod:`imagesmith.stages.artifacts`'s.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping

from imagesmith import __version__, runstate
from imagesmith.model import fields, plan, schemas
from imagesmith.model.matrix.records import ImageSpec, Matrix
from imagesmith.model.ref import ImageRef, names_host
from imagesmith.model.tags import DOCKER_TAG, FloatingTag, TagPolicy

BUILD_SCHEMA = schemas.BUILD_ARTIFACT
REPORT_SCHEMA = schemas.BUILD_REPORT
STATUSES = ("built", "cached", "failed", "skipped", "cancelled", "queued")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
REPOSITORY = re.compile(r"[a-z0-9]+(?:[._/-][a-z0-9]+)*")
HOST = re.compile(r"[A-Za-z0-9.-]+(?::[0-9]{1,5})?|\[[0-9A-Fa-f:]+\](?::[0-9]{1,5})?")
NOT_OURS = "it is not a build artifact this imagesmith wrote (build again with imagesmith build)"
ONE_LINE = re.compile(r"[^\x00-\x1f\x7f]{1,400}")  # a printable line, bounded


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

    def to_json(self) -> dict[str, Any]:
        """The build artifact (``imagesmith.build/1``) a build job writes."""
        r = self.release
        return {"schema": BUILD_SCHEMA, "imagesmith": __version__, "host": self.host, "written_at": self.written_at,
                "state": self.state, **({"interrupted_by": self.interrupted_by} if self.interrupted_by else {}),
                "release": {"matrix": r.matrix, "date": r.date, "registry": r.registry, "repository": r.repository,
                            "tags": policy_json(r.tags)},
                "target": asdict(self.target),
                "result": {"status": self.status, "image_id": self.image_id, "context_hash": self.context_hash,
                           "facts": self.facts, "size_bytes": self.size_bytes, "seconds": self.seconds,
                           "error": self.error},
                "staged": asdict(self.staged) if self.staged else None}


@dataclass(frozen=True)
class TargetResult:
    """What a build made of one target, as a build report lists it (``OUT/report.json``'s ``targets``)."""

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
    facts: Mapping[str, Any] | None = None
    mismatches: tuple[str, ...] = ()
    staged: Staged | None = None  # where the image waits in the staging repository

    @property
    def ok(self) -> bool:
        return self.status in ("built", "cached")

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "status": self.status, "image": self.image, "image_id": self.image_id,
                "context_hash": self.context_hash, "seconds": self.seconds, "steps": self.steps,
                "cached_steps": self.cached_steps, "size_bytes": self.size_bytes, "error": self.error, "log": self.log,
                "dockerfile": self.dockerfile, "facts": None if self.facts is None else dict(self.facts),
                "mismatches": list(self.mismatches), "staged": asdict(self.staged) if self.staged else None}


@dataclass(frozen=True)
class CudaLayer:
    """One CUDA image a build made or found (OS base + the shared CUDA layer): the wheel set, the base it sits on,
    its figures. The builder keeps one per CUDA image and replaces it as the image is made."""

    set: str
    base_image: str
    image: str = ""
    status: str = ""  # built | cached | failed
    image_id: str | None = None
    diff_id: str | None = None
    layer_bytes: int = 0  # the layer's tar (unpacked size)
    image_bytes: int = 0  # the CUDA image: OS base + layer
    seconds: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class BuildReport:
    """A build job's report of all its targets (``imagesmith.build-report/1``, OUT/report.json): each target's
    result, the bases, the CUDA images (:class:`CudaLayer`) and the engine that built."""

    matrix: str
    started_at: str
    seconds: float
    base_images: Mapping[str, str]
    results: tuple[TargetResult, ...]
    cuda_layers: tuple[CudaLayer, ...] = ()
    base_image_bytes: Mapping[str, int] = field(default_factory=dict)
    engine: Mapping[str, Any] | None = None  # EngineKind.record(): the engine that built

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def to_json(self) -> dict[str, Any]:
        """The report; ``state`` is added by whoever writes it (running, complete, interrupted)."""
        return {"schema": REPORT_SCHEMA, "matrix": self.matrix, "started_at": self.started_at,
                "seconds": round(self.seconds, 2), "ok": self.ok, "base_images": dict(self.base_images),
                "cuda_layers": [asdict(c) for c in self.cuda_layers], "base_image_bytes": dict(self.base_image_bytes),
                "targets": [r.to_json() for r in self.results]} | ({"engine": dict(self.engine)} if self.engine else {})


def policy_json(p: TagPolicy) -> dict[str, Any]:
    return {"immutable": p.immutable, "prerelease": p.prerelease,
            "floating": [{"tag": f.template, "when": dict(f.when)} for f in p.floating]}


# -- reading (untrusted) -------------------------------------------------------------------------


_READ = fields.Wording(kind=fields.type_name, not_number="{value!r} is not a number")


def parse(doc: Any, source: str) -> BuildRecord:
    """A build artifact the loader let in (``source``: its file, as messages name it), every value checked
    (a LoadError naming the file and key otherwise)."""
    r = fields.Fields(source, NOT_OURS, _READ)
    doc = r.mapping(doc, "build")
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


def _staged(r: fields.Fields, raw: Any, where: str = "staged") -> Staged | None:
    if raw is None:
        return None
    d = r.mapping(raw, where)
    repository = r.valid(d, "repository", where)
    check_repository(repository, lambda why: r.fail(r.at(where, "repository"), why))
    return Staged(repository, r.valid(d, "tag", where, DOCKER_TAG), r.valid(d, "digest", where, DIGEST),
                  d.get("pushed") is True, d.get("adopted") is True)


def check_repository(name: str, fail: Callable[[str], Exception]) -> None:
    """``host[:port]/path``: a registry host and a repository path."""
    host, sep, path = name.partition("/")
    if not sep or not HOST.fullmatch(host) or not names_host(host):
        raise fail(f"{name!r} does not start with a registry host (e.g. harbor.example.com/ml/staging)")
    if not REPOSITORY.fullmatch(path):
        raise fail(f"{name!r}: {path!r} is not a repository path (lowercase letters, digits, . _ - /)")


# -- the build report of a whole job (untrusted) -------------------------------------------------


def parse_report(doc: Any, source: str, where: str = "") -> BuildReport:
    """A build report the loader let in (``source``: its file; ``where``: its key path, e.g. a run report's
    ``build``), every value checked (a LoadError naming the file and key path otherwise)."""
    r = fields.Fields(source)
    d = r.mapping(doc, where or "report")
    targets = r.listed(d, "targets", where)
    return BuildReport(
        matrix=r.text(d, "matrix", where), started_at=r.text(d, "started_at", where),
        seconds=float(r.amount(d, "seconds", where)), base_images=_texts(r, d, "base_images", where),
        results=tuple(_result(r, t, r.at(r.at(where, "targets"), i)) for i, t in enumerate(targets)),
        cuda_layers=tuple(_cuda_layer(r, c, r.at(r.at(where, "cuda_layers"), i)) for i, c in enumerate(r.listed(d, "cuda_layers", where))),
        base_image_bytes={k: int(r.amount(sizes, k, r.at(where, "base_image_bytes")))
                          for sizes in [r.obj(d, "base_image_bytes", where) or {}] for k in sizes},
        engine=r.obj(d, "engine", where))


def _cuda_layer(r: fields.Fields, raw: Any, where: str) -> CudaLayer:
    """A CUDA image's record: the set and the base it was built on, its figures."""
    c = r.mapping(raw, where)
    return CudaLayer(r.valid(c, "set", where), r.valid(c, "base_image", where), r.text(c, "image", where),
                     r.text(c, "status", where), r.maybe_text(c, "image_id", where), r.maybe_text(c, "diff_id", where),
                     int(r.figure(c, "layer_bytes", where) or 0), int(r.figure(c, "image_bytes", where) or 0),
                     float(r.figure(c, "seconds", where) or 0), r.maybe_text(c, "error", where))


def _texts(r: fields.Fields, d: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    values = r.obj(d, key, where) or {}
    return {str(k): r.string(v, r.at(r.at(where, key), str(k))) for k, v in values.items()}


def _result(r: fields.Fields, raw: Any, where: str) -> TargetResult:
    t = r.mapping(raw, where)
    target = r.text(t, "target", where)
    if not DOCKER_TAG.fullmatch(target):
        raise r.fail(r.at(where, "target"), f"{target!r} is not a target id")
    status = r.text(t, "status", where)
    if status not in STATUSES:
        raise r.fail(r.at(where, "status"), f"{status!r} is not one of {', '.join(STATUSES)}")
    return TargetResult(
        target, status, r.text(t, "image", where), r.maybe_text(t, "image_id", where), r.text(t, "context_hash", where),
        float(r.amount(t, "seconds", where)), int(r.amount(t, "steps", where)), int(r.amount(t, "cached_steps", where)),
        int(r.amount(t, "size_bytes", where)), r.maybe_text(t, "error", where), r.text(t, "log", where),
        r.text(t, "dockerfile", where), r.obj(t, "facts", where), tuple(r.strings(t, "mismatches", where)),
        _staged(r, t.get("staged"), r.at(where, "staged")))
