"""The payload and hostinfo on a real NVIDIA GPU (host mode, no Docker).

Run on a GPU host: python3 -m pytest tests/gpu -m gpu
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "verify"))
sys.path.insert(0, ROOT)

from imagesmith_payload.checks.leak import QUICK, leak_loop  # noqa: E402
from imagesmith_payload.report import validate_report  # noqa: E402


def run_payload(tmp_path: Path, *args: str) -> tuple[Any, ...]:
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "verify", "run.py"), "--out",
                           str(out), *args], capture_output=True, text=True, timeout=600)
    return proc, json.loads(out.read_text())


def test_quick_tier_passes_and_gpu_checks_ran(tmp_path: Path) -> None:
    proc, report = run_payload(tmp_path, "--tier", "quick", "--require-gpu",
                               "--skip", "security.user")
    assert validate_report(report) == []
    by_id = {c["id"]: c for c in report["checks"]}
    failed = {k: c["detail"] for k, c in by_id.items() if c["status"] == "fail"}
    assert proc.returncode == 0 and not failed, failed
    for check_id in ("gpu.devices", "gpu.arch", "gpu.kernel.cudnn", "matmul.bf16", "amp.fp16",
                     "sdpa.flash", "libs.cudnn", "driver"):
        assert by_id[check_id]["status"] == "pass", by_id[check_id]


def test_gpu_checks_fail_when_required_but_hidden(tmp_path: Path) -> None:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "verify", "run.py"), "--require-gpu",
                           "--only", "gpu.devices", "--out", str(out)], env=env, timeout=300)
    entry = json.loads(out.read_text())["checks"][0]
    assert proc.returncode == 1
    assert entry["status"] == "fail" and "CUDA_VISIBLE_DEVICES" in entry["detail"]


def test_leak_detector_on_gpu_five_clean_runs_then_injected() -> None:
    dev = torch.device("cuda", 0)
    for _ in range(5):
        run = leak_loop(torch, dev, 0.0)
        for key in ("device", "host"):
            assert not run[key].verdict().leaking, (key, run[key].verdict().describe())
    run = leak_loop(torch, dev, 0.05)
    assert run["device"].verdict().leaking and run["caught"] is not None
    run = leak_loop(torch, dev, 1.0, QUICK)
    assert run["device"].verdict().leaking and run["caught"]["steps"] <= 40


def test_hostinfo_inventory_matches_torch() -> None:
    from imagesmith.edges import hostinfo

    info = hostinfo.inventory()
    assert info.error is None and info.driver
    if "CUDA_VISIBLE_DEVICES" not in os.environ:
        assert [g.name for g in info.gpus] == [torch.cuda.get_device_name(i)
                                               for i in range(torch.cuda.device_count())]
    status, _ = hostinfo.driver_supports(info, torch.version.cuda)
    assert status == "pass"


def test_nvml_sampler_sees_load() -> None:
    from imagesmith.edges import hostinfo

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    with hostinfo.NvmlSampler(indices=[0], interval_s=0.05) as sampler:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.0:
            a @ a
        torch.cuda.synchronize()
    gpu = sampler.result()["gpus"][0]
    assert gpu["summary"]["samples"] >= 5
    assert gpu["summary"]["utilization_gpu_pct"]["max"] > 50
    assert gpu["summary"]["memory_used_mib"]["max"] > 128
