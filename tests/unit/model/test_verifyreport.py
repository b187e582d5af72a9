"""The verify report as one typed value (imagesmith/model/verifyreport.py): parsed once, located errors, as read."""

from __future__ import annotations

import json
from typing import Any

import pytest

from imagesmith.model import loader, schemas, verifyreport
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "reports"
FOREIGN = {"gpu": 0, "uuid": "GPU-1", "pid": 4242, "name": "python3", "used_bytes": 1 << 30, "seen": "both"}
GOOD: dict[str, Any] = {
    "schema": schemas.VERIFY_REPORT, "tier": "quick", "started_at": "2026-01-02T03:04:05+00:00", "duration_s": 12.5,
    "wall_s": 14, "state": "complete",
    "mode": {"mode": "gpu", "gpus": 2, "requested": "all", "status": "pass", "reason": "GPU mode: 2 GPUs",
             "gpu_checks": {"pass": 9, "skip": 1}},
    "environment": {"torch": "2.11.0+cu130", "cuda": "13.0", "python": "3.12.3", "driver": "580.1", "machine": "x86_64",
                    "gpus": [{"index": 0, "name": "NVIDIA H200", "capability": "9.0", "memory_gib": 139.8}]},
    "image": {"ref": "r/a:1", "id": "sha256:ab", "digests": ["r/a@sha256:cd"], "labels": {"io.imagesmith.target": "a"}},
    "checks": [{"id": "gpu.devices", "status": "pass", "threshold": 90, "baseline": {"value": 100.0}, "value": [1, 2]},
               {"id": "perf.gemm", "status": "fail", "optional": True, "percent_of_baseline": 80.5, "unit": "TFLOP/s"}],
    "summary": {"pass": 1, "fail": 1, "ok": False},
    "sharing": {"exclusive": False, "allowed": True, "foreign": [FOREIGN], "reason": "the host watched"},
    "emulation": {"image": "linux/arm64", "host": "linux/amd64", "by": "qemu"},
    "platform": {"image": "linux/arm64", "host": "linux/amd64"},
    "notes": ["a note"], "payload_schema": "imagesmith.verify-report/1", "engine": {"name": "Docker", "version": "27.1"},
    "launch": {"how": "kept as read"},
}


def test_a_good_report_reads_into_its_records() -> None:
    rep = verifyreport.parse(GOOD, "OUT/a/verify.json")
    assert rep.checks == (
        verifyreport.Check("gpu.devices", "pass", threshold=90, baseline=100.0, value=[1, 2]),
        verifyreport.Check("perf.gemm", "fail", optional=True, percent_of_baseline=80.5, unit="TFLOP/s"))
    assert rep.mode == verifyreport.Mode("gpu", 2, "all", "pass", "GPU mode: 2 GPUs", {"pass": 9, "skip": 1})
    assert rep.environment.gpus == (verifyreport.Gpu(0, "NVIDIA H200", "9.0", 139.8),)
    assert (rep.environment.cuda, rep.environment.cudnn, rep.environment.fact("machine")) == ("13.0", None, "x86_64")
    assert rep.image == verifyreport.Image("r/a:1", "sha256:ab", None, ("r/a@sha256:cd",), {"io.imagesmith.target": "a"})
    assert rep.sharing == verifyreport.Sharing(False, True, (verifyreport.Tenant(0, "GPU-1", 4242, "python3", 1 << 30, "both"),),
                                               "the host watched")
    assert rep.emulation == verifyreport.Emulation("linux/arm64", "linux/amd64", "qemu")
    assert rep.platform == verifyreport.Platform("linux/arm64", "linux/amd64")
    assert (rep.summary.get("pass"), rep.summary.get("skip"), rep.summary.ok) == (1, 0, False)
    assert (rep.notes, rep.engine_name, rep.wall_s, rep.state, rep.cuda_image) == (("a note",), "Docker", 14, "complete", True)
    assert not rep.checks[1].failed and rep.check("perf.gemm") is rep.checks[1] and rep.check("nope") is None


def test_a_minimal_report_leaves_what_it_does_not_say_unsaid() -> None:
    rep = verifyreport.parse({"schema": schemas.VERIFY_REPORT, "checks": []})
    assert (rep.mode, rep.image, rep.sharing, rep.emulation, rep.platform, rep.started_at, rep.summary.ok) == (None,) * 7
    assert rep.environment == verifyreport.Environment() and not rep.cuda_image


@pytest.mark.parametrize("name", ["h200x2-standard.json", "verify-gpu.json", "verify-cpu.json"])
def test_to_json_is_the_document_exactly_as_read(name: str) -> None:
    text = (FIXTURES / name).read_text()
    rep = verifyreport.parse(loader.load_json_artifact(FIXTURES / name, schema=schemas.VERIFY_REPORT), name)
    assert json.dumps(rep.to_json(), indent=2) == json.dumps(json.loads(text), indent=2)
    assert rep.to_json() == json.loads(text) and rep.to_json() is not rep.to_json()  # a copy: the value stays as read


def test_to_json_keeps_what_the_records_do_not_hold() -> None:
    rep = verifyreport.parse(GOOD)
    assert json.dumps(rep.to_json(), sort_keys=True) == json.dumps(GOOD, sort_keys=True)
    assert rep.to_json()["launch"] == {"how": "kept as read"}


def test_amended_reads_the_new_document_again() -> None:
    rep = verifyreport.parse(GOOD, "OUT/a/verify.json")
    more = rep.amended(notes=["a note", "another"])
    assert more.notes == ("a note", "another") and rep.notes == ("a note",)
    assert more.to_json() == GOOD | {"notes": ["a note", "another"]} and more.source == "OUT/a/verify.json"
    with pytest.raises(loader.LoadError, match=r"^OUT/a/verify.json: report.notes\[0\]: expected text, got int"):
        rep.amended(notes=[7])


def bad(path: str, value: Any) -> dict[str, Any]:
    """GOOD with the value at ``path`` (dotted; digits index lists) replaced."""
    doc: dict[str, Any] = json.loads(json.dumps(GOOD))
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node: Any = doc
    for key in parents:
        node = node[key]
    node[last] = value
    return doc


# a malformed field -> the located message (``OUT/a/verify.json: `` before it)
MALFORMED = [
    ("schema", "imagesmith.verify-report/2", "report.schema: expected 'imagesmith.verify-report/1', got 'imagesmith.verify-report/2'"),
    ("checks", {}, "report.checks: expected a list, got an object"),
    ("checks.0", "gpu.devices", "report.checks[0]: expected an object, got text"),
    ("checks.1.id", 7, "report.checks[1].id: 7 is not a valid value"),
    ("checks.0.status", "meh", "report.checks[0].status: expected one of pass, warn, fail, skip, inconclusive, got 'meh'"),
    ("checks.0.threshold", "90", "report.checks[0].threshold: expected a number, got '90'"),
    ("checks.0.baseline", {"value": "x"}, "report.checks[0].baseline.value: expected a number, got 'x'"),
    ("checks.0.optional", "yes", "report.checks[0].optional: expected true or false, got 'yes'"),
    ("checks.0.data", [1], "report.checks[0].data: expected an object, got a list"),
    ("checks.0.detail", {"a": 1}, "report.checks[0].detail: expected text, got an object"),
    ("mode", "gpu", "report.mode: expected an object, got text"),
    ("mode.mode", "tpu", "report.mode.mode: expected one of gpu, cpu, got 'tpu'"),
    ("mode.gpus", 1.5, "report.mode.gpus: expected a whole number or null, got float"),
    ("mode.gpus", True, "report.mode.gpus: expected a whole number or null, got bool"),
    ("mode.gpu_checks.pass", -1, "report.mode.gpu_checks.pass: expected a count (a whole number, 0 or more), got -1"),
    ("mode.reason", ["x"], "report.mode.reason: expected text or null, got a list"),
    ("environment", [], "report.environment: expected an object, got a list"),
    ("environment.cuda", {"v": 1}, "report.environment.cuda: expected text, got an object"),
    ("environment.gpus.0", "H200", "report.environment.gpus[0]: expected an object, got text"),
    ("environment.gpus.0.index", "0", "report.environment.gpus[0].index: expected a whole number or null, got text"),
    ("image.digests", ["r/a@sha256:cd", 3], "report.image.digests[1]: expected a string, got int"),
    ("image.labels", {"a": 1}, "report.image.labels.a: expected text, got int"),
    ("summary.pass", "1", "report.summary.pass: expected a number, got '1'"),
    ("summary.ok", "true", "report.summary.ok: expected true or false, got 'true'"),
    ("sharing", "garbage", "report.sharing: expected an object, got text"),
    ("sharing.exclusive", "yes", "report.sharing.exclusive: expected true, false or null, got 'yes'"),
    ("sharing.allowed", 1, "report.sharing.allowed: expected true or false, got 1"),
    ("sharing.foreign.0.pid", "4242", "report.sharing.foreign[0].pid: expected a whole number or null, got text"),
    ("sharing.foreign.0.name", 7, "report.sharing.foreign[0].name: expected text or null, got int"),
    ("emulation.by", 3, "report.emulation.by: expected text or null, got int"),
    ("platform", [], "report.platform: expected an object, got a list"),
    ("notes", "a note", "report.notes: expected a list, got text"),
    ("started_at", 5, "report.started_at: expected text or null, got int"),
    ("duration_s", "long", "report.duration_s: expected a number, got 'long'"),
    ("engine.name", False, "report.engine.name: expected text or null, got bool"),
]


@pytest.mark.parametrize("path, value, message", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_field_is_a_located_error(path: str, value: Any, message: str) -> None:
    with pytest.raises(loader.LoadError) as caught:
        verifyreport.parse(bad(path, value), "OUT/a/verify.json")
    assert str(caught.value).split("; ")[0] == f"OUT/a/verify.json: {message}"


def test_the_error_names_where_the_report_sits_in_a_bigger_document() -> None:
    with pytest.raises(loader.LoadError) as caught:
        verifyreport.parse(bad("checks.0.status", None), "run-report.json", "verify.a")
    assert str(caught.value).startswith("run-report.json: verify.a.checks[0].status: expected one of")


def test_not_an_object_is_refused() -> None:
    with pytest.raises(loader.LoadError, match=r"^x.json: report: expected an object, got a list"):
        verifyreport.parse([], "x.json")
