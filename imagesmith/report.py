"""Reports people read, from ONE versioned report.json.

Accepted inputs (the ``schema`` key decides):

* ``imagesmith.build-report/1``  (build.BuildReport.to_json())
* ``imagesmith.verify-report/1`` (the payload's report, plus the host's ``image`` and ``nvml``)
* ``imagesmith.run-report/1``    ``{"schema", "build": <build report> | null,
  "verify": {target_id: <verify report> | null}, "release": <release json> | null}``

The JSON is parsed at once into frozen records (``Run``, ``Target``, ``Verify``,
``Check``...); the three renderers (Markdown for CI job summaries, JUnit XML,
a self-contained HTML page with inline SVG charts) read only those records.
Renderers are pure functions returning text; ``write`` puts it on disk atomically.

Both shapes of the data the charts need are understood: the one written in
the design notes (``data.samples`` as ``[[step, bytes], ...]``, ``data.per_gpu``,
``nvml.samples``) and the one the payload and ``hostinfo.NvmlSampler`` emit
today (``data.steps`` + ``data.bytes``, ``data.per_gpu_tflops`` /
``per_gpu_gbps`` as ``{"0": value}``, ``nvml.gpus[].series``).
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from imagesmith import __version__, charts, policy, runstate, schemas
from imagesmith.atomic import write_text
from imagesmith.errors import UserError

BUILD_SCHEMA, VERIFY_SCHEMA, RUN_SCHEMA = schemas.BUILD_REPORT, schemas.VERIFY_REPORT, schemas.RUN_REPORT
SCHEMAS = (BUILD_SCHEMA, VERIFY_SCHEMA, RUN_SCHEMA)
FORMATS = ("md", "junit", "html")
STATUSES = ("pass", "warn", "fail", "skip")
BUILD_OK = ("built", "cached")
RELEASE_DONE = ("pushed", "unchanged")
LOG_TAIL_LINES = 20
TARGET_LABEL = "io.imagesmith.target"

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Characters XML 1.0 forbids (a build log with control codes must not break the JUnit file).
XML_INVALID = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


# =====================================================================  records


@dataclass(frozen=True)
class Check:
    id: str
    status: str  # pass | warn | fail | skip
    title: str = ""
    value: Any = None
    threshold: float | None = None
    unit: str = ""
    baseline: float | None = None
    percent_of_baseline: float | None = None
    detail: str = ""
    optional: bool = False
    duration_s: float | None = None
    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """A failure that fails the target (optional checks never do)."""
        return self.status == "fail" and not self.optional


@dataclass(frozen=True)
class GpuSeries:
    """NVML readings of one GPU over the run; ``values[metric][i]`` was read at ``t[i]``."""

    gpu: int
    name: str
    t: tuple[float, ...]
    values: Mapping[str, tuple[float | None, ...]]


@dataclass(frozen=True)
class Nvml:
    interval_s: float | None = None
    gpus: tuple[GpuSeries, ...] = ()
    error: str | None = None
    present: bool = False  # the report has an NVML block (the host-side sampler ran)


@dataclass(frozen=True)
class Verify:
    tier: str
    started_at: str
    duration_s: float | None
    image_ref: str
    environment: Mapping[str, Any]
    checks: tuple[Check, ...]
    nvml: Nvml
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)  # the report as read (for the release policy)

    @property
    def ok(self) -> bool:
        return not any(c.failed for c in self.checks)

    @property
    def not_gpu_verified(self) -> bool:
        """A CUDA build of torch whose verification did not run (or pass) on a GPU."""
        return bool(self.environment.get("cuda")) and not policy.evidence(self.raw).gpu_verified

    def count(self, status: str) -> int:
        return sum(c.status == status for c in self.checks)

    def gpu_name(self, index: int) -> str:
        for gpu in self.environment.get("gpus") or ():
            if isinstance(gpu, Mapping) and gpu.get("index") == index:
                return str(gpu.get("name", ""))
        return ""


@dataclass(frozen=True)
class Built:
    status: str  # built | cached | failed | skipped | cancelled | queued
    image: str = ""
    image_id: str | None = None
    seconds: float = 0.0
    size_bytes: int = 0
    error: str | None = None
    dockerfile: str = ""
    log: str = ""
    mismatches: tuple[str, ...] = ()
    log_tail: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status in BUILD_OK


@dataclass(frozen=True)
class Released:
    """One target in release.json (publish.TargetRelease)."""

    status: str  # pushed | unchanged | failed | not-built | not-verified | not-pushed
    reference: str = ""
    digest: str | None = None
    floating: tuple[str, ...] = ()
    error: str | None = None
    note: str = ""  # the release policy's word, e.g. "not GPU-verified: ..."

    @property
    def ok(self) -> bool:
        return self.status in RELEASE_DONE

    @property
    def remark(self) -> str:
        """The error, else the policy's note (one cell of the release tables)."""
        return self.error or self.note


@dataclass(frozen=True)
class Release:
    registry: str
    repository: str
    date: str
    ok: bool
    errors: tuple[str, ...]
    raw: Mapping[str, Any]


@dataclass(frozen=True)
class Target:
    id: str
    build: Built | None = None
    verify: Verify | None = None
    verify_expected: bool = False  # a run report: a built target without a verify report is not done
    release: Released | None = None

    @property
    def status(self) -> str:
        """One word for people: passed, warnings, failed, build failed, ... ."""
        if self.build is not None and not self.build.ok:
            return f"build {self.build.status}"
        if self.verify is None:
            return "not verified" if self.verify_expected else (self.build.status if self.build else "unknown")
        if not self.verify.ok:
            return "failed"
        word = "warnings" if self.verify.count("warn") else "passed"
        return f"{word}, {policy.NOT_GPU_VERIFIED}" if self.verify.not_gpu_verified else word

    @property
    def ok(self) -> bool:
        return self.status.split(",")[0] in ("passed", "warnings", *BUILD_OK)


@dataclass(frozen=True)
class Run:
    kind: str  # build | verify | run
    source: str
    started_at: str
    matrix: str
    targets: tuple[Target, ...]
    release: Release | None = None
    unfinished: tuple[str, ...] = ()  # parts of the run that did not complete ("build interrupted (SIGINT)")

    @property
    def complete(self) -> bool:
        return not self.unfinished

    @property
    def ok(self) -> bool:
        """Success: a run that completed, every target passed, the release (if any) ok."""
        return (self.complete and bool(self.targets) and all(t.ok for t in self.targets)
                and (self.release is None or self.release.ok))

    def failed_targets(self) -> list[Target]:
        return [t for t in self.targets if not t.ok]


# =====================================================================  parsing


class _Reader:
    """Typed access to raw JSON; a wrong type names the file and the key path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, message: str) -> UserError:
        return UserError(f"{self.source}: {where}: {message}")

    def mapping(self, raw: Any, where: str) -> Mapping[str, Any]:
        if not isinstance(raw, Mapping):
            raise self.fail(where, f"expected an object, got {_kind(raw)}")
        return raw

    def items(self, raw: Any, where: str) -> list[Any]:
        if raw is None:
            return []
        if not isinstance(raw, list):
            raise self.fail(where, f"expected a list, got {_kind(raw)}")
        return raw

    def text(self, d: Mapping[str, Any], key: str, where: str, default: str = "") -> str:
        value = d.get(key)
        if value is None:
            return default
        if isinstance(value, (Mapping, list)):
            raise self.fail(f"{where}.{key}", f"expected text, got {_kind(value)}")
        return str(value)

    def number(self, d: Mapping[str, Any], key: str, where: str) -> float | None:
        value = d.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(f"{where}.{key}", f"expected a number, got {value!r}")
        return float(value)


def _kind(raw: Any) -> str:
    return {dict: "an object", list: "a list", str: "text", type(None): "null"}.get(type(raw), type(raw).__name__)


def load(path: Path, read_log: Callable[[str], list[str]] | None = None) -> Run:
    """Read and parse a report file; failed builds get the tail of their log when it is readable."""
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
    return parse(raw, str(path), read_log or log_tail)


def log_tail(log: str) -> list[str]:
    """The last lines of a build log (what a failure summary shows)."""
    try:
        return Path(log).read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError:
        return []


def parse(raw: Any, source: str = "report.json", read_log: Callable[[str], list[str]] | None = None) -> Run:
    """Raw report JSON (any of SCHEMAS) -> a Run."""
    r = _Reader(source)
    doc = r.mapping(raw, "report")
    schema = doc.get("schema")
    tail = read_log or (lambda _log: [])
    if schema == BUILD_SCHEMA:
        run = _run_from_build(r, doc, tail, "build")
    elif schema == VERIFY_SCHEMA:
        verify = _verify(r, doc, "report")
        run = Run("verify", source, verify.started_at, "", (Target(_verify_target_id(doc, source), verify=verify),))
    elif schema == RUN_SCHEMA:
        run = _run(r, doc, tail)
    else:
        raise r.fail("schema", f"{schema!r} is not one of {', '.join(SCHEMAS)}; is this an imagesmith report?")
    return dataclasses.replace(run, unfinished=unfinished(doc))


def unfinished(doc: Mapping[str, Any]) -> tuple[str, ...]:
    """Each part of a report (it, and in a run report its build, verify and release
    parts) whose run did not complete, with its state and why."""
    parts: list[tuple[str, Any]] = [({BUILD_SCHEMA: "build", VERIFY_SCHEMA: "verification"}.get(str(doc.get("schema")), "run"), doc)]
    if doc.get("schema") == RUN_SCHEMA:
        verifies = doc["verify"] if isinstance(doc.get("verify"), Mapping) else {}
        parts += [("build", doc.get("build")), ("release", doc.get("release"))]
        parts += [(f"verify of {t}", v) for t, v in verifies.items()]
    out = []
    for name, part in parts:
        if isinstance(part, Mapping) and not runstate.is_complete(part):
            why = part.get("interrupted_by")
            out.append(f"{name} {runstate.state_of(part)}" + (f" ({why})" if why else ""))
    return tuple(out)


def _run_from_build(r: _Reader, doc: Mapping[str, Any], tail: Callable[[str], list[str]], kind: str) -> Run:
    targets = []
    for i, raw in enumerate(r.items(doc.get("targets"), "targets")):
        where = f"targets[{i}]"
        t = r.mapping(raw, where)
        targets.append(Target(r.text(t, "target", where) or f"target-{i}", build=_built(r, t, where, tail)))
    return Run(kind, r.source, r.text(doc, "started_at", "report"), r.text(doc, "matrix", "report"), tuple(targets))


def _built(r: _Reader, t: Mapping[str, Any], where: str, tail: Callable[[str], list[str]]) -> Built:
    status = r.text(t, "status", where, "unknown")
    log = r.text(t, "log", where)
    return Built(
        status=status, image=r.text(t, "image", where), image_id=t.get("image_id"),
        seconds=r.number(t, "seconds", where) or 0.0, size_bytes=int(r.number(t, "size_bytes", where) or 0),
        error=t.get("error"), dockerfile=r.text(t, "dockerfile", where), log=log,
        mismatches=tuple(str(m) for m in r.items(t.get("mismatches"), f"{where}.mismatches")),
        log_tail=tuple(_clean(line) for line in tail(log)) if status == "failed" and log else (),
    )


def _run(r: _Reader, doc: Mapping[str, Any], tail: Callable[[str], list[str]]) -> Run:
    build_doc = doc.get("build")
    base = _run_from_build(r, r.mapping(build_doc, "build"), tail, "run") if build_doc is not None else Run("run", r.source, "", "", ())
    verifies = r.mapping(doc.get("verify") or {}, "verify")
    release, released = _release(r, doc.get("release"))
    ids = [t.id for t in base.targets] + [tid for tid in verifies if tid not in {t.id for t in base.targets}]
    builds = {t.id: t.build for t in base.targets}
    targets = tuple(Target(tid, builds.get(tid), _maybe_verify(r, verifies.get(tid), tid), True, released.get(tid)) for tid in ids)
    started = base.started_at or next((t.verify.started_at for t in targets if t.verify), "")
    return Run("run", r.source, started, base.matrix, targets, release)


def _release(r: _Reader, raw: Any) -> tuple[Release | None, dict[str, Released]]:
    """release.json (``imagesmith.release/1``): the release and each target's part in it."""
    if raw is None:
        return None, {}
    doc = r.mapping(raw, "release")
    per_target = {}
    for i, item in enumerate(r.items(doc.get("targets"), "release.targets")):
        t = r.mapping(item, f"release.targets[{i}]")
        per_target[r.text(t, "target", f"release.targets[{i}]")] = Released(
            status=r.text(t, "status", f"release.targets[{i}]", "unknown"), reference=r.text(t, "reference", "release"),
            digest=t.get("digest"), floating=tuple(str(f) for f in t.get("floating") or ()), error=t.get("error"),
            note=str(t.get("note") or ""))
    errors = tuple(str(e) for e in r.items(doc.get("errors"), "release.errors"))
    ok = bool(doc.get("ok", not errors and all(x.ok for x in per_target.values())))
    release = Release(r.text(doc, "registry", "release"), r.text(doc, "repository", "release"), r.text(doc, "date", "release"),
                      ok, errors, doc)
    return release, per_target


def _maybe_verify(r: _Reader, raw: Any, target_id: str) -> Verify | None:
    return None if raw is None else _verify(r, raw, f"verify.{target_id}")


def _verify_target_id(doc: Mapping[str, Any], source: str) -> str:
    """The target label of the image, else its reference, else the file name (a --local run has no image)."""
    image = doc.get("image")
    image = image if isinstance(image, Mapping) else {}
    labels = image.get("labels")
    labels = labels if isinstance(labels, Mapping) else {}
    return str(labels.get(TARGET_LABEL) or image.get("ref") or Path(source).stem)


def _verify(r: _Reader, raw: Any, where: str) -> Verify:
    doc = r.mapping(raw, where)
    if doc.get("schema") != VERIFY_SCHEMA:
        raise r.fail(f"{where}.schema", f"expected {VERIFY_SCHEMA!r}, got {doc.get('schema')!r}")
    image = r.mapping(doc.get("image") or {}, f"{where}.image")
    checks = tuple(_check(r, c, f"{where}.checks[{i}]") for i, c in enumerate(r.items(doc.get("checks"), f"{where}.checks")))
    return Verify(
        tier=r.text(doc, "tier", where), started_at=r.text(doc, "started_at", where),
        duration_s=r.number(doc, "duration_s", where), image_ref=r.text(image, "ref", f"{where}.image"),
        environment=r.mapping(doc.get("environment") or {}, f"{where}.environment"), checks=checks,
        nvml=_nvml(r, doc.get("nvml"), f"{where}.nvml"), raw=doc,
    )


def _check(r: _Reader, raw: Any, where: str) -> Check:
    c = r.mapping(raw, where)
    status = r.text(c, "status", where)
    if status not in STATUSES:
        raise r.fail(f"{where}.status", f"expected one of {', '.join(STATUSES)}, got {status!r}")
    data = c.get("data")
    return Check(
        id=r.text(c, "id", where) or where, status=status, title=r.text(c, "title", where), value=c.get("value"),
        threshold=r.number(c, "threshold", where), unit=r.text(c, "unit", where), baseline=r.number(c, "baseline", where),
        percent_of_baseline=r.number(c, "percent_of_baseline", where), detail=r.text(c, "detail", where),
        optional=bool(c.get("optional")), duration_s=r.number(c, "duration_s", where),
        data=data if isinstance(data, Mapping) else {},
    )


# -- NVML: two shapes -> GpuSeries ---------------------------------------------------------

# metric key -> the keys it may have in a sample (design notes' name first, hostinfo's next)
NVML_KEYS = {
    "memory_used_mib": ("memory_used_mib",),
    "utilization_pct": ("utilization_pct", "utilization_gpu_pct"),
    "temperature_c": ("temperature_c",),
    "power_w": ("power_w",),
}


def _nvml(r: _Reader, raw: Any, where: str) -> Nvml:
    if raw is None:
        return Nvml()
    doc = r.mapping(raw, where)
    interval = r.number(doc, "interval_s", where)
    error = doc.get("error") and str(doc["error"])
    if "gpus" in doc:
        gpus = tuple(_series_gpu(r, g, f"{where}.gpus[{i}]") for i, g in enumerate(r.items(doc["gpus"], f"{where}.gpus")))
    else:
        gpus = _sample_gpus(r, r.items(doc.get("samples"), f"{where}.samples"), where)
    return Nvml(interval, tuple(g for g in gpus if g.t), error, present=True)


def _series_gpu(r: _Reader, raw: Any, where: str) -> GpuSeries:
    """hostinfo.NvmlSampler: {"index", "name", "series": {"t": [...], key: [...]}}."""
    g = r.mapping(raw, where)
    series = r.mapping(g.get("series") or {}, f"{where}.series")
    t = tuple(_float(v) or 0.0 for v in series.get("t") or ())
    values = {m: _column(series, keys, len(t)) for m, keys in NVML_KEYS.items()}
    return GpuSeries(int(g.get("index", 0)), str(g.get("name", "")), t, values)


def _column(series: Mapping[str, Any], keys: Sequence[str], n: int) -> tuple[float | None, ...]:
    for key in keys:
        if isinstance(series.get(key), list):
            return tuple(_float(v) for v in series[key][:n])
    return (None,) * n


def _sample_gpus(r: _Reader, samples: list[Any], where: str) -> tuple[GpuSeries, ...]:
    """Design notes: a flat list of {"t", "gpu", metric...}."""
    by_gpu: dict[int, list[Mapping[str, Any]]] = {}
    for i, raw in enumerate(samples):
        s = r.mapping(raw, f"{where}.samples[{i}]")
        by_gpu.setdefault(int(s.get("gpu", 0)), []).append(s)
    out = []
    for gpu, rows in sorted(by_gpu.items()):
        values = {m: tuple(_first(row, keys) for row in rows) for m, keys in NVML_KEYS.items()}
        out.append(GpuSeries(gpu, "", tuple(_float(row.get("t")) or 0.0 for row in rows), values))
    return tuple(out)


def _first(row: Mapping[str, Any], keys: Sequence[str]) -> float | None:
    return next((_float(row[k]) for k in keys if k in row), None)


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def run_report(build: Mapping[str, Any] | None, verify: Mapping[str, Mapping[str, Any] | None],
               release: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The combined run report (``imagesmith.run-report/1``) from the three stage artifacts."""
    return {"schema": RUN_SCHEMA, "build": build, "verify": dict(verify), "release": release}


# =====================================================================  what the charts show


@dataclass(frozen=True)
class LeakCurve:
    check: Check
    points: tuple[tuple[float, float], ...]  # (step, bytes)
    slope: float  # bytes per step
    intercept: float  # bytes


@dataclass(frozen=True)
class GpuRate:
    gpu: str  # "0", "1", ... or "all" when the check gives no per-GPU figures
    value: float


@dataclass(frozen=True)
class Throughput:
    check: Check
    rates: tuple[GpuRate, ...]


def leak_curves(v: Verify) -> list[LeakCurve]:
    """Leak checks (``leak.*``) that carry their samples."""
    out = []
    for c in v.checks:
        points = _leak_points(c.data) if c.id.startswith("leak.") else ()
        if len(points) >= 2:
            slope, intercept = _fit(c.data, points)
            out.append(LeakCurve(c, points, slope, intercept))
    return out


def _leak_points(data: Mapping[str, Any]) -> tuple[tuple[float, float], ...]:
    samples = data.get("samples")
    if isinstance(samples, list):  # [[step, bytes], ...]
        pairs = [(_float(p[0]), _float(p[1])) for p in samples if isinstance(p, (list, tuple)) and len(p) == 2]
    else:  # the payload: parallel lists
        pairs = list(zip((_float(s) for s in data.get("steps") or ()), (_float(b) for b in data.get("bytes") or ())))
    return tuple((x, y) for x, y in pairs if x is not None and y is not None)


def _fit(data: Mapping[str, Any], points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """The report's own fitted line when it gives one, else least squares."""
    slope, intercept = _float(data.get("slope_bytes_per_step")), _float(data.get("intercept"))
    if slope is not None and intercept is not None:
        return slope, intercept
    return linear_fit(points)


def linear_fit(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    n = len(points)
    mx, my = sum(p[0] for p in points) / n, sum(p[1] for p in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return 0.0, my
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return slope, my - slope * mx


def throughputs(v: Verify) -> list[Throughput]:
    """Rate checks measured against a baseline or per GPU (GEMM, bandwidth, ...)."""
    out = []
    for c in v.checks:
        rates = _per_gpu(c.data)
        if not rates and c.baseline is not None and _float(c.value) is not None:
            rates = (GpuRate("all", float(c.value)),)
        if rates and (c.baseline is not None or c.id.startswith("gemm.")):
            out.append(Throughput(c, rates))
    return out


def _per_gpu(data: Mapping[str, Any]) -> tuple[GpuRate, ...]:
    for key, raw in data.items():
        if not key.startswith("per_gpu"):
            continue
        if isinstance(raw, Mapping):
            pairs = [(str(k), _float(v)) for k, v in raw.items()]
        elif isinstance(raw, list):
            pairs = [_rate_item(i, item) for i, item in enumerate(raw)]
        else:
            continue
        return tuple(GpuRate(g, v) for g, v in pairs if v is not None)
    return ()


def _rate_item(i: int, item: Any) -> tuple[str, float | None]:
    if isinstance(item, Mapping):
        gpu = item.get("gpu", item.get("index", i))
        value = next((item[k] for k in ("value", "tflops", "gbps") if k in item), None)
        return str(gpu), _float(value)
    return str(i), _float(item)


# =====================================================================  shared formatting


def _clean(text: str) -> str:
    return XML_INVALID.sub("", ANSI.sub("", text))


def fmt_value(value: Any, unit: str = "") -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        text = f"{value:,.1f}" if abs(value) >= 10 else f"{value:.4g}"
    else:
        text = str(value)
    return f"{text} {unit}".strip()


def fmt_bytes(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 2**20:.1f} MiB"


def _env_line(v: Verify) -> str:
    env = v.environment
    parts = [f"{k} {env[k]}" for k in ("torch", "cuda", "cudnn", "nccl", "python", "os", "driver") if env.get(k)]
    names = [str(g.get("name")) for g in env.get("gpus") or () if isinstance(g, Mapping)]
    if names:
        parts.append(f"{len(names)} × {names[0]}" if len(set(names)) == 1 else ", ".join(names))
    return ", ".join(parts) or "no environment recorded"


def _headline(run: Run) -> str:
    if not run.complete:
        return f"not a result: the run did not complete ({'; '.join(run.unfinished)})"
    n, bad = len(run.targets), len(run.failed_targets())
    if not n:
        return "no targets in this report"
    good, failed = ("built", "did not build") if run.kind == "build" else ("passed", "failed")
    if n == 1:
        verdict = f"the target {failed if bad else good}"
    else:
        verdict = f"{bad} of {n} targets {failed}" if bad else f"all {n} targets {good}"
    return verdict + ("; the release failed" if run.release and not run.release.ok else "")


# =====================================================================  Markdown


def to_markdown(run: Run) -> str:
    """A summary for CI job pages: targets × status, failed checks, measured vs baseline."""
    icon = "✅" if run.ok else "❌"
    lines = [f"## {icon} imagesmith {run.kind}: {_md(_headline(run))}", "",
             _md(" · ".join(p for p in (f"started {run.started_at}" if run.started_at else "",
                                        f"matrix {run.matrix}" if run.matrix else "", f"report {run.source}") if p)), ""]
    lines += _md_targets(run)
    lines += _md_section("Failed checks", ["target", "check", "detail"], _md_checks(run, "fail"))
    lines += _md_section("Warnings", ["target", "check", "detail"], _md_checks(run, "warn"))
    lines += _md_section("Measured against baseline",
                         ["target", "check", "GPU", "value", "baseline", "% of baseline", "fail line", "status"], _md_rates(run))
    lines += _md_build_failures(run)
    lines += _md_release(run)
    return "\n".join(lines).rstrip() + "\n"


def _md(text: Any) -> str:
    """Safe in a Markdown table cell and as HTML (GitHub renders inline HTML)."""
    return html.escape(str(text), quote=False).replace("|", "\\|").replace("\n", " ").replace("`", "'")


def _md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return out + ["| " + " | ".join(_md(c) for c in row) + " |" for row in rows]


def _md_section(title: str, headers: Sequence[str], rows: list[list[Any]]) -> list[str]:
    return [f"### {title}", "", *_md_table(headers, rows), ""] if rows else []


def _md_targets(run: Run) -> list[str]:
    """Targets × status; the build column only when there was a build, counts only when there was a verify."""
    has_build, has_verify = run.kind != "verify", run.kind != "build"
    headers = ["target", "status", *(["build"] if has_build else []), *(STATUSES if has_verify else [])]
    rows = []
    for t in run.targets:
        b, v = t.build, t.verify
        build = (f"{b.status} {b.seconds:.0f} s" + (f", {fmt_bytes(b.size_bytes)}" if b.size_bytes else "")) if b else "-"
        counts = [v.count(s) for s in STATUSES] if v else ["-"] * 4
        rows.append([f"{'✅' if t.ok else '❌'} {t.id}", t.status, *([build] if has_build else []), *(counts if has_verify else [])])
    return [*_md_table(headers, rows), ""]


def _md_checks(run: Run, status: str) -> list[list[Any]]:
    rows = []
    for t in run.targets:
        for c in t.verify.checks if t.verify else ():
            if c.status == status:
                rows.append([t.id, c.id + (" (optional)" if c.optional else ""), c.detail or c.title])
    return rows


def _md_rates(run: Run) -> list[list[Any]]:
    rows = []
    for t in run.targets:
        for tp in throughputs(t.verify) if t.verify else ():
            c = tp.check
            for rate in tp.rates:
                pct = f"{100 * rate.value / c.baseline:.1f}%" if c.baseline else "-"
                rows.append([t.id, c.id, rate.gpu, fmt_value(rate.value, c.unit), fmt_value(c.baseline, c.unit), pct,
                             fmt_value(c.threshold, c.unit), c.status])
    return rows


def _md_release(run: Run) -> list[str]:
    rel = run.release
    if rel is None:
        return []
    rows = [[t.id, t.release.status, t.release.reference or "-", (t.release.digest or "-")[:19],
             " ".join(t.release.floating) or "-", t.release.remark] for t in run.targets if t.release]
    head = f"{'✅' if rel.ok else '❌'} {rel.registry}/{rel.repository} {rel.date}".strip()
    return ["### Release", "", _md(head), "", *_md_table(["target", "status", "reference", "digest", "floating", "error / note"], rows), "",
            *[f"- {_md(e)}" for e in rel.errors], ""]


def _md_build_failures(run: Run) -> list[str]:
    out: list[str] = []
    for t in run.targets:
        b = t.build
        if b is None or b.status != "failed":
            continue
        out += [f"**{_md(t.id)}**: {_md(b.error or 'failed')}  ", f"Dockerfile: {_md(b.dockerfile)} · log: {_md(b.log)}", ""]
        if b.log_tail:
            fence = "~" * max(3, 1 + max(len(m) for m in re.findall("~+", "\n".join(b.log_tail)) or [""]))
            out += [fence + "text", *b.log_tail, fence, ""]
    return ["### Build failures", "", *out] if out else []


# =====================================================================  JUnit XML


def to_junit(run: Run) -> str:
    """One testsuite per target: a ``build`` testcase, then one testcase per check.

    fail -> <failure>; skip -> <skipped>; warn -> passed, with the warning in
    <system-out>; a failed *optional* check -> <skipped> (it does not fail the
    target, so it must not turn CI red).
    """
    root = ET.Element("testsuites", name=f"imagesmith {run.kind}")
    if not run.complete:
        root.append(_unfinished_suite(run))
    for t in run.targets:
        root.append(_suite(t, run.started_at))
    _sum_counts(root, root.findall("testsuite"))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _x(text: Any) -> str:
    return _clean(str(text))


def _unfinished_suite(run: Run) -> ET.Element:
    """A run that did not complete is a failure in CI, whatever its targets say."""
    suite = ET.Element("testsuite", name="run")
    case = _case("run", "state", None)
    ET.SubElement(case, "failure", message=_x(_headline(run)), type="incomplete").text = _x("; ".join(run.unfinished))
    suite.append(case)
    _sum_counts(suite, [case])
    return suite


def _suite(t: Target, timestamp: str) -> ET.Element:
    suite = ET.Element("testsuite", name=_x(t.id))
    if timestamp:
        suite.set("timestamp", _x(timestamp))
    if t.build is not None:
        suite.append(_build_case(t.id, t.build))
    if t.verify is not None:
        for c in t.verify.checks:
            suite.append(_check_case(t.id, c))
    elif t.verify_expected:
        suite.append(_unverified_case(t))
    if t.release is not None:
        suite.append(_release_case(t.id, t.release))
    _sum_counts(suite, suite.findall("testcase"))
    return suite


def _unverified_case(t: Target) -> ET.Element:
    """A run without a verify report for a target: skipped when its build failed (that failure is
    reported), a failure when it was built (the image went unverified)."""
    case = _case(t.id, "verify", None)
    if t.build is not None and not t.build.ok:
        ET.SubElement(case, "skipped", message=f"not verified: build {t.build.status}")
    else:
        ET.SubElement(case, "failure", message="no verify report for this target", type="verify")
    return case


def _status_text(status: str, error: str | None) -> str:
    """``not-verified`` + ``not verified`` says it once."""
    return status if not error or error.replace(" ", "-") == status else f"{status}: {error}"


def _release_case(target: str, rel: Released) -> ET.Element:
    """pushed/unchanged pass; not-built/not-verified are skipped (their cause failed elsewhere); the rest fail."""
    case = _case(target, "release", None)
    where = f"{rel.reference}@{rel.digest}" if rel.digest else rel.reference
    if rel.ok:
        ET.SubElement(case, "system-out").text = _x(f"{rel.status} {where} {' '.join(rel.floating)}".strip())
    elif rel.status in ("not-built", "not-verified"):
        ET.SubElement(case, "skipped", message=_x(_status_text(rel.status, rel.error)))
    else:
        ET.SubElement(case, "failure", message=_x(rel.error or rel.status), type="release").text = _x(_status_text(rel.status, rel.error))
    return case


def _case(classname: str, name: str, seconds: float | None) -> ET.Element:
    return ET.Element("testcase", classname=_x(classname), name=_x(name), time=f"{seconds or 0:.3f}")


def _build_case(target: str, b: Built) -> ET.Element:
    case = _case(target, "build", b.seconds)
    if b.status == "failed":
        text = [b.error or "failed", f"Dockerfile: {b.dockerfile}", f"log: {b.log}", *b.mismatches, *b.log_tail]
        ET.SubElement(case, "failure", message=_x(b.error or "build failed"), type="build").text = _x("\n".join(text))
    elif not b.ok:
        ET.SubElement(case, "skipped", message=_x(f"{b.status}: {b.error or ''}".rstrip(": ")))
    else:
        out = f"{b.status} {b.image} ({b.image_id or '-'}), {fmt_bytes(b.size_bytes) if b.size_bytes else 'size unknown'}"
        ET.SubElement(case, "system-out").text = _x(out)
    return case


def _check_case(target: str, c: Check) -> ET.Element:
    case = _case(target, c.id, c.duration_s)
    figures = _figures(c)
    if c.failed:
        ET.SubElement(case, "failure", message=_x(c.detail or "failed"), type=c.id).text = _x("\n".join([c.detail, *figures]))
    elif c.status == "fail":
        ET.SubElement(case, "skipped", message=_x(f"optional check failed: {c.detail}"))
    elif c.status == "skip":
        ET.SubElement(case, "skipped", message=_x(c.detail or "skipped"))
    else:
        note = ("WARN: " if c.status == "warn" else "") + "\n".join([c.detail, *figures])
        ET.SubElement(case, "system-out").text = _x(note.strip())
    return case


def _figures(c: Check) -> list[str]:
    out = []
    if c.value is not None:
        out.append(f"value: {fmt_value(c.value, c.unit)}")
    if c.threshold is not None:
        out.append(f"threshold: {fmt_value(c.threshold, c.unit)}")
    if c.baseline is not None:
        pct = f" ({c.percent_of_baseline:g}% of it)" if c.percent_of_baseline is not None else ""
        out.append(f"baseline: {fmt_value(c.baseline, c.unit)}{pct}")
    return out


def _sum_counts(element: ET.Element, children: list[ET.Element]) -> None:
    if element.tag == "testsuites":
        totals = {k: sum(int(s.get(k, "0")) for s in children) for k in ("tests", "failures", "errors", "skipped")}
        seconds = sum(float(s.get("time", "0")) for s in children)
    else:
        totals = {"tests": len(children), "failures": sum(c.find("failure") is not None for c in children),
                  "errors": 0, "skipped": sum(c.find("skipped") is not None for c in children)}
        seconds = sum(float(c.get("time", "0")) for c in children)
    for key, value in totals.items():
        element.set(key, str(value))
    element.set("time", f"{seconds:.3f}")


# =====================================================================  the charts

STATUS_COLOUR = {"pass": "#1a7f37", "warn": "#9a6700", "fail": "#cf222e", "skip": "#6e7781"}
LEAK_MIN_SPAN_MIB = 8.0  # y axis of a leak chart when the check states no limit
MIB = 2.0**20


def leak_chart(curve: LeakCurve) -> str:
    """Memory samples (MiB) against step, with the fitted line across the sampled range.

    The y axis spans at least what a leak at the check's limit (``threshold``,
    MiB/step) would add over the loop: a clean run looks flat, not like noise."""
    samples = tuple((x, y / MIB) for x, y in curve.points)
    first, last = samples[0][0], samples[-1][0]
    fit = tuple((x, (curve.slope * x + curve.intercept) / MIB) for x in (first, last))
    c = curve.check
    limit = c.threshold if c.unit == "MiB/step" and c.threshold else None
    lines = [charts.Line("samples", samples, charts.PALETTE[0], "series samples", markers=True),
             charts.Line(f"fit {curve.slope / MIB:+.4f} MiB/step", fit, STATUS_COLOUR["fail"], "fit")]
    return charts.line_chart(f"{c.id}: {c.title or 'memory over the loop'}", lines, "step", "MiB in use", css="leak",
                             min_y_span=limit * (last - first) if limit else LEAK_MIN_SPAN_MIB)


def throughput_chart(items: Sequence[Throughput], gpu_name: Callable[[int], str]) -> str:
    """Each GPU's rate as % of its check's baseline; a dashed mark at the check's fail line."""
    bars = [_rate_bar(tp.check, rate, gpu_name) for tp in items for rate in tp.rates if tp.check.baseline]
    return charts.percent_bars("throughput per GPU, % of baseline (dashed: fail line)", bars, "throughput")


def _rate_bar(c: Check, rate: GpuRate, gpu_name: Callable[[int], str]) -> charts.Bar:
    baseline = c.baseline or 1.0
    pct = 100 * rate.value / baseline
    below = c.threshold is not None and rate.value < c.threshold
    who = f"GPU {rate.gpu}" if rate.gpu.isdigit() else ""
    name = gpu_name(int(rate.gpu)) if rate.gpu.isdigit() else ""
    mark = 100 * c.threshold / baseline if c.threshold is not None else None
    return charts.Bar(
        label=f"{c.id} · {who}" if who else c.id, percent=pct, colour=STATUS_COLOUR["fail" if below else ("warn" if c.status == "warn" else "pass")],
        value_text=f"{fmt_value(rate.value, c.unit)} · {pct:.1f}%",
        tooltip=f"{c.id} {who} {name}: {fmt_value(rate.value, c.unit)} = {pct:.1f}% of baseline {fmt_value(c.baseline, c.unit)}",
        mark=mark, mark_tooltip=f"fail line {fmt_value(c.threshold, c.unit)} ({mark or 0:.0f}% of baseline)")


# metric, title, unit, y axis from zero
NVML_CHARTS = (("memory_used_mib", "memory used", "MiB", True), ("utilization_pct", "GPU utilisation", "%", True),
               ("temperature_c", "temperature", "°C", False), ("power_w", "power", "W", True))


def nvml_charts(v: Verify) -> list[str]:
    """One chart per metric, one line per GPU; metrics nobody recorded are left out."""
    out = []
    for key, title, unit, from_zero in NVML_CHARTS:
        lines = [line for i, g in enumerate(v.nvml.gpus) if (line := _gpu_line(v, g, i, key))]
        if lines:
            out.append(charts.line_chart(title, lines, "seconds", unit, y_from_zero=from_zero, css=f"nvml {key}"))
    return out


def _gpu_line(v: Verify, g: GpuSeries, i: int, key: str) -> charts.Line | None:
    pts = tuple((t, y) for t, y in zip(g.t, g.values.get(key, ())) if y is not None)
    if not pts:
        return None
    name = g.name or v.gpu_name(g.gpu)
    label = f"GPU {g.gpu}" + (f" {name}" if name and len(v.nvml.gpus) == 1 else "")
    return charts.Line(label, pts, charts.PALETTE[i % len(charts.PALETTE)])


# =====================================================================  HTML

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2328;background:#f6f8fa;margin:0}
main{max-width:1280px;margin:0 auto;padding:24px}
h1{font-size:24px;margin:0 0 4px}h2 code{font-size:17px}h2{font-size:19px;margin:0 0 8px}h3{font-size:15px;margin:20px 0 8px}
.sub{color:#59636e;margin:0 0 16px}
section{background:#fff;border:1px solid #d1d9e0;border-radius:8px;padding:16px 20px;margin:16px 0}
.verdict{display:inline-block;font-weight:600;font-size:16px;padding:6px 12px;border-radius:6px;color:#fff}
.ok{background:#1a7f37}.bad{background:#cf222e}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid #e6eaef;vertical-align:top}
th{background:#f6f8fa;font-weight:600}td.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
td.detail{color:#424a53;max-width:620px}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;color:#fff;white-space:nowrap;background:#6e7781}
.s-pass,.s-passed,.s-built,.s-cached{background:#1a7f37}.s-warn,.s-warnings{background:#9a6700}
.s-fail,.s-failed,.s-build-failed,.s-not-verified{background:#cf222e}.s-optional,.s-skip,.s-build-skipped,.s-build-cancelled,.s-unknown{background:#6e7781}
tr.row-fail td{background:#fff5f5}tr.row-warn td{background:#fffbea}
.env{color:#424a53;margin:4px 0 0}code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace}
pre{background:#f6f8fa;border:1px solid #d1d9e0;border-radius:6px;padding:8px;overflow:auto;font:12px ui-monospace,Menlo,monospace}
.charts{display:flex;flex-wrap:wrap;gap:12px}
.note{color:#59636e;font-style:italic}
svg.chart{background:#fff;border:1px solid #e6eaef;border-radius:6px;max-width:100%;height:auto}
svg .title{font-weight:600;font-size:13px;fill:#1f2328}svg .tick,svg .legend,svg .value{font-size:11px;fill:#59636e}
svg .label{font-size:12px;fill:#424a53}svg .grid{stroke:#eef1f4}svg .axis{stroke:#8c959f}
svg polyline{fill:none;stroke-width:1.6;stroke-linejoin:round}svg line.series,svg line.samples,svg line.fit{stroke-width:2.5}
svg .fit{stroke-dasharray:6 4;stroke-width:2}svg .baseline{stroke:#1f2328;stroke-width:1.5}
svg .failline{stroke:#cf222e;stroke-dasharray:3 3;stroke-width:1.5}
details summary{cursor:pointer;color:#0969da}
"""


def to_html(run: Run) -> str:
    """A self-contained page: no scripts, no external assets; charts are inline SVG."""
    verdict = f'<span class="verdict {"ok" if run.ok else "bad"}">{html.escape(_headline(run))}</span>'
    sub = " · ".join(p for p in (f"{run.kind} report", f"started {run.started_at}" if run.started_at else "",
                                 f"matrix {run.matrix}" if run.matrix else "", run.source, f"imagesmith {__version__}") if p)
    body = [f"<header><h1>imagesmith report</h1><p class=\"sub\">{html.escape(sub)}</p>{verdict}</header>",
            _html_targets(run), *(_html_target(t) for t in run.targets)]
    if run.release is not None:
        body.append(_html_release(run))
    csp = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{html.escape('imagesmith: ' + _headline(run))}</title><style>{CSS}</style></head>\n"
            f"<body><main>\n{chr(10).join(body)}\n</main></body></html>\n")


def _badge(status: str, css: str = "") -> str:
    return f'<span class="badge s-{charts.esc(css or status.split(",")[0].replace(" ", "-"))}">{html.escape(status)}</span>'


def _anchor(target_id: str) -> str:
    return "t-" + re.sub(r"[^A-Za-z0-9_.-]", "_", target_id)


def _td(value: Any, css: str = "") -> str:
    return f'<td class="{css}">{html.escape(str(value))}</td>' if css else f"<td>{html.escape(str(value))}</td>"


def _html_targets(run: Run) -> str:
    has_build, has_verify = run.kind != "verify", run.kind != "build"
    headers = ["target", "status", *(["build time", "size"] if has_build else []),
               *(list(STATUSES) + ["environment"] if has_verify else [])]
    rows = []
    for t in run.targets:
        b, v = t.build, t.verify
        cells = [_td(f"{b.seconds:.1f} s" if b else "-", "num"), _td(fmt_bytes(b.size_bytes) if b and b.size_bytes else "-", "num")]
        counts = [_td(v.count(s) if v else "-", "num") for s in STATUSES] + [_td(_env_line(v) if v else "-")]
        rows.append(f'<tr><td><a href="#{_anchor(t.id)}"><code>{html.escape(t.id)}</code></a></td><td>{_badge(t.status)}</td>'
                    + "".join(cells if has_build else []) + "".join(counts if has_verify else []) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in headers)
    return f"<section><h2>Targets</h2><table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></section>"


def _html_target(t: Target) -> str:
    parts = [f'<section id="{_anchor(t.id)}"><h2><code>{html.escape(t.id)}</code> {_badge(t.status)}</h2>']
    if t.verify:
        parts.append(f'<p class="env">{html.escape(_env_line(t.verify))} · image {html.escape(t.verify.image_ref or "-")}'
                     f' · tier {html.escape(t.verify.tier or "-")}</p>')
    if t.build:
        parts.append(_html_build(t.build))
    if t.verify:
        parts += [_html_checks(t.verify), _html_leaks(t.verify), _html_throughput(t.verify), _html_nvml(t.verify)]
    elif t.verify_expected:
        parts.append('<p class="note">Not verified.</p>')
    return "".join(parts) + "</section>"


def _html_build(b: Built) -> str:
    line = (f"<p>build {_badge(b.status)} {b.seconds:.1f} s · {html.escape(fmt_bytes(b.size_bytes)) if b.size_bytes else 'size unknown'}"
            f" · image <code>{html.escape(b.image or '-')}</code> <code>{html.escape((b.image_id or '-')[:19])}</code></p>")
    if b.status != "failed":
        why = f'<p class="note">{html.escape(b.error)}</p>' if b.error else ""
        return "<h3>Build</h3>" + line + why
    extra = "".join(f"<li>{html.escape(m)}</li>" for m in b.mismatches)
    tail = f"<pre>{html.escape(chr(10).join(b.log_tail))}</pre>" if b.log_tail else ""
    return (f"<h3>Build</h3>{line}<p><strong>{html.escape(b.error or 'failed')}</strong></p>"
            f"{'<ul>' + extra + '</ul>' if extra else ''}<p>Dockerfile <code>{html.escape(b.dockerfile)}</code> · "
            f"log <code>{html.escape(b.log)}</code></p>{tail}")


def _html_checks(v: Verify) -> str:
    rows = []
    for c in v.checks:
        pct = f"{c.percent_of_baseline:.1f}%" if c.percent_of_baseline is not None else "-"
        optional_fail = c.optional and c.status == "fail"
        badge = _badge("fail (optional)", "optional") if optional_fail else _badge(c.status)
        rows.append(f'<tr class="row-{charts.esc("skip" if optional_fail else c.status)}"><td><code>{html.escape(c.id)}</code></td><td>{badge}</td>'
                    + _td(fmt_value(c.value, c.unit), "num") + _td(fmt_value(c.threshold, c.unit), "num")
                    + _td(fmt_value(c.baseline, c.unit), "num") + _td(pct, "num") + _td(c.detail or c.title, "detail")
                    + _td(f"{c.duration_s:.1f} s" if c.duration_s is not None else "-", "num") + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("check", "status", "value", "threshold", "baseline", "% of baseline", "detail", "time"))
    return f"<h3>Checks</h3><table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _html_leaks(v: Verify) -> str:
    curves = leak_curves(v)
    if not curves:
        return '<h3>Memory leak check</h3><p class="note">No leak-check samples in this report (the standard tier runs the leak check).</p>'
    charts = "".join(f"<div>{leak_chart(c)}<p>{_badge(c.check.status)} {html.escape(c.check.detail)}</p></div>" for c in curves)
    return f'<h3>Memory leak check</h3><div class="charts">{charts}</div>'


def _html_throughput(v: Verify) -> str:
    items = throughputs(v)
    if not items:
        return '<h3>Throughput against baseline</h3><p class="note">No throughput measurements in this report.</p>'
    chart = throughput_chart(items, v.gpu_name)
    unbased = [tp.check.id for tp in items if not tp.check.baseline]
    note = (f'<p class="note">No baseline for this GPU, recorded only: {html.escape(", ".join(unbased))}.</p>' if unbased else "")
    return f"<h3>Throughput against baseline</h3>{chart}{note}"


def _html_nvml(v: Verify) -> str:
    charts = nvml_charts(v)
    if charts:
        interval = f" every {v.nvml.interval_s:g} s" if v.nvml.interval_s else ""
        return (f"<h3>GPU telemetry (NVML, sampled{html.escape(interval)})</h3>"
                f'<div class="charts">{"".join(charts)}</div>')
    return f'<h3>GPU telemetry (NVML)</h3><p class="note">No NVML samples: {html.escape(_why_no_nvml(v))}.</p>'


def _why_no_nvml(v: Verify) -> str:
    if v.nvml.error:
        return v.nvml.error
    if not v.environment.get("gpus"):
        return "this run saw no NVIDIA GPU (CPU mode)"
    if not v.nvml.present:
        return "the payload ran without imagesmith's host-side sampler (e.g. verify/run.py on its own)"
    return "the sampler recorded none"


def _html_release(run: Run) -> str:
    rel = run.release
    assert rel is not None
    rows = "".join(f"<tr><td><code>{html.escape(t.id)}</code></td><td>{_badge(t.release.status, 'pass' if t.release.ok else 'fail')}</td>"
                   + f"<td><code>{html.escape(t.release.reference or '-')}</code></td>" + _td((t.release.digest or "-")[:19])
                   + _td(" ".join(t.release.floating) or "-") + _td(t.release.remark, "detail") + "</tr>"
                   for t in run.targets if t.release)
    head = "".join(f"<th>{h}</th>" for h in ("target", "status", "reference", "digest", "floating tags", "error / note"))
    errors = "".join(f"<li>{html.escape(e)}</li>" for e in rel.errors)
    dump = html.escape(json.dumps(rel.raw, indent=2, sort_keys=True, default=str))
    where = " ".join(p for p in (f"{rel.registry}/{rel.repository}".strip("/"), rel.date) if p)
    return (f"<section><h2>Release {_badge('ok' if rel.ok else 'failed', 'pass' if rel.ok else 'fail')}</h2>"
            f"<p>{html.escape(where)}</p><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
            f"{'<ul>' + errors + '</ul>' if errors else ''}"
            f"<details><summary>release.json</summary><pre>{dump}</pre></details></section>")


# =====================================================================  entry points

RENDERERS: dict[str, Callable[[Run], str]] = {"md": to_markdown, "junit": to_junit, "html": to_html}


def render(run: Run, fmt: str) -> str:
    if fmt not in RENDERERS:
        raise UserError(f"unknown report format {fmt!r}; use one of {', '.join(FORMATS)}")
    return RENDERERS[fmt](run)


def write(run: Run, fmt: str, out: Path) -> Path:
    """Render ``fmt`` and write it to ``out`` atomically."""
    write_text(out, render(run, fmt))
    return out
