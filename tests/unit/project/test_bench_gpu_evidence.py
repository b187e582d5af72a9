"""bench/gpu_evidence.py, the H200 evidence script: its pure parts (no GPU here)."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import pytest

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("gpu_evidence", ROOT / "bench" / "gpu_evidence.py")
assert spec and spec.loader
ge = importlib.util.module_from_spec(spec)
sys.modules["gpu_evidence"] = ge
spec.loader.exec_module(ge)


def test_the_scenarios_cover_the_planted_faults_and_ten_clean_runs() -> None:
    keys = [s.key for s in ge.scenarios(10)]
    assert keys[:5] == ["quick", "hidden-gpu", "module-outputs-kept", "leak-0.05", "probe-1mib"]
    assert keys[5:] == [f"clean-{i}" for i in range(1, 11)]
    hidden = ge.scenarios(0)[1]
    assert (hidden.env, list(hidden.args[:2]), dict(hidden.expect)) == (
        {"CUDA_VISIBLE_DEVICES": ""}, ["--gpus", "0"], {"gpu.devices": "fail"})


def test_the_planted_fault_is_valid_python_that_patches_module_call() -> None:
    compile(ge.KEEP_OUTPUTS, "sitecustomize.py", "exec")
    assert "torch.nn.Module.__call__ = _keep" in ge.KEEP_OUTPUTS


def test_the_payload_gets_the_knowledge_bases_release_table() -> None:
    releases = ge.driver_releases()
    assert {"release": "12.8.1", "cudart": "12.8.90", "driver": "570.124.06", "min_driver": "525.60.13"} in releases
    config = ge.payload_config(ge.scenarios(0)[3], releases)
    assert config["leak_inject_mib"] == 0.05 and config["driver"]["releases"] == releases


def report(*checks: tuple[Any, ...]) -> dict[str, Any]:
    return {"checks": [{"id": i, "status": s, "duration_s": d, "detail": f"{i} said {s}"} for i, s, d in checks],
            "mode": {"reason": "GPU mode: 1 GPU (--gpus all)"}}


GPU_PASS = ("gpu.devices", "pass", 0.1)


@pytest.mark.parametrize("checks, ok, slow", [
    ((GPU_PASS, ("leak.probe", "fail", 0.4)), True, {}),
    ((GPU_PASS, ("leak.probe", "pass", 0.4)), False, {}),
    ((GPU_PASS, ("leak.probe", "fail", 3.5)), False, {"leak.probe": 3.5}),
    ((("gpu.devices", "fail", 0.1), ("leak.probe", "fail", 0.4)), False, {}),
    ((), False, {}),
])
def test_judge_a_scenario(checks: tuple[Any, ...], ok: bool, slow: dict[str, Any]) -> None:
    got = ge.judge(ge.scenarios(0)[4], report(*checks))
    assert (got["ok"], got["too_slow"]) == (ok, slow)
    said = {i: s for i, s, _ in checks}
    assert got["got"] == {"gpu.devices": said.get("gpu.devices", "missing"), "leak.probe": said.get("leak.probe", "missing")}


def test_table_and_summary() -> None:
    rows = [dict(ge.judge(s, report(("leak.device", "pass", 1.0), ("leak.host", "pass", 0.0))), key=s.key,
                 title=s.title, wall_s=4.25) for s in ge.scenarios(2)[5:]]
    lines = ge.table(rows)
    assert lines[1].startswith("clean leak run 1") and lines[1].endswith("4.2  OK")
    assert ge.summary(rows) == {"scenarios": 2, "as_expected": 2, "clean_runs": 2, "clean_false_alarms": 0,
                                "total_wall_s": 8.5}


# ---------------------------------------------------------------- bench/leak_detector.py
ld_spec = importlib.util.spec_from_file_location("leak_detector", ROOT / "bench" / "leak_detector.py")
assert ld_spec and ld_spec.loader
ld = importlib.util.module_from_spec(ld_spec)
ld_spec.loader.exec_module(ld)


@pytest.mark.parametrize("per_step, every, jitter, steps", [
    (0.05, 2, 0.0, 71), (1.0, 2, 0.0, 23), (0.05, 15, 0.0, 176), (0.0, 2, 1.0, None), (0.01, 2, 0.0, None),
])
def test_steps_to_detect(per_step: float, every: int, jitter: float, steps: Any) -> None:
    limits = ld.HOST_LIMITS if jitter else ld.DEVICE_LIMITS
    assert ld.steps_to_detect(per_step, every, limits, jitter, seed=0, max_steps=2000) == steps


@pytest.mark.parametrize("values, text", [([71, 71], "71"), ([295, 303, 295], "295-303"), ([23, None], "never")])
def test_span(values: list[Any], text: str) -> None:
    assert ld.span(values) == text
