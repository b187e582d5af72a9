"""Verify reports as Prometheus metrics (a ``CollectorRegistry`` of prometheus-client gauges).

Pure: builds the registry from the parsed records (and, for the keys the parser does not
model, the raw report read defensively); writing the text file and pushing live in
``imagesmith.stages.metrics``. Every label value comes from an untrusted report: it is bounded
here (length, count of series) and escaped by prometheus-client where it is written.

Names follow Prometheus conventions (docs/metrics.md explains each):

* base units: ``_seconds``, ``_bytes_per_second`` (GB/s in reports are 10^9 bytes/s),
  ``_flops_per_second`` (floating-point operations per second; "flops" is the plural of
  the unit *flop*, as "bytes" is of *byte*, so the rate suffix reads like bytes_per_second),
  ``_bytes_per_step`` for a leak slope (the loop's step is the natural denominator);
* ``_ratio`` for a fraction (of the baseline, of the solo throughput): 1.0, never percent;
* ``imagesmith_verify_info`` for what the image holds, value 1;
* ``imagesmith_verify_check_status{check,outcome}``: one series per outcome, 1 for the
  check's outcome, 0 for the others (a StateSet), so ``== 1`` selects and ``sum`` counts;
* per-GPU series carry the DCGM exporter's labels ``gpu``, ``UUID``, ``modelName`` and
  ``Hostname``, so ``* on (Hostname, gpu) group_left`` joins them with DCGM_FI_* series.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from prometheus_client import CollectorRegistry, Gauge, Info

from imagesmith.errors import UserError
from imagesmith.inert import inert
from imagesmith.model import fleetreport
from imagesmith.model.ref import ImageRef
from imagesmith.model.verifyreport import Image, Sharing
from imagesmith.report.model import STATUSES, Check, Verify

PREFIX = "imagesmith_verify"
MAX_LABEL_CHARS = 128  # a check id, a version, an image reference: anything longer is not one
MAX_CHECKS = 512  # the standard tier runs ~50, soak ~60
MAX_GPUS = 64  # one host
MAX_FOREIGN = 4096  # sharing.foreign entries one report may list
MAX_SERIES = 10000  # from one report (the standard tier on 2 GPUs makes ~300)
GPU_LABELS = ("gpu", "UUID", "modelName")  # with Hostname (a base label): the DCGM exporter's
GpuLabel = tuple[str, str, str]  # the gpu label (the host's NVML index), UUID, model name

# A check's unit -> (metric name after the prefix, factor to the base unit, help)
UNITS: Mapping[str, tuple[str, float, str]] = {
    "TFLOP/s": ("throughput_flops_per_second", 1e12, "Measured throughput of a check (the figure judged against its threshold)."),
    "GB/s": ("bandwidth_bytes_per_second", 1e9, "Measured bandwidth of a check (HBM copies, host transfers, all-reduce bus bandwidth)."),
    "MiB/step": ("leak_slope_bytes_per_step", float(2**20), "Fitted memory growth of a fixed-shape loop; 0 when nothing leaks."),
    "x solo": ("shared_gpu_solo_ratio", 1.0, "Aggregate throughput of processes sharing one GPU, as a fraction of one process alone."),
}
# A check's per-GPU figures (data.<key>: {"<gpu index>": value}) -> (metric name, factor, help)
PER_GPU: Mapping[str, tuple[str, float, str]] = {
    "per_gpu_tflops": ("gpu_throughput_flops_per_second", 1e12, "Measured throughput of a check on one GPU."),
    "per_gpu_gbps": ("gpu_bandwidth_bytes_per_second", 1e9, "Measured bandwidth of a check on one GPU."),
}
SIGNED_METRICS = frozenset({"leak_slope_bytes_per_step"})  # a fitted slope may be below 0 (memory freed); no other figure
FLEET_OUTCOMES = fleetreport.STATUSES  # a fleet cell's outcomes
INFO_KEYS = ("torch", "cuda", "cudnn", "nccl", "python", "os", "driver")


@dataclass(frozen=True)
class Subject:
    """Who a report's series belong to: the host it ran on, the image, and (fleet) the class."""

    hostname: str
    digest: str
    klass: str | None = None

    def labels(self) -> dict[str, str]:
        out = {"Hostname": self.hostname, "digest": self.digest}
        return out if self.klass is None else {**out, "class": self.klass}


def image_digest(v: Verify) -> str:
    """The image's repository digest (the one pinned, else the first the engine knows), else its
    local image ID (an image not pushed yet), else '' (``verify --local``)."""
    image = v.report.image or Image()
    pinned = ImageRef.maybe(image.digests[0] if image.digests else "")
    for value in (image.digest, pinned.digest if pinned else None, image.id):
        if isinstance(value, str) and value:
            return value
    return ""


class VerifyMetrics:
    """One registry; ``add`` puts one verify report's series in it (a fleet adds one per cell)."""

    def __init__(self, fleet: bool = False) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.base = ("Hostname", "digest", "class") if fleet else ("Hostname", "digest")
        self._gauges: dict[str, Gauge] = {}
        self._left, self._source = MAX_SERIES, ""
        self._info = Info(PREFIX, "The image a verification ran on and what it measured inside it (versions); value 1.",
                          self.base, registry=self.registry)

    def gauge(self, name: str, doc: str, labels: Sequence[str] = ()) -> Gauge:
        """``name`` after ``imagesmith_verify_``, or a whole name (``imagesmith_fleet_...``)."""
        if name not in self._gauges:
            full = name if name.startswith("imagesmith_") else f"{PREFIX}_{name}"
            self._gauges[name] = Gauge(full, doc, (*self.base, *labels), registry=self.registry)
        return self._gauges[name]

    def set(self, name: str, doc: str, value: float, **labels: str) -> None:
        """One sample; a figure that is not finite (a finite report value that overflows in base units too) or
        negative where the quantity cannot be is refused, naming the series: never exported to fire an alert."""
        self._left -= 1
        if self._left < 0:
            raise UserError(f"{self._source}: more than {MAX_SERIES} metric series from one report: refusing the cardinality")
        if not math.isfinite(value) or (value < 0 and name not in SIGNED_METRICS):
            shown = ", ".join(f"{k}={v!r}" for k, v in labels.items() if k not in self.base)
            why = "is not a finite number" if not math.isfinite(value) else "is negative, which this figure cannot be"
            raise UserError(f"{self._source}: the figure {name}{{{shown}}} = {value!r} {why}; nothing was exported: is this "
                            "the report imagesmith verify wrote?")
        self.gauge(name, doc, tuple(k for k in labels if k not in self.base)).labels(**labels).set(value)

    def add(self, v: Verify, subject: Subject, source: str, target: str = "") -> None:
        """Every series of one verify report (``source`` names it in errors; ``target``: its id in a run
        report, else the image's target label)."""
        lab, self._left, self._source = _Labels(source), MAX_SERIES, source
        base = _subject(subject, source)
        self._info.labels(**base).info(_info(v, lab, target))
        ended = _ended_at(v, lab)
        if ended is not None:
            self.set("last_run_timestamp_seconds", "When the verification finished (Unix time): alert when it is old.", ended, **base)
        if v.duration_s is not None:
            self.set("duration_seconds", "How long the verification ran.", v.duration_s, **base)
        self.set("ok", "1 when every required check passed (the verdict that gates floating tags), else 0.", float(v.ok), **base)
        if len(v.checks) > MAX_CHECKS:
            raise lab.fail("checks", f"{len(v.checks)} checks, more than {MAX_CHECKS}: refusing the cardinality")
        for status in STATUSES:
            self.set("checks", "Checks of the verification by outcome.", float(v.count(status)), **base, outcome=status)
        gpus = _gpus(v, lab)
        for i, check in enumerate(v.checks):
            self._check(check, base, gpus, lab, f"checks[{i}]")
        _Sharing(self, base, gpus, lab).add(v.shared)

    def add_cell(self, subject: Subject, status: str, queued_s: float | None, ran_s: float | None, source: str) -> None:
        """One fleet cell (digest x class): its outcome and how long it queued and ran."""
        self._left, self._source = MAX_SERIES, source
        base = _subject(subject, source)
        for outcome in FLEET_OUTCOMES:
            self.set("imagesmith_fleet_cell_status", "1 for the outcome of the fleet cell (pass, fail, cancelled), 0 for the others.",
                     float(status == outcome), **base, outcome=outcome)
        if queued_s is not None:
            self.set("imagesmith_fleet_cell_queued_seconds", "How long the cell's job waited in the scheduler's queue.", queued_s, **base)
        if ran_s is not None:
            self.set("imagesmith_fleet_cell_run_seconds", "How long the cell's job ran.", ran_s, **base)

    def _check(self, c: Check, base: dict[str, str], gpus: Mapping[int, GpuLabel], lab: _Labels, where: str) -> None:
        labels = {**base, "check": lab.value(c.id, f"{where}.id")}
        for status in STATUSES:
            self.set("check_status", "1 for the outcome the check had (pass, warn, fail, skip), 0 for the others.",
                     float(c.status == status), **labels, outcome=status)
        if c.duration_s is not None:
            self.set("check_duration_seconds", "How long the check ran.", c.duration_s, **labels)
        if c.percent_of_baseline is not None:
            self.set("baseline_ratio", "Measured figure as a fraction of this GPU model's baseline (1.0: on baseline).",
                     scaled(c.percent_of_baseline, 0.01), **labels)
        unit = UNITS.get(c.unit)
        value = lab.number(c.value, f"{where}.value")
        if unit is not None and value is not None:
            self.set(unit[0], unit[2], scaled(value, unit[1]), **labels)
        for key, (name, factor, doc) in PER_GPU.items():
            for gpu, figure in _per_gpu(c.data.get(key), lab, f"{where}.data.{key}"):
                self.set(name, doc, scaled(figure, factor), **labels, **_gpu_labels(gpu, gpus))


class _Sharing:
    """``sharing`` as :mod:`imagesmith.report.parse` validated it (types, outcomes), turned into series; what is
    left to check here is what a label value may hold and how many series one report may make."""

    def __init__(self, out: VerifyMetrics, base: dict[str, str], gpus: Mapping[int, GpuLabel], lab: _Labels) -> None:
        self.out, self.base, self.gpus, self.lab = out, base, gpus, lab

    def add(self, shared: Sharing | None) -> None:
        if shared is None:
            return
        if shared.exclusive is not None:
            self.out.set("gpu_exclusive", "1 when no foreign process used the verified GPUs during the run, 0 when one did.",
                         float(shared.exclusive), **self.base)
        self.out.set("gpu_sharing_allowed", "1 when the run was told sharing the GPUs is expected (figures then are not baselines).",
                     float(shared.allowed), **self.base)
        # a 0 for every GPU only when the payload could tell (exclusive not null); else only what it saw
        counts = {gpu: 0 for gpu in self.gpus} if shared.exclusive is not None else {}
        uuids = {gpu: uuid for gpu, (_label, uuid, _model) in self.gpus.items() if uuid}
        if len(shared.foreign) > MAX_FOREIGN:
            raise self.lab.fail("sharing.foreign", f"expected a list of at most {MAX_FOREIGN} processes")
        for i, tenant in enumerate(shared.foreign):
            gpu = self.lab.gpu(tenant.gpu, f"sharing.foreign[{i}].gpu")
            counts[gpu] = counts.get(gpu, 0) + 1
            uuids.setdefault(gpu, self.lab.value(tenant.uuid, f"sharing.foreign[{i}].uuid"))
        _check_gpu_count(len(counts), self.lab)
        for gpu, n in sorted(counts.items()):
            labels = _gpu_labels(gpu, self.gpus) | {"UUID": uuids.get(gpu, "")}
            self.out.set("foreign_processes", "Processes of other users seen on the GPU during the verification.", float(n),
                         **self.base, **labels)


class _Labels:
    """Checks on untrusted values as they become label values and sample values."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, why: str) -> UserError:
        return UserError(f"{self.source}: {where}: {why}; is this the report imagesmith verify wrote?")

    def value(self, value: str, where: str) -> str:
        if len(value) > MAX_LABEL_CHARS:
            raise self.fail(where, f"{len(value)} characters, more than a label value may have ({MAX_LABEL_CHARS})")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise self.fail(where, "not valid Unicode text") from None
        return inert(value, one_line=True)  # a label value reaches dashboards and alerts: no control character acts there

    def number(self, value: Any, where: str) -> float | None:
        if value is None or isinstance(value, str):  # a check that measured nothing, or a version
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.fail(where, f"expected a finite number, got {value!r}"[:200])
        return float(value)

    def flag(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(where, f"expected true or false, got {value!r}"[:200])
        return value

    def gpu(self, value: Any, where: str) -> int:
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1024:
            raise self.fail(where, f"expected a GPU index (0 to 1023), got {value!r}"[:200])
        return value


def _subject(subject: Subject, source: str) -> dict[str, str]:
    """The labels every series of a report has (Hostname, digest, class), bounded like any other."""
    for k, value in subject.labels().items():
        if len(value) > MAX_LABEL_CHARS or not value.isprintable():
            raise UserError(f"{source}: the {k} label {value[:40]!r}: more than {MAX_LABEL_CHARS} characters or not printable text")
    return subject.labels()


def scaled(value: float, factor: float) -> float:
    """``value * factor`` to 12 significant digits (4282.4 GB/s is 4.2824e12 bytes/s, not 4.2823999999999995e12)."""
    return float(f"{value * factor:.12g}")


def _info(v: Verify, lab: _Labels, target: str) -> dict[str, str]:
    env = v.environment
    out = {"image": v.image_ref, "tier": v.tier, "target": target or _target(v)}
    out.update({k: str(env[k]) for k in INFO_KEYS if env.get(k) is not None and not isinstance(env[k], (Mapping, list))})
    return {k: lab.value(val, f"environment.{k}" if k in INFO_KEYS else f"image ({k})") for k, val in out.items()}


def _target(v: Verify) -> str:
    return (v.report.image.labels.get("io.imagesmith.target") or "") if v.report.image else ""


def _ended_at(v: Verify, lab: _Labels) -> float | None:
    """started_at + duration_s as Unix time; None for a report without a start."""
    if not v.started_at:
        return None
    try:
        started = dt.datetime.fromisoformat(v.started_at.replace("Z", "+00:00"))
    except ValueError:
        raise lab.fail("started_at", f"{v.started_at[:40]!r} is not an ISO 8601 time") from None
    if started.tzinfo is None:
        started = started.replace(tzinfo=dt.timezone.utc)
    return started.timestamp() + (v.duration_s or 0.0)


def _gpus(v: Verify, lab: _Labels) -> dict[int, GpuLabel]:
    """The payload's GPU index -> (the ``gpu`` label, UUID, model name), as the DCGM exporter labels that card: the
    host's NVML index and the card's UUID. The payload names each GPU's UUID and the host adds its NVML index
    (``host_index``); with ``--gpus 2,3`` the payload's GPU 0 is the host's 2. A report without them (written before)
    is read as the host's sampler numbered it."""
    out: dict[int, GpuLabel] = {}
    nvml = v.report.to_json().get("nvml")  # the host sampler's part, read here (VerifyReport does not type it)
    sampled = {}  # host index -> (uuid, name), from the host's sampler
    for i, g in enumerate(_items(nvml.get("gpus") if isinstance(nvml, Mapping) else None)):
        if g.get("index") is not None:
            sampled[lab.gpu(g.get("index"), f"nvml.gpus[{i}].index")] = (_text(g.get("uuid"), lab, f"nvml.gpus[{i}].uuid"),
                                                                         _text(g.get("name"), lab, f"nvml.gpus[{i}].name"))
    for i, g in enumerate(_items(v.environment.get("gpus"))):
        if g.get("index") is None:
            continue
        where = f"environment.gpus[{i}]"
        mine = lab.gpu(g.get("index"), f"{where}.index")
        host = lab.gpu(g["host_index"], f"{where}.host_index") if g.get("host_index") is not None else None
        uuid = _text(g.get("uuid"), lab, f"{where}.uuid")
        at = host if host is not None else mine if not uuid else None
        sampled_uuid, sampled_name = sampled.get(at, ("", "")) if at is not None else ("", "")
        out[mine] = (str(host if host is not None else mine), uuid or sampled_uuid,
                     _text(g.get("name"), lab, f"{where}.name") or sampled_name)
    for index, (uuid, name) in sampled.items():  # GPUs the host sampled that the payload did not list
        if not any(u == uuid for _l, u, _n in out.values()) and index not in out:
            out[index] = (str(index), uuid, name)
    _check_gpu_count(len(out), lab)
    return out


def _items(raw: Any) -> list[Mapping[str, Any]]:
    return [g for g in raw if isinstance(g, Mapping)] if isinstance(raw, list) else []


def _text(raw: Any, lab: _Labels, where: str) -> str:
    return lab.value(raw, where) if isinstance(raw, str) else ""


def _check_gpu_count(n: int, lab: _Labels) -> None:
    if n > MAX_GPUS:
        raise lab.fail("environment.gpus", f"{n} GPUs, more than {MAX_GPUS} on one host: refusing the cardinality")


def _per_gpu(raw: Any, lab: _Labels, where: str) -> list[tuple[int, float]]:
    if raw is None:
        return []
    if not isinstance(raw, Mapping) or len(raw) > MAX_GPUS:
        raise lab.fail(where, f"expected an object of at most {MAX_GPUS} GPU index: figure pairs")
    out = []
    for key, value in raw.items():
        number = lab.number(value, f"{where}.{key}")
        if number is not None:
            out.append((lab.gpu(key, f"{where} key {key!r}"[:200]), number))
    return out


def _gpu_labels(gpu: int, gpus: Mapping[int, GpuLabel]) -> dict[str, str]:
    """The DCGM exporter's labels of the payload's GPU ``gpu``: the host's index, the card's UUID, its model."""
    label, uuid, model = gpus.get(gpu, (str(gpu), "", ""))
    return {"gpu": label, "UUID": uuid, "modelName": model}
