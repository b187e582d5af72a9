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

VERIFY = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "verify"))
sys.path.insert(0, VERIFY)

from imagesmith_payload.checks.leak import STANDARD  # noqa: E402
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


# The loop runs in a Python process of its own, as in an image: host RSS is the process's, and the test
# process's own memory (its other tests, coverage, the garbage collector freeing earlier objects) would
# blur a series that must read +1 MiB per step, or read flat.
LEAK_RUN = """
import json, sys
import torch
sys.path.insert(0, sys.argv[1])
from imagesmith_payload.checks.leak import QUICK, STANDARD, leak_loop
run = leak_loop(torch, torch.device("cpu"), inject_mib=float(sys.argv[2]), plan={"quick": QUICK, "standard": STANDARD}[sys.argv[3]])
verdicts = {key: run[key].verdict() for key in ("device", "host")}
print(json.dumps({"steps": run["steps"], "caught": (run["caught"] or {}).get("steps"),
                  **{key: [v.leaking, v.describe()] for key, v in verdicts.items()}}))
"""


def leak_run(inject_mib: float, plan: str = "standard") -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", LEAK_RUN, VERIFY, str(inject_mib), plan], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return result


@pytest.mark.parametrize("plan", ["quick", "standard"])
def test_leak_loop_catches_one_mib_per_step_in_few_steps(plan: str) -> None:
    run = leak_run(1.0, plan)
    assert run["caught"] is not None and run["caught"] <= 200, run
    assert run["device"][0] and run["host"][0], run


def test_leak_loop_catches_a_small_steady_leak_of_live_tensors() -> None:
    run = leak_run(0.05)
    assert run["device"][0], run["device"][1]


def test_leak_loop_clean_run_raises_no_alarm() -> None:
    run = leak_run(0.0)
    assert run["steps"] == STANDARD.steps and run["caught"] is None, run
    for key in ("device", "host"):
        assert not run[key][0], run[key][1]


def test_leak_check_through_the_config_knob(tmp_path: Path) -> None:
    proc, _, by_id = payload(tmp_path, "--tier", "standard", "--only", "leak.host",
                             config={"leak_inject_mib": 1})
    assert proc.returncode == 1
    assert by_id["leak.host"]["status"] == "fail" and by_id["leak.host"]["detail"].startswith("leak: host RSS +")
