"""The payload's checks on this machine's CPU, with torch's CPU build.

torch 2.13.0+cpu is in requirements/lock.txt (the payload-test extra, for Python 3.11 on Linux x86_64, the
Python `make install` uses), so `make unit` runs this module. Elsewhere torch is not installed and the module
skips, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: requirements/lock.txt pins its CPU build for Python 3.11 on Linux x86_64 only")

VERIFY = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "verify"))
sys.path.insert(0, VERIFY)

from imagesmith_payload.checks.leak import QUICK, STANDARD, leak_loop  # noqa: E402
from imagesmith_payload.checks.matmul import matmul_error  # noqa: E402
from imagesmith_payload.judge import MATMUL_TOLERANCE  # noqa: E402
from imagesmith_payload.report import validate_report  # noqa: E402

NO_GPU = not torch.cuda.is_available()


def payload(tmp_path: Path, *args: str, config: dict[str, Any] | None = None) -> tuple[Any, ...]:
    out = tmp_path / "report.json"
    argv = [sys.executable, os.path.join(VERIFY, "run.py"), "--out", str(out), *args]
    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config))
        argv += ["--config", str(tmp_path / "config.json")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    rep = json.loads(out.read_text())
    return proc, rep, {c["id"]: c for c in rep["checks"]}


@pytest.mark.skipif(not NO_GPU, reason="CPU mode needs a host without a GPU")
def test_cpu_mode_quick_tier_passes_and_skips_gpu_checks(tmp_path: Path) -> None:
    expected = {"torch": torch.__version__.split("+")[0], "python": ".".join(map(str, sys.version_info[:2]))}
    proc, rep, by_id = payload(tmp_path, "--tier", "quick", config={"expected": expected})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert validate_report(rep) == []
    assert by_id["versions.torch"]["status"] == "pass" and by_id["versions.python"]["status"] == "pass"
    assert by_id["matmul.fp32"]["status"] == "pass" and by_id["matmul.bf16"]["status"] == "pass"
    for check_id in ("gpu.devices", "gpu.arch", "amp.bf16", "sdpa.flash", "nccl.smoke", "driver"):
        assert by_id[check_id]["status"] == "skip", by_id[check_id]


@pytest.mark.skipif(not NO_GPU, reason="CPU mode needs a host without a GPU")
def test_cpu_mode_with_require_gpu_fails(tmp_path: Path) -> None:
    proc, _, by_id = payload(tmp_path, "--require-gpu", "--only", "gpu.devices,versions.torch")
    assert proc.returncode == 1
    assert by_id["gpu.devices"]["status"] == "fail"
    assert by_id["gpu.devices"]["detail"].startswith("no GPU visible but a GPU is required: ")


def test_a_wrong_torch_version_fails(tmp_path: Path) -> None:
    proc, _, by_id = payload(tmp_path, "--only", "versions.torch", "--expect", "torch=1.13.1")
    assert proc.returncode == 1
    assert by_id["versions.torch"]["detail"] == f"torch {torch.__version__} installed, image declares 1.13.1"


@pytest.mark.parametrize("kind", ["fp32", "fp16", "bf16"])
def test_matmul_error_on_cpu_is_within_tolerance(kind: str) -> None:
    assert matmul_error(torch, torch.device("cpu"), kind, 1234) <= MATMUL_TOLERANCE[kind]


@pytest.mark.parametrize("plan", [QUICK, STANDARD])
def test_leak_loop_catches_one_mib_per_step_in_few_steps(plan: Any) -> None:
    run = leak_loop(torch, torch.device("cpu"), inject_mib=1.0, plan=plan)
    assert run["caught"] is not None and run["caught"]["steps"] <= 200, run["caught"]
    assert run["device"].verdict().leaking and run["host"].verdict().leaking


def test_leak_loop_catches_a_small_steady_leak_of_live_tensors() -> None:
    run = leak_loop(torch, torch.device("cpu"), inject_mib=0.05)
    assert run["device"].verdict().leaking, run["device"].verdict().describe()


def test_leak_loop_clean_run_raises_no_alarm() -> None:
    run = leak_loop(torch, torch.device("cpu"), inject_mib=0.0)
    assert run["steps"] == STANDARD.steps and run["caught"] is None
    for key in ("device", "host"):
        assert not run[key].verdict().leaking, run[key].verdict().describe()


def test_leak_check_through_the_config_knob(tmp_path: Path) -> None:
    proc, _, by_id = payload(tmp_path, "--tier", "standard", "--only", "leak.host",
                             config={"leak_inject_mib": 1})
    assert proc.returncode == 1
    assert by_id["leak.host"]["status"] == "fail" and by_id["leak.host"]["detail"].startswith("leak: host RSS +")
