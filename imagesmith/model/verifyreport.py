"""The verify report (``imagesmith.verify-report/1``) as one typed value, parsed once where it enters.

A verify report is written by the payload inside the image under test, completed on the host
(``stages.verify.judge``: the host's checks, notes, image, NVML; ``gpuwatch`` and ``sampling``: the sharing verdict),
then read back from a file (``--json``, a fleet cell's ``verify.json``) or from a signed statement. Wherever it enters,
:func:`parse` turns it into a frozen :class:`VerifyReport` after the schema check (``model.loader``) has run; every
reader (the release policy, the attestation, the fleet judge, the CLI) takes that value, never the ``dict``.

What the report says is read as the report says it: numbers keep the type they were written with (``90`` stays an
int: the CLI prints them as written), and a field that is absent stays ``None`` so that a reader can tell "not said"
from "said empty". A value of the wrong kind is a :class:`~imagesmith.model.loader.LoadError` naming the file, the key
path and what was found (``OUT/a/verify.json: report.checks[4].status: 'meh' is not a valid value``).

The document exactly as read stays with the value (:meth:`VerifyReport.to_json`): signatures, attestations and the
files imagesmith writes use it, never a re-serialisation of these records, so what is signed is byte for byte what the
payload and the host wrote. Host code that adds to a report (notes, judged checks) builds the new document with
:meth:`VerifyReport.amended`, which parses it again.

The code that *builds* the document on the host (``judge.with_checks``/``with_notes``/``finish``, ``gpuwatch``,
``sampling.judged``) works on the mapping it assembles and produces this value at its end.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from imagesmith.model import schemas
from imagesmith.model.fields import Fields

STATUSES = ("pass", "warn", "fail", "skip", "inconclusive")  # a check's outcome (the payload's STATUSES)
MODES = ("gpu", "cpu")
SEEN = ("start", "end", "both", "during")  # a tenant seen at the payload's start, end, both; during: by the host's watch
FIX = "is this the report imagesmith verify wrote?"
Number = float  # an int or a float as written (mypy's numeric tower: an int is a float)


@dataclass(frozen=True)
class Check:
    """One check of the report: its outcome and, for a measured one, what it measured against what."""

    id: str
    status: str  # pass | warn | fail | skip | inconclusive
    title: str = ""
    value: Any = None  # what it measured, as written (a number, a version, an object)
    threshold: Number | None = None
    unit: str = ""
    baseline: Number | None = None  # a number, or the ``value`` of a baseline object
    percent_of_baseline: Number | None = None
    detail: str = ""
    optional: bool = False  # the report's own flag (the release policy judges by the shipped registry instead)
    duration_s: Number | None = None
    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """A failure that fails the target (optional checks never do)."""
        return self.status == "fail" and not self.optional


@dataclass(frozen=True)
class Mode:
    """How the run went (the payload's ``mode`` block): GPU or CPU, GPUs used, how the GPU checks ended."""

    mode: str | None = None  # gpu | cpu
    gpus: int | None = None
    requested: str | None = None  # --gpus as asked
    status: str | None = None  # the GPUs as asked? (gpu.devices' status)
    reason: str | None = None
    gpu_checks: Mapping[str, int] = field(default_factory=dict)  # status -> how many GPU checks ended so


@dataclass(frozen=True)
class Gpu:
    """One GPU the payload saw (``environment.gpus[i]``)."""

    index: int | None = None
    name: str | None = None
    capability: str | None = None
    memory_gib: Number | None = None


@dataclass(frozen=True)
class Environment:
    """What the payload measured about where it ran; ``None``: it did not say."""

    torch: str | None = None
    cuda: str | None = None  # None or "": a CPU-only torch
    cudnn: str | None = None
    nccl: str | None = None
    python: str | None = None
    os: str | None = None
    driver: str | None = None
    machine: str | None = None  # uname -m
    gpus: tuple[Gpu, ...] = ()

    def fact(self, name: str) -> str | None:
        """One of the measured facts by name (``torch``, ``cuda``, ... ``machine``)."""
        value: str | None = getattr(self, name)
        return value


FACTS = ("torch", "cuda", "cudnn", "nccl", "python", "os", "driver", "machine")


@dataclass(frozen=True)
class Tenant:
    """A process on a run's GPU that is not the run's (``sharing.foreign[i]``); ``pid`` None: one it cannot see."""

    gpu: int | None
    uuid: str
    pid: int | None
    name: str | None
    used_bytes: int | None
    seen: str  # start | end | both (the payload), during (the host's watch)

    def entry(self) -> dict[str, Any]:
        """As the payload's wording (``sharing.describe``) reads one: its fields, by their report names."""
        return asdict(self)


@dataclass(frozen=True)
class Sharing:
    """Whether the GPUs were the run's alone; ``exclusive`` None: nobody could measure it (``reason`` says why)."""

    exclusive: bool | None
    allowed: bool = False  # --allow-shared-gpu
    foreign: tuple[Tenant, ...] = ()
    reason: str | None = None


@dataclass(frozen=True)
class Emulation:
    """The image's platform was not the engine's: it ran under an emulator (CPU mode)."""

    image: str | None = None
    host: str | None = None
    by: str | None = None


@dataclass(frozen=True)
class Platform:
    """The image's platform as the engine's copy of it says, and the engine's own."""

    image: str | None = None
    host: str | None = None


@dataclass(frozen=True)
class Image:
    """The image that ran (the host's view): reference, id, the digests it was served as, its labels."""

    ref: str | None = None
    id: str | None = None
    digest: str | None = None
    digests: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Summary:
    """The report's own count of outcomes (status -> count, as written) and its ``ok``, neither believed as a
    verdict (the policy judges the checks again)."""

    counts: Mapping[str, Number] = field(default_factory=dict)
    ok: bool | None = None
    written: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)  # the object as read (None: absent)

    def get(self, status: str, default: Number = 0) -> Number:
        return self.counts.get(status, default)

    def to_json(self) -> dict[str, Any] | None:
        """The summary as the report wrote it (release.json quotes it)."""
        return None if self.written is None else dict(self.written)


@dataclass(frozen=True)
class VerifyReport:
    """A verify report, read. ``source`` and ``where`` locate it in messages; :meth:`to_json` is the document as read."""

    schema: str
    checks: tuple[Check, ...]
    tier: str = ""
    started_at: str | None = None
    duration_s: Number | None = None
    wall_s: Number | None = None  # the host's wall time of the whole run
    state: str | None = None  # running | complete | interrupted; None: written before states (complete)
    interrupted_by: str | None = None
    mode: Mode | None = None
    environment: Environment = field(default_factory=Environment)
    summary: Summary = field(default_factory=Summary)
    image: Image | None = None
    sharing: Sharing | None = None  # None: written before runs were watched
    emulation: Emulation | None = None
    platform: Platform | None = None
    notes: tuple[str, ...] = ()
    payload_schema: str | None = None  # the payload's own schema name (the host's finish keeps it)
    engine_name: str | None = None  # Docker | Podman
    engine_version: str | None = None
    vulnerabilities: Mapping[str, Any] | None = None  # a vulnerability gate's findings, as written (the attestation carries them)
    gpu_path: str | None = None  # how GPUs reached the container (model.gpupath: nvidia, cdi-engine, cdi-translated, none)
    source: str = field(default="the verify report", compare=False)
    where: str = field(default="report", compare=False)
    _raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        """The document exactly as read (a shallow copy): what is signed, attested and written."""
        return dict(self._raw)

    def amended(self, **changes: Any) -> VerifyReport:
        """This report with top-level keys set (``notes=[...]``, ``checks=[...]``), read again."""
        return parse(dict(self._raw) | changes, self.source, self.where)

    def check(self, check_id: str) -> Check | None:
        """The first check with id ``check_id``."""
        return next((c for c in self.checks if c.id == check_id), None)

    @property
    def cuda_image(self) -> bool:
        """Its torch is a CUDA build (the payload measured a CUDA version)."""
        return bool(self.environment.cuda)


def parse(raw: Any, source: str = "the verify report", where: str = "report") -> VerifyReport:
    """``raw`` (a verify report that passed the schema check) as a :class:`VerifyReport`; a value of the wrong kind is
    a LoadError ``SOURCE: WHERE.key.path: why``."""
    r = Fields(source, FIX)
    doc = r.mapping(raw, where)
    if doc.get("schema") != schemas.VERIFY_REPORT:
        raise r.fail(r.at(where, "schema"), f"expected {schemas.VERIFY_REPORT!r}, got {doc.get('schema')!r}")
    engine, gpu_path = r.obj(doc, "engine", where), r.obj(doc, "gpu_path", where)
    return VerifyReport(
        schema=schemas.VERIFY_REPORT, tier=r.text(doc, "tier", where),
        checks=tuple(_check(r, c, r.at(r.at(where, "checks"), i)) for i, c in enumerate(r.listed(doc, "checks", where))),
        started_at=r.maybe_text(doc, "started_at", where), duration_s=r.figure(doc, "duration_s", where),
        wall_s=r.figure(doc, "wall_s", where), state=r.maybe_text(doc, "state", where),
        interrupted_by=r.maybe_text(doc, "interrupted_by", where), mode=_mode(r, doc, where),
        environment=_environment(r, doc, where), summary=_summary(r, doc, where), image=_image(r, doc, where),
        sharing=_sharing(r, doc, where), emulation=_emulation(r, doc, where), platform=_platform(r, doc, where),
        notes=tuple(r.string(n, r.at(r.at(where, "notes"), i)) for i, n in enumerate(r.listed(doc, "notes", where))),
        payload_schema=r.maybe_text(doc, "payload_schema", where),
        engine_name=r.maybe_text(engine, "name", r.at(where, "engine")) if engine else None,
        engine_version=r.maybe_text(engine, "version", r.at(where, "engine")) if engine else None,
        vulnerabilities=r.obj(doc, "vulnerabilities", where),
        gpu_path=r.maybe_text(gpu_path, "path", r.at(where, "gpu_path")) if gpu_path else None,
        source=source, where=where, _raw=doc,
    )


# -- the parts ------------------------------------------------------------------------------------------------


def _check(r: Fields, raw: Any, where: str) -> Check:
    c = r.mapping(raw, where)
    cid = r.valid(c, "id", where)
    status = c.get("status")
    if status not in STATUSES:
        raise r.fail(r.at(where, "status"), f"expected one of {', '.join(STATUSES)}, got {status!r}")
    data = r.obj(c, "data", where)
    return Check(
        id=cid, status=str(status), title=r.text(c, "title", where), value=c.get("value"),
        threshold=r.figure(c, "threshold", where), unit=r.text(c, "unit", where), baseline=_baseline(r, c, where),
        percent_of_baseline=r.figure(c, "percent_of_baseline", where), detail=r.text(c, "detail", where),
        optional=r.flag(c, "optional", where), duration_s=r.figure(c, "duration_s", where), data=data or {},
    )


def _baseline(r: Fields, c: Mapping[str, Any], where: str) -> Number | None:
    """A number, or an object whose ``value`` is one (the baseline the payload compared against)."""
    raw = c.get("baseline")
    if isinstance(raw, Mapping):
        return r.figure(raw, "value", r.at(where, "baseline"))
    return r.figure(c, "baseline", where)


def _mode(r: Fields, doc: Mapping[str, Any], where: str) -> Mode | None:
    m = r.obj(doc, "mode", where)
    if m is None:
        return None
    at = r.at(where, "mode")
    counts = r.obj(m, "gpu_checks", at) or {}
    return Mode(mode=r.choice(m, "mode", at, MODES), gpus=r.whole(m, "gpus", at), requested=r.maybe_text(m, "requested", at),
                status=r.maybe_text(m, "status", at), reason=r.maybe_text(m, "reason", at),
                gpu_checks={str(k): r.count(counts, str(k), r.at(at, "gpu_checks")) for k in counts})


def _environment(r: Fields, doc: Mapping[str, Any], where: str) -> Environment:
    env = r.obj(doc, "environment", where) or {}
    at = r.at(where, "environment")
    gpus = tuple(_gpu(r, g, r.at(r.at(at, "gpus"), i)) for i, g in enumerate(r.listed(env, "gpus", at)))
    return Environment(**{k: r.scalar(env, k, at) for k in FACTS}, gpus=gpus)


def _gpu(r: Fields, raw: Any, where: str) -> Gpu:
    g = r.mapping(raw, where)
    return Gpu(index=r.whole(g, "index", where), name=r.scalar(g, "name", where),
               capability=r.scalar(g, "capability", where), memory_gib=r.figure(g, "memory_gib", where))


def _summary(r: Fields, doc: Mapping[str, Any], where: str) -> Summary:
    written = r.obj(doc, "summary", where)
    s, at = written or {}, r.at(where, "summary")
    counts = {k: r.amount(s, k, at) for k in STATUSES if s.get(k) is not None}
    return Summary(counts, r.flag(s, "ok", at) if s.get("ok") is not None else None, written)


def _image(r: Fields, doc: Mapping[str, Any], where: str) -> Image | None:
    i = r.obj(doc, "image", where)
    if i is None:
        return None
    at = r.at(where, "image")
    labels = r.obj(i, "labels", at) or {}
    for key, value in labels.items():
        if not isinstance(value, str):
            raise r.expected(r.at(r.at(at, "labels"), str(key)), "text", value)
    return Image(ref=r.maybe_text(i, "ref", at), id=r.maybe_text(i, "id", at), digest=r.maybe_text(i, "digest", at),
                 digests=tuple(r.strings(i, "digests", at)), labels=dict(labels))


def _sharing(r: Fields, doc: Mapping[str, Any], where: str) -> Sharing | None:
    s = r.obj(doc, "sharing", where)
    if s is None:
        return None
    at = r.at(where, "sharing")
    exclusive = s.get("exclusive")
    if exclusive is not None and not isinstance(exclusive, bool):
        raise r.fail(r.at(at, "exclusive"), f"expected true, false or null, got {exclusive!r}")
    foreign = tuple(_tenant(r, t, r.at(r.at(at, "foreign"), i)) for i, t in enumerate(r.listed(s, "foreign", at)))
    return Sharing(exclusive, r.flag(s, "allowed", at), foreign, r.maybe_text(s, "reason", at))


def _tenant(r: Fields, raw: Any, where: str) -> Tenant:
    t = r.mapping(raw, where)
    return Tenant(gpu=r.whole(t, "gpu", where), uuid=r.text(t, "uuid", where), pid=r.whole(t, "pid", where),
                  name=r.maybe_text(t, "name", where), used_bytes=r.whole(t, "used_bytes", where), seen=r.choice(t, "seen", where, SEEN) or "")


def _emulation(r: Fields, doc: Mapping[str, Any], where: str) -> Emulation | None:
    e = r.obj(doc, "emulation", where)
    at = r.at(where, "emulation")
    return None if e is None else Emulation(r.maybe_text(e, "image", at), r.maybe_text(e, "host", at), r.maybe_text(e, "by", at))


def _platform(r: Fields, doc: Mapping[str, Any], where: str) -> Platform | None:
    p = r.obj(doc, "platform", where)
    at = r.at(where, "platform")
    return None if p is None else Platform(r.maybe_text(p, "image", at), r.maybe_text(p, "host", at))
