"""watch.py: the run's two NVML snapshots and its sharing verdict, with sharing.py's NVML double."""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Dict, Optional

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "verify"))

from imagesmith_payload import nvml
from imagesmith_payload.config import Config
from imagesmith_payload.context import Context
from imagesmith_payload.sharing import Snapshot
from imagesmith_payload.watch import NO_NVML, SharingWatch

U0 = "GPU-aaaa"
NOT_MEASURED: Dict[str, object] = {"exclusive": None, "allowed": False, "foreign": []}
MEASURED_BY = "NVML compute and graphics process lists at the start and the end of the run"


class Source:
    """An NVML double: one GPU, a process table, 99 % busy."""

    def __init__(self, table: Dict[int, Optional[int]]) -> None:
        self.table = table

    def devices(self) -> list[str]:
        return [U0]

    def processes(self, uuid: str) -> list[tuple[int, Optional[int]]]:
        return sorted(self.table.items())

    def utilization(self, uuid: str) -> Optional[int]:
        return 99


def cpu_context() -> Context:
    """--gpus none: the run uses no GPU, so nothing here imports torch."""
    return Context(dataclasses.replace(Config(), gpus="none"), baselines={"schema": "x", "gpus": {}})


def test_a_run_on_no_gpu_is_not_measured_with_both_snapshots_taken() -> None:
    src = Source({90000: 5 << 30})
    watch = SharingWatch(cpu_context(), src)
    watch.begin()
    src.table[90002] = 1 << 30  # a process that came during the run: not ours to judge on a GPU we did not use
    watch.end()
    first = watch.result
    watch.end()  # a second end() keeps the first verdict
    assert watch.result is first
    assert watch.verdict() == (NOT_MEASURED, {"measured_by": MEASURED_BY,
                                              "utilization_pct": {"start": {U0: 99}, "end": {U0: 99}},
                                              "notes": ["not measured: the run used no GPU"]})


def test_a_run_stopped_before_any_snapshot_says_so() -> None:
    watch = SharingWatch(cpu_context(), Source({}))
    watch.end()  # no start snapshot: end() has nothing to compare
    assert watch.result is None and watch.end_snapshot is None
    sharing, detail = watch.verdict()
    assert sharing == NOT_MEASURED
    assert detail["notes"] == ["not measured: NVML could not list processes (the run stopped before the start snapshot)"]
    assert detail["utilization_pct"] == {"start": {}, "end": {}}


def test_without_nvml_the_start_snapshot_names_the_missing_library() -> None:
    if nvml.open_nvml() is not None:
        pytest.skip("this machine loads libnvidia-ml.so.1")
    watch = SharingWatch(cpu_context())
    watch.begin()
    assert watch.source is None
    assert watch.start == Snapshot(error=NO_NVML)
    assert watch.verdict()[0] == NOT_MEASURED
