"""The payload's report, registry, runner and entry point: pure parts, no torch needed."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

VERIFY = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "verify"))
sys.path.insert(0, VERIFY)

from imagesmith_payload import checks, report, runner  # noqa: E402,F401  (checks registers)
from imagesmith_payload.config import Config  # noqa: E402
from imagesmith_payload.context import Context  # noqa: E402
from imagesmith_payload.registry import REGISTRY, CheckSpec, select  # noqa: E402
from imagesmith_payload.results import passed, skipped  # noqa: E402


def entry(check_id: str, status: str, optional: bool = False, value: Any=None) -> dict[str, Any]:
    return {"id": check_id, "title": check_id, "status": status, "value": value, "threshold": None,
            "unit": "", "baseline": None, "percent_of_baseline": None, "detail": "d", "optional": optional,
            "duration_s": 0.1}


@pytest.mark.parametrize("statuses, summary", [
    ([("pass", False), ("skip", False)], {"pass": 1, "warn": 0, "fail": 0, "skip": 1, "inconclusive": 0, "ok": True}),
    ([("pass", False), ("warn", False)], {"pass": 1, "warn": 1, "fail": 0, "skip": 0, "inconclusive": 0, "ok": True}),
    ([("fail", False), ("pass", False)], {"pass": 1, "warn": 0, "fail": 1, "skip": 0, "inconclusive": 0, "ok": False}),
    ([("fail", True), ("pass", False)], {"pass": 1, "warn": 0, "fail": 1, "skip": 0, "inconclusive": 0, "ok": True}),
    ([], {"pass": 0, "warn": 0, "fail": 0, "skip": 0, "inconclusive": 0, "ok": True}),
])
def test_summary(statuses: list[Any], summary: dict[str, Any]) -> None:
    checks_ = [entry(f"c{i}", s, o) for i, (s, o) in enumerate(statuses)]
    assert report.summarize(checks_) == summary


def test_a_built_report_follows_the_schema_and_is_strict_json() -> None:
    rep = report.build_report("quick", "2026-11-30T00:00:00+00:00", 1.234, {"python": "3.11"},
                              [entry("a", "pass", value=math.nan), entry("b", "fail")])
    assert report.validate_report(rep) == []
    assert rep["checks"][0]["value"] is None and rep["duration_s"] == 1.23
    json.dumps(rep, allow_nan=False)


@pytest.mark.parametrize("mutate, problem", [
    (lambda r: r.pop("summary"), "report: missing key 'summary'"),
    (lambda r: r.update(schema="x"), "report.schema: expected 'imagesmith.verify-report/1', got 'x'"),
    (lambda r: r["checks"][0].update(status="ok"),
     "report.checks[0].status: expected one of pass, warn, fail, skip, inconclusive, got 'ok'"),
    (lambda r: r.pop("sharing"), "report: missing key 'sharing'"),
    (lambda r: r["sharing"].update(exclusive="yes"), "report.sharing.exclusive: expected true, false or null"),
    (lambda r: r["sharing"].update(extra=1), "report.sharing: unexpected key 'extra'"),
    (lambda r: r["sharing"].update(foreign=[{"gpu": 0}]),
     "report.sharing.foreign[0]: expected an object with keys gpu, uuid, pid, name, used_bytes, seen, first, last, by"),
    (lambda r: r["sharing"].update(exclusive=True, foreign=[
        {"gpu": 0, "uuid": "GPU-1", "pid": 7, "name": None, "used_bytes": None, "seen": "start", "first": None,
         "last": None, "by": "payload"}]),
     "report.sharing: exclusive is true but foreign processes are listed"),
    (lambda r: r["sharing"].update(foreign=[
        {"gpu": True, "uuid": "GPU-1", "pid": "7", "name": 3, "used_bytes": 1.5, "seen": "later", "first": "x",
         "last": float("inf"), "by": "me"}]),
     "report.sharing.foreign[0].gpu: expected an integer"),
    (lambda r: r["sharing"].update(foreign=[
        {"gpu": 0, "uuid": "GPU-1", "pid": None, "name": None, "used_bytes": 1, "seen": "during", "first": "x",
         "last": float("inf"), "by": "me"}]),
     "report.sharing.foreign[0].last: expected a time in seconds or null"),
    (lambda r: r["sharing"].update(reason=3), "report.sharing.reason: expected text or null"),
    (lambda r: r["checks"][0].update(window={"start": 2.0, "end": 1.0}),
     "report.checks[0].window: expected {start, end}: wall-clock seconds, start <= end, got {'start': 2.0, 'end': 1.0}"),
    (lambda r: r["checks"][0].pop("unit"), "report.checks[0]: missing key 'unit'"),
    (lambda r: r["checks"][0].update(detail="two\nlines"), "report.checks[0].detail: expected one line of text"),
    (lambda r: r["summary"].update(fail=3), "report.summary: does not match the checks"),
])
def test_validate_report_names_the_problem(mutate: Any, problem: str) -> None:
    rep = report.build_report("quick", "t", 1.0, {}, [entry("a", "pass")])
    mutate(rep)
    assert problem in report.validate_report(rep)


def test_write_report_is_atomic_and_marker_round_trips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rep = report.build_report("quick", "t", 1.0, {}, [entry("a", "pass")])
    out = tmp_path / "sub" / "report.json"
    report.write_report(str(out), rep)
    assert json.loads(out.read_text()) == rep and os.listdir(out.parent) == ["report.json"]
    report.emit_marker(rep)
    printed = capsys.readouterr().out
    lines = [line for line in printed.splitlines() if line.startswith(report.MARKER)]
    assert len(lines) == 1 and report.parse_marker("noise\n" + printed + "more noise\n") == rep


def test_parse_marker_without_a_marker() -> None:
    with pytest.raises(ValueError, match="no report marker"):
        report.parse_marker("just logs\n")


def test_parse_marker_refuses_a_marker_that_is_not_an_object() -> None:
    with pytest.raises(ValueError, match=r"^the report marker line holds a JSON list, not an object$"):
        report.parse_marker(report.MARKER + "[1, 2]\n")


# --------------------------------------------------------------------- runner
def spec(func: Any, needs: str = "nothing", optional: bool = False) -> CheckSpec:
    return CheckSpec("t.check", "a test check", func, "quick", "x", needs, optional)


def boom(ctx: Any) -> None:
    raise ZeroDivisionError("division by zero")


@pytest.mark.parametrize("func, optional, status, detail", [
    (lambda ctx: passed("fine", 1.0), False, "pass", "fine"),
    (boom, False, "fail", "ZeroDivisionError: division by zero (at boom:"),
    (boom, True, "fail", "ZeroDivisionError"),
    (lambda ctx: skipped("n/a"), False, "skip", "n/a"),
])
def test_a_check_that_raises_fails_with_the_exception(func: Any, optional: bool, status: str, detail: str) -> None:
    s = spec(func, optional=optional)
    got = runner.finish(s, runner.call_check(s, Context(Config(), {})), 0.5)
    assert got["status"] == status and got["detail"].startswith(detail) and got["optional"] is optional
    assert list(got)[:11] == list(report.CHECK_KEYS)


def test_optional_failures_do_not_fail_the_run() -> None:
    s = spec(boom, optional=True)
    done = runner.run_checks([s], Context(Config(), {}), lambda *a: None, lambda e: None)
    assert report.summarize(done)["ok"] is True


def test_a_hung_check_is_reported_by_the_watchdog() -> None:
    import time
    seen: list[Any] = []

    def hang(ctx: Context) -> Any:
        time.sleep(0.5)
        return passed("late")

    s = CheckSpec("t.hang", "hangs", hang, timeout_s=0.1,
                  needs="nothing")
    runner.run_checks([s], Context(Config(), {}), lambda *a: None, seen.append)
    assert seen and seen[0][-1]["status"] == "fail" and "did not finish within 0 s" in seen[0][-1]["detail"]


def test_gates_skip_what_cannot_mean_anything() -> None:
    ctx = Context(Config(), {})
    ctx.torch_error = "ModuleNotFoundError: No module named 'torch'"  # as on a torch-less host
    assert runner.gate(spec(passed, "torch"), ctx) == "torch is not importable (see versions.torch)"
    assert runner.gate(spec(passed, "nothing"), ctx) is None


def test_fold_rounds_keeps_the_worst_status_and_the_trend() -> None:
    rounds = [dict(entry("g", "pass", value=v), detail=f"r{i}") for i, v in enumerate([100.0, 99.0, 98.0])]
    rounds[1]["status"], rounds[1]["detail"] = "fail", "broke"
    folded = runner.fold_rounds(rounds)
    assert folded["status"] == "fail" and folded["value"] == 99.0
    assert folded["detail"] == "failed in 1/3 rounds; first: broke"
    assert folded["data"]["trend_percent_per_round"] == pytest.approx(-1.010, abs=1e-3)


# ------------------------------------------------------------------- registry
def test_the_registry_is_well_formed() -> None:
    ids = list(REGISTRY)
    assert len(ids) == len(set(ids)) >= 45
    assert all(s.title and s.tier in ("quick", "standard") for s in REGISTRY.values())
    quick = {s.id for s in select("quick")}
    assert {"versions.torch", "driver", "gpu.arch", "matmul.bf16", "amp.fp16", "sdpa.flash", "nccl.smoke",
            "libs.cudnn", "security.user"} <= quick
    assert not quick & {"gemm.bf16", "burn.gemm", "leak.device", "nccl.allreduce", "ddp.train"}


@pytest.mark.parametrize("tier, only, skip, ids", [
    ("quick", ("gemm",), (), []),
    ("standard", ("gemm",), ("gemm.fp32",), ["gemm.bf16", "gemm.fp16", "gemm.tf32"]),
    ("standard", ("leak", "versions.python"), (), ["versions.python", "leak.probe", "leak.device", "leak.host"]),
    ("soak", ("burn.gemm",), (), ["burn.gemm"]),
])
def test_select(tier: str, only: tuple[Any, ...], skip: tuple[Any, ...], ids: list[Any]) -> None:
    assert [s.id for s in select(tier, only, skip)] == ids


# ---------------------------------------------------------------- entry point
def run_payload(*args: str, block_torch: bool = False) -> subprocess.CompletedProcess[str]:
    """verify/run.py in a child; block_torch makes 'import torch' fail as in a torch-less image."""
    code = ("import sys, runpy; sys.modules['torch'] = None; sys.argv = ['run.py'] + sys.argv[1:]; "
            f"runpy.run_path({os.path.join(VERIFY, 'run.py')!r}, run_name='__main__')")
    argv = [sys.executable, "-c", code, *args] if block_torch else \
        [sys.executable, os.path.join(VERIFY, "run.py"), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args, message", [
    (["--tier", "fast"], "invalid choice: 'fast'"),
    (["--only", "no.such.check"], "--only/--skip leave no check to run"),
    (["--expect", "torch"], "--expect item 'torch': expected NAME=VERSION"),
])
def test_bad_usage_exits_2(args: list[Any], message: str) -> None:
    proc = run_payload(*args)
    assert proc.returncode == 2 and message in proc.stderr


def test_bad_config_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{"tier": "fast"}')
    proc = run_payload("--config", str(path))
    assert proc.returncode == 2
    assert "verify/run.py: error: config key 'tier': expected one of quick, standard, soak, got 'fast'" in proc.stderr


def test_an_image_without_torch_fails_with_a_clear_message(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = run_payload("--only", "versions,gpu.devices,security.sshd", "--require-gpu", "--out", str(out),
                       "--emit-marker", block_torch=True)
    rep = json.loads(out.read_text())
    by_id = {c["id"]: c for c in rep["checks"]}
    assert proc.returncode == 1 and report.validate_report(rep) == []
    assert by_id["versions.torch"]["status"] == "fail"
    assert by_id["versions.torch"]["detail"].startswith("torch is not importable (")
    assert by_id["versions.cuda"]["detail"] == "torch is not importable (see versions.torch)"
    assert by_id["gpu.devices"]["status"] == "fail"
    assert report.parse_marker(proc.stdout) == rep
    progress = [line for line in proc.stderr.splitlines() if "versions.torch" in line]
    assert progress and " fail " in progress[0]
