"""report.json -> a :class:`Run` of frozen records, with errors that name the file and key path.

Accepted inputs (the ``schema`` key decides), each in the shape its one
producer writes:

* ``imagesmith.build-report/1``  (OUT/report.json, ``model.buildreport.BuildReport.to_json()``): read by
  :func:`imagesmith.model.buildreport.parse_report` (as a run report's build part is)
* ``imagesmith.verify-report/1`` (the payload's report; ``verify.finish`` adds the
  host's ``image`` and ``nvml``, the latter as ``hostinfo.NvmlSampler.result()``)
* ``imagesmith.run-report/1``    (:func:`run_report`, written by ``pipeline``)
* ``imagesmith.release/1``       (release.json, ``releases.ReleaseRun.to_json()``): the release alone, read by
  :func:`imagesmith.model.releasereport.parse` (as a run report's release part is)
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Callable, Mapping

from imagesmith import runstate
from imagesmith.errors import UserError
from imagesmith.model import buildreport, fields, loader, releasereport, schemas, verifyreport
from imagesmith.model.buildreport import TargetResult
from imagesmith.model.verifyreport import VerifyReport
from imagesmith.report.model import Built, Check, GpuSeries, Nvml, Run, Target, Verify, clean

BUILD_SCHEMA, VERIFY_SCHEMA, RUN_SCHEMA, RELEASE_SCHEMA = schemas.BUILD_REPORT, schemas.VERIFY_REPORT, schemas.RUN_REPORT, schemas.RELEASE
SCHEMAS = (BUILD_SCHEMA, VERIFY_SCHEMA, RUN_SCHEMA, RELEASE_SCHEMA)
LOG_TAIL_LINES = 20
TARGET_LABEL = "io.imagesmith.target"
# the metrics the report charts, as hostinfo.read_sensors names them
NVML_METRICS = ("memory_used_mib", "utilization_gpu_pct", "temperature_c", "power_w")


def load(path: Path, read_log: Callable[[str], list[str]] | None = None) -> Run:
    """Read (through :mod:`imagesmith.model.loader`: confined to its folder, bounded, strict JSON, the
    schema its ``schema`` key names) and parse a report file; failed builds get the tail of their
    log when it is readable."""
    raw = loader.load_json_any(path, fix="give a report.json, verify.json or run-report.json that imagesmith wrote")
    return parse(raw, str(path), read_log or log_tail_in(path.parent))


LOG_TAIL_BYTES = 64 * 1024


def log_tail_in(root: Path) -> Callable[[str], list[str]]:
    """A reader of the logs a report names: only inside ``root`` (the report's folder), only regular
    files, only their last bytes (a report is untrusted: its ``log`` may be /dev/zero or /etc/shadow)."""
    def tail(log: str) -> list[str]:
        try:
            data = loader.read_tail(Path(log), root=root, size=LOG_TAIL_BYTES)
        except UserError:
            return []
        return data.decode("utf-8", errors="replace").splitlines()[-LOG_TAIL_LINES:]
    return tail


def log_tail(log: str) -> list[str]:
    """The last lines of a build log (what a failure summary shows)."""
    try:
        return Path(log).read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError:
        return []


def parse(raw: Any, source: str = "report.json", read_log: Callable[[str], list[str]] | None = None) -> Run:
    """Raw report JSON (any of SCHEMAS) -> a Run."""
    r = fields.Fields(source)
    doc = r.mapping(raw, "report")
    schema = doc.get("schema")
    tail = read_log or (lambda _log: [])
    if schema == BUILD_SCHEMA:
        run = _run_from_build(r, doc, tail, "build", "")
    elif schema == VERIFY_SCHEMA:
        return verify_run(verifyreport.parse(doc, source, "report"))
    elif schema == RUN_SCHEMA:
        run = _run(r, doc, tail)
    elif schema == RELEASE_SCHEMA:
        release = releasereport.parse(doc, source)
        run = Run("release", source, r.text(doc, "started_at", "release"), "",
                  tuple(Target(tid, release=t) for tid, t in release.by_target().items()), release)
    else:
        raise r.fail("schema", f"{schema!r} is not one of {', '.join(SCHEMAS)}; is this an imagesmith report?")
    return dataclasses.replace(run, unfinished=unfinished(doc))


def verify_run(report: VerifyReport, source: str | None = None) -> Run:
    """A verify report already read (typed once where it entered) as the Run the renderers and metrics take: no
    JSON written and read back inside one process. ``source``: how messages name it (default: where it was read)."""
    doc, name = report.to_json(), source or report.source
    verify = _typed(report, fields.Fields(name), report.where)
    run = Run("verify", name, verify.started_at, "", (Target(_verify_target_id(doc, name), verify=verify),))
    return dataclasses.replace(run, unfinished=unfinished(doc))


def run_report(build: Mapping[str, Any] | None, verify: Mapping[str, Mapping[str, Any] | None],
               release: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The combined run report (``imagesmith.run-report/1``) from the three stage artifacts."""
    return {"schema": RUN_SCHEMA, "build": build, "verify": dict(verify), "release": release}


def unfinished(doc: Mapping[str, Any]) -> tuple[str, ...]:
    """Each part of a report (it, and in a run report its build, verify and release
    parts) whose run did not complete, with its state and why."""
    parts: list[tuple[str, Any]] = [({BUILD_SCHEMA: "build", VERIFY_SCHEMA: "verification", RELEASE_SCHEMA: "release"}
                                     .get(str(doc.get("schema")), "run"), doc)]
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


def _run_from_build(r: fields.Fields, doc: Any, tail: Callable[[str], list[str]], kind: str, where: str) -> Run:
    """A build report (or a run report's build part, at ``where``), read by the one parse."""
    report = buildreport.parse_report(doc, r.source, where)
    targets = tuple(Target(t.target, build=_built(t, tail)) for t in report.results)
    return Run(kind, r.source, report.started_at, report.matrix, targets)


def _built(t: TargetResult, tail: Callable[[str], list[str]]) -> Built:
    """A target's build as the renderers draw it: the failed ones with their log's last lines."""
    return Built(
        status=t.status, image=t.image, image_id=t.image_id, seconds=t.seconds, size_bytes=t.size_bytes,
        error=t.error, dockerfile=t.dockerfile, log=t.log, mismatches=t.mismatches,
        log_tail=tuple(clean(line) for line in tail(t.log)) if t.status == "failed" and t.log else (),
    )


def _run(r: fields.Fields, doc: Mapping[str, Any], tail: Callable[[str], list[str]]) -> Run:
    build_doc = doc.get("build")
    base = _run_from_build(r, build_doc, tail, "run", "build") if build_doc is not None else Run("run", r.source, "", "", ())
    verifies = r.mapping(doc.get("verify") or {}, "verify")
    release = None if doc.get("release") is None else releasereport.parse(doc.get("release"), r.source, "release")
    released = release.by_target() if release is not None else {}
    ids = [t.id for t in base.targets] + [tid for tid in verifies if tid not in {t.id for t in base.targets}]
    builds = {t.id: t.build for t in base.targets}
    targets = tuple(Target(tid, builds.get(tid), _maybe_verify(r, verifies.get(tid), tid), True, released.get(tid)) for tid in ids)
    started = base.started_at or next((t.verify.started_at for t in targets if t.verify), "")
    return Run("run", r.source, started, base.matrix, targets, release)


def _maybe_verify(r: fields.Fields, raw: Any, target_id: str) -> Verify | None:
    return None if raw is None else _verify(r, raw, f"verify.{target_id}")


def _verify_target_id(doc: Mapping[str, Any], source: str) -> str:
    """The target label of the image, else its reference, else the file name (a --local run has no image)."""
    image = doc.get("image")
    image = image if isinstance(image, Mapping) else {}
    labels = image.get("labels")
    labels = labels if isinstance(labels, Mapping) else {}
    return str(labels.get(TARGET_LABEL) or image.get("ref") or Path(source).stem)


def _verify(r: fields.Fields, raw: Any, where: str) -> Verify:
    """The verify report, parsed once (:func:`imagesmith.model.verifyreport.parse`), with the host sampler's series."""
    return _typed(verifyreport.parse(raw, r.source, where), r, where)


def _typed(report: VerifyReport, r: fields.Fields, where: str) -> Verify:
    return Verify(report, tuple(_drawn(c) for c in report.checks), _nvml(r, report.to_json().get("nvml"), f"{where}.nvml"))


def _drawn(c: Check) -> Check:
    """A check as the renderers draw it: its measured figures as floats (a threshold written ``90`` reads ``90.0``)."""
    def f(x: float | None) -> float | None:
        return None if x is None else float(x)
    return dataclasses.replace(c, threshold=f(c.threshold), baseline=f(c.baseline), percent_of_baseline=f(c.percent_of_baseline),
                               duration_s=f(c.duration_s))


def _nvml(r: fields.Fields, raw: Any, where: str) -> Nvml:
    """``hostinfo.NvmlSampler.result()``: {"interval_s", "error", "gpus": [{"index", "name", "series"}]}."""
    if raw is None:
        return Nvml()
    doc = r.mapping(raw, where)
    gpus = tuple(_series_gpu(r, g, f"{where}.gpus[{i}]") for i, g in enumerate(r.items(doc.get("gpus"), f"{where}.gpus")))
    error = doc.get("error") and str(doc["error"])
    return Nvml(r.number(doc, "interval_s", where), tuple(g for g in gpus if g.t), error, present=True)


def _series_gpu(r: fields.Fields, raw: Any, where: str) -> GpuSeries:
    g = r.mapping(raw, where)
    series = r.mapping(g.get("series") or {}, f"{where}.series")
    t = tuple(number(v) or 0.0 for v in r.items(series.get("t"), f"{where}.series.t"))
    values = {m: tuple(number(v) for v in _column(series.get(m), len(t))) for m in NVML_METRICS}
    return GpuSeries(int(number(g.get("index")) or 0), str(g.get("name") or ""), t, values)


def _column(raw: Any, n: int) -> list[Any]:
    return raw[:n] if isinstance(raw, list) else [None] * n


def number(value: Any) -> float | None:
    """A finite number from JSON, else None (a sensor NVML could not read)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None
