"""watch.py: the run's two NVML snapshots and its sharing verdict, with sharing.py's NVML double."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "verify"))

from imagesmith_payload import nvml
from imagesmith_payload.config import Config
from imagesmith_payload.context import Context
from imagesmith_payload.sharing import judge_entry
from imagesmith_payload.watch import NO_NVML, SharingWatch

U0 = "GPU-aaaa"
NO_GPU = "not measured: the run used no GPU"


class Source:
    """An NVML double: one GPU, a process table, 99 % busy; ``hidden`` bytes held by processes it does not list
    (another PID namespace); ``memory`` False: a driver without memory v2."""

    def __init__(self, table: Dict[int, Optional[int]], hidden: int = 0, memory: bool = True) -> None:
        self.table, self.hidden, self.memory = table, hidden, memory

    def devices(self) -> list[str]:
        return [U0]

    def processes(self, uuid: str) -> list[tuple[int, Optional[int]]]:
        return sorted(self.table.items())

    def utilization(self, uuid: str) -> Optional[int]:
        return 99

    def memory_used(self, uuid: str) -> Optional[int]:
        return sum(v or 0 for v in self.table.values()) + self.hidden + (4 << 20) if self.memory else None


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def proc_tree(root: Path, tree: Dict[int, int]) -> str:
    """A fake /proc: pid -> ppid, each with a stat file and a comm."""
    for pid, ppid in tree.items():
        (root / str(pid)).mkdir(exist_ok=True)
        (root / str(pid) / "stat").write_text(f"{pid} (python3) S {ppid} 1 1 0\n")
        (root / str(pid) / "comm").write_text("python3\n" if pid != 4242 else "neighbour\n")
    return str(root)


def gpu_watch(src: Source, clock: Clock, proc: str) -> SharingWatch:
    """A watch of one GPU (U0, the payload's GPU 0), our PID 500; the sampler thread sleeps an hour (the test samples)."""
    watch = SharingWatch(cpu_context(), src, clock=clock, interval_s=3600, me=500, proc_root=proc)
    watch._visible = {U0: 0}
    return watch


def run(watch: SharingWatch, src: Source, clock: Clock, steps: Sequence[tuple[float, Mapping[int, Optional[int]], int]]) -> None:
    """begin(); then at each (time, table, hidden bytes) one sample; end() at the last time."""
    watch.begin()
    for t, table, hidden in steps:
        clock.t, src.table, src.hidden = t, dict(table), hidden
        watch.sample()
    watch.end()

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
    sharing, detail = watch.verdict()
    assert sharing == {"exclusive": None, "allowed": False, "foreign": [], "reason": NO_GPU}
    assert (detail["utilization_pct"], detail["notes"]) == ({"start": {U0: 99}, "end": {U0: 99}}, [NO_GPU])


def test_a_run_stopped_before_any_snapshot_says_so() -> None:
    watch = SharingWatch(cpu_context(), Source({}))
    watch._visible = {U0: 0}  # a GPU run, hung before the watch began
    watch.end()  # no start snapshot: end() has nothing to compare
    assert watch.result is None and watch.end_snapshot is None
    sharing, detail = watch.verdict()
    why = "not measured: NVML could not list processes (the run stopped before the start snapshot)"
    assert sharing == {"exclusive": None, "allowed": False, "foreign": [], "reason": why}
    assert detail["notes"] == [why]
    assert detail["utilization_pct"] == {"start": {}, "end": {}}


def test_without_nvml_the_start_snapshot_names_the_missing_library() -> None:
    if nvml.open_nvml() is not None:
        pytest.skip("this machine loads libnvidia-ml.so.1")
    watch = SharingWatch(cpu_context())
    watch.begin()
    assert watch.source is None
    assert watch.start is not None and (watch.start.error, watch.start.procs) == (NO_NVML, ())
    assert watch.verdict()[0]["exclusive"] is None


OURS = {500: 1, 501: 500, 4242: 1}  # the payload, a worker of it, a neighbour


def test_tenants_before_during_one_check_and_after_each_with_their_times(tmp_path: Path) -> None:
    src, clock = Source({}), Clock()
    watch = gpu_watch(src, clock, proc_tree(tmp_path, OURS))
    run(watch, src, clock, [
        (1001.0, {500: 1 << 30}, 0),  # our context
        (1002.0, {500: 1 << 30, 501: 1 << 30}, 0),  # our worker: ours by the process tree
        (1003.0, {500: 1 << 30, 4242: 2 << 30}, 0),  # a neighbour, listed: during one check only
        (1003.5, {500: 1 << 30, 4242: 2 << 30}, 0),
        (1004.0, {500: 1 << 30}, 0),
        (1006.0, {500: 1 << 30}, 0),
    ])
    sharing, detail = watch.verdict()
    assert sharing["foreign"] == [{"gpu": 0, "uuid": U0, "pid": 4242, "name": "neighbour", "used_bytes": 2 << 30,
                                   "seen": "during", "first": 1003.0, "last": 1003.5, "by": "payload"}]
    assert sharing["exclusive"] is False
    assert (detail["samples"], detail["own_processes_listed"]) == (8, True)
    gemm = {"id": "gemm.bf16", "status": "fail", "threshold": 700.0, "detail": "34%"}
    verdicts = [judge_entry(dict(gemm, window={"start": a, "end": b}), sharing["foreign"], {"gemm.bf16"})["status"]
                for a, b in ((1001.0, 1002.4), (1002.8, 1003.2), (1004.1, 1005.0))]
    assert verdicts == ["fail", "inconclusive", "fail"]  # before it came and after it left, the GPU is blamed


def test_a_neighbour_this_namespace_cannot_list_is_found_by_its_memory(tmp_path: Path) -> None:
    src, clock = Source({}), Clock()
    watch = gpu_watch(src, clock, proc_tree(tmp_path, OURS))
    steps = [(1000.0 + i * 0.25, {500: 1 << 30}, (1 << 30) if 8 <= i <= 16 else 0) for i in range(1, 30)]
    run(watch, src, clock, steps)
    sharing, _ = watch.verdict()
    assert sharing["foreign"] == [{"gpu": 0, "uuid": U0, "pid": None, "name": None, "used_bytes": (1 << 30) + (4 << 20),
                                   "seen": "during", "first": 1002.0, "last": 1004.0, "by": "payload"}]
    assert sharing["reason"] == "another process used the GPU: GPU 0: 1.0 GiB held by processes this run cannot see"


def test_the_live_view_names_a_tenant_while_it_is_there(tmp_path: Path) -> None:
    src, clock = Source({}), Clock()
    watch = gpu_watch(src, clock, proc_tree(tmp_path, OURS))
    watch.begin()
    for t, table in ((1001.0, {500: 1}), (1002.0, {500: 1, 4242: 5})):
        clock.t, src.table = t, dict(table)
        watch.sample()
    assert [(f["pid"], f["first"]) for f in watch.foreign_now()] == [(4242, 1002.0)]
    watch.end()


def test_a_clean_run_watched_whole_is_exclusive(tmp_path: Path) -> None:
    src, clock = Source({}), Clock()
    watch = gpu_watch(src, clock, proc_tree(tmp_path, OURS))
    run(watch, src, clock, [(1000.0 + i * 0.25, {500: 1 << 30, 501: 1 << 29}, 0) for i in range(1, 20)])
    sharing, detail = watch.verdict()
    assert (sharing["exclusive"], sharing["foreign"]) == (True, [])
    assert detail["memory_accounted_samples"] == {U0: 21}


def test_without_memory_v2_a_clean_run_is_not_called_exclusive(tmp_path: Path) -> None:
    src, clock = Source({}, memory=False), Clock()
    watch = gpu_watch(src, clock, proc_tree(tmp_path, OURS))
    run(watch, src, clock, [(1000.0 + i * 0.25, {500: 1 << 30}, 0) for i in range(1, 10)])
    assert watch.verdict()[0]["exclusive"] is None
