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
    engine = _optional(r, doc, "engine", where)
    return VerifyReport(
        schema=schemas.VERIFY_REPORT, tier=r.text(doc, "tier", where),
        checks=tuple(_check(r, c, r.at(r.at(where, "checks"), i)) for i, c in enumerate(_list(r, doc, "checks", where))),
        started_at=_str(r, doc, "started_at", where), duration_s=_num(r, doc, "duration_s", where),
        wall_s=_num(r, doc, "wall_s", where), state=_str(r, doc, "state", where),
        interrupted_by=_str(r, doc, "interrupted_by", where), mode=_mode(r, doc, where),
        environment=_environment(r, doc, where), summary=_summary(r, doc, where), image=_image(r, doc, where),
        sharing=_sharing(r, doc, where), emulation=_emulation(r, doc, where), platform=_platform(r, doc, where),
        notes=tuple(_text(r, n, r.at(r.at(where, "notes"), i)) for i, n in enumerate(_list(r, doc, "notes", where))),
        payload_schema=_str(r, doc, "payload_schema", where),
        engine_name=_str(r, engine, "name", r.at(where, "engine")) if engine else None,
        engine_version=_str(r, engine, "version", r.at(where, "engine")) if engine else None,
        vulnerabilities=_optional(r, doc, "vulnerabilities", where),
        source=source, where=where, _raw=doc,
    )


# -- the parts ------------------------------------------------------------------------------------------------


def _check(r: Fields, raw: Any, where: str) -> Check:
    c = r.mapping(raw, where)
    cid = r.valid(c, "id", where)
    status = c.get("status")
    if status not in STATUSES:
        raise r.fail(r.at(where, "status"), f"expected one of {', '.join(STATUSES)}, got {status!r}")
    data = _optional(r, c, "data", where)
    return Check(
        id=cid, status=str(status), title=r.text(c, "title", where), value=c.get("value"),
        threshold=_num(r, c, "threshold", where), unit=r.text(c, "unit", where), baseline=_baseline(r, c, where),
        percent_of_baseline=_num(r, c, "percent_of_baseline", where), detail=r.text(c, "detail", where),
        optional=_flag(r, c, "optional", where), duration_s=_num(r, c, "duration_s", where), data=data or {},
    )


def _baseline(r: Fields, c: Mapping[str, Any], where: str) -> Number | None:
    """A number, or an object whose ``value`` is one (the baseline the payload compared against)."""
    raw = c.get("baseline")
    if isinstance(raw, Mapping):
        return _num(r, raw, "value", r.at(where, "baseline"))
    return _num(r, c, "baseline", where)


def _mode(r: Fields, doc: Mapping[str, Any], where: str) -> Mode | None:
    m = _optional(r, doc, "mode", where)
    if m is None:
        return None
    at = r.at(where, "mode")
    counts = _optional(r, m, "gpu_checks", at) or {}
    return Mode(mode=_choice(r, m, "mode", at, MODES), gpus=_int(r, m, "gpus", at), requested=_str(r, m, "requested", at),
                status=_str(r, m, "status", at), reason=_str(r, m, "reason", at),
                gpu_checks={str(k): _count(r, counts, str(k), r.at(at, "gpu_checks")) for k in counts})


def _environment(r: Fields, doc: Mapping[str, Any], where: str) -> Environment:
    env = _optional(r, doc, "environment", where) or {}
    at = r.at(where, "environment")
    gpus = tuple(_gpu(r, g, r.at(r.at(at, "gpus"), i)) for i, g in enumerate(_list(r, env, "gpus", at)))
    return Environment(**{k: _scalar(r, env, k, at) for k in FACTS}, gpus=gpus)


def _gpu(r: Fields, raw: Any, where: str) -> Gpu:
    g = r.mapping(raw, where)
    return Gpu(index=_int(r, g, "index", where), name=_scalar(r, g, "name", where),
               capability=_scalar(r, g, "capability", where), memory_gib=_num(r, g, "memory_gib", where))


def _summary(r: Fields, doc: Mapping[str, Any], where: str) -> Summary:
    written = _optional(r, doc, "summary", where)
    s, at = written or {}, r.at(where, "summary")
    counts = {k: r.amount(s, k, at) for k in STATUSES if s.get(k) is not None}
    return Summary(counts, _flag(r, s, "ok", at) if s.get("ok") is not None else None, written)


def _image(r: Fields, doc: Mapping[str, Any], where: str) -> Image | None:
    i = _optional(r, doc, "image", where)
    if i is None:
        return None
    at = r.at(where, "image")
    labels = _optional(r, i, "labels", at) or {}
    for key, value in labels.items():
        if not isinstance(value, str):
            raise r.expected(r.at(r.at(at, "labels"), str(key)), "text", value)
    return Image(ref=_str(r, i, "ref", at), id=_str(r, i, "id", at), digest=_str(r, i, "digest", at),
                 digests=tuple(r.strings(i, "digests", at)), labels=dict(labels))


def _sharing(r: Fields, doc: Mapping[str, Any], where: str) -> Sharing | None:
    s = _optional(r, doc, "sharing", where)
    if s is None:
        return None
    at = r.at(where, "sharing")
    exclusive = s.get("exclusive")
    if exclusive is not None and not isinstance(exclusive, bool):
        raise r.fail(r.at(at, "exclusive"), f"expected true, false or null, got {exclusive!r}")
    foreign = tuple(_tenant(r, t, r.at(r.at(at, "foreign"), i)) for i, t in enumerate(_list(r, s, "foreign", at)))
    return Sharing(exclusive, _flag(r, s, "allowed", at), foreign, _str(r, s, "reason", at))


def _tenant(r: Fields, raw: Any, where: str) -> Tenant:
    t = r.mapping(raw, where)
    return Tenant(gpu=_int(r, t, "gpu", where), uuid=r.text(t, "uuid", where), pid=_int(r, t, "pid", where),
                  name=_str(r, t, "name", where), used_bytes=_int(r, t, "used_bytes", where), seen=r.text(t, "seen", where))


def _emulation(r: Fields, doc: Mapping[str, Any], where: str) -> Emulation | None:
    e = _optional(r, doc, "emulation", where)
    at = r.at(where, "emulation")
    return None if e is None else Emulation(_str(r, e, "image", at), _str(r, e, "host", at), _str(r, e, "by", at))


def _platform(r: Fields, doc: Mapping[str, Any], where: str) -> Platform | None:
    p = _optional(r, doc, "platform", where)
    at = r.at(where, "platform")
    return None if p is None else Platform(_str(r, p, "image", at), _str(r, p, "host", at))


# -- one value ------------------------------------------------------------------------------------------------


def _optional(r: Fields, d: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any] | None:
    """``d[key]``: an object, or None where absent or null."""
    value = d.get(key)
    return None if value is None else r.mapping(value, r.at(where, key))


def _list(r: Fields, d: Mapping[str, Any], key: str, where: str) -> list[Any]:
    return r.items(d.get(key), r.at(where, key))


def _str(r: Fields, d: Mapping[str, Any], key: str, where: str) -> str | None:
    """``d[key]``: text, or None where absent or null."""
    value = d.get(key)
    if value is not None and not isinstance(value, str):
        raise r.expected(r.at(where, key), "text or null", value)
    return value


def _text(r: Fields, value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise r.expected(where, "text", value)
    return value


def _scalar(r: Fields, d: Mapping[str, Any], key: str, where: str) -> str | None:
    """``d[key]`` as text where the payload may write a number (a version, a capability); None where absent or null."""
    return None if d.get(key) is None else r.text(d, key, where)


def _choice(r: Fields, d: Mapping[str, Any], key: str, where: str, allowed: tuple[str, ...]) -> str | None:
    value = d.get(key)
    if value is not None and value not in allowed:
        raise r.fail(r.at(where, key), f"expected one of {', '.join(allowed)}, got {value!r}")
    return value


def _num(r: Fields, d: Mapping[str, Any], key: str, where: str) -> Number | None:
    """``d[key]``: a number as written, or None where absent or null."""
    return None if d.get(key) is None else r.amount(d, key, where)


def _int(r: Fields, d: Mapping[str, Any], key: str, where: str) -> int | None:
    """``d[key]``: a whole number, or None where absent or null."""
    value = d.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise r.expected(r.at(where, key), "a whole number or null", value)
    return value


def _count(r: Fields, d: Mapping[str, Any], key: str, where: str) -> int:
    value = _int(r, d, key, where)
    if value is None or value < 0:
        raise r.fail(r.at(where, key), f"expected a count (a whole number, 0 or more), got {value!r}")
    return value


def _flag(r: Fields, d: Mapping[str, Any], key: str, where: str) -> bool:
    """``d[key]``: true or false; absent or null is false."""
    value = d.get(key)
    if value is not None and not isinstance(value, bool):
        raise r.fail(r.at(where, key), f"expected true or false, got {value!r}")
    return value is True
