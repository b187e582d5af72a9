"""The shared-GPU rule (verify/imagesmith_payload/sharing.py) with NVML doubles: no torch, no driver."""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "verify"))

from imagesmith_payload import nvml, sharing
from imagesmith_payload.sharing import Seen, Snapshot

U0, U1 = "GPU-aaaa", "GPU-bbbb"
VISIBLE = {U0: 0, U1: 1}
NAMES = {4242: "python3", 77: "Xorg", 500: "payload"}


def snap(*procs: Seen, error: Optional[str] = None) -> Snapshot:
    return Snapshot(tuple(procs), {U0: 0, U1: 0}, error)


def name_of(pid: int) -> Optional[str]:
    return NAMES.get(pid)


def row(gpu: int, pid: int, name: Optional[str], used: Optional[int], seen: str) -> Dict[str, Any]:
    return {"gpu": gpu, "uuid": U0 if gpu == 0 else U1, "pid": pid, "name": name, "used_bytes": used, "seen": seen}


# start, end, ours, handshake result -> exclusive, foreign, notes
@pytest.mark.parametrize("start, end, ours, mine, exclusive, foreign, notes", [
    # host mode: our PID is listed at the end; nothing else
    (snap(), snap(Seen(U0, 500, 2 << 30)), {500}, None, True, [], ()),
    # host mode: a neighbour there from start to end, named from /proc
    (snap(Seen(U0, 4242, 1717986918)), snap(Seen(U0, 4242, 1717986918), Seen(U0, 500, 1 << 30)), {500}, None,
     False, [row(0, 4242, "python3", 1717986918, "both")], ()),
    # a neighbour that left before the end, another that came during the run, on GPU 1
    (snap(Seen(U0, 77, None)), snap(Seen(U0, 500, 1), Seen(U1, 4242, 5), Seen(U1, 500, 1)), {500, 501}, None,
     False, [row(0, 77, "Xorg", None, "start"), row(1, 4242, "python3", 5, "end")], ()),
    # a child of ours (501) still on the GPU at the end is ours
    (snap(), snap(Seen(U0, 500, 1), Seen(U0, 501, 1)), {500, 501}, None, True, [], ()),
    # a GPU the run does not use is not looked at
    (snap(Seen("GPU-other", 4242, 1)), snap(Seen(U0, 500, 1)), {500}, None, True, [], ()),
    # container: host PIDs; the marker allocation finds ours (90001), the other one is foreign, unnamed
    (snap(Seen(U0, 90000, 3)), snap(Seen(U0, 90000, 3), Seen(U0, 90001, 9)), {1}, 90001,
     False, [row(0, 90000, None, 3, "both")],
     ("own PID 90001 (host namespace) found by a 256 MiB marker allocation",)),
    # container, no per-process memory: the only PID new since the start is ours
    (snap(Seen(U0, 90000, None)), snap(Seen(U0, 90000, None), Seen(U0, 90001, None)), {1}, None,
     False, [row(0, 90000, None, None, "both")],
     ("own PID 90001 (host namespace) taken as the only process new since the start",)),
    (snap(), snap(Seen(U0, 90001, None)), {1}, None, True, [],
     ("own PID 90001 (host namespace) taken as the only process new since the start",)),
    # container, two new PIDs and no way to tell: unknown, not blamed, not trusted
    (snap(), snap(Seen(U0, 90001, None), Seen(U0, 90002, None)), {1}, None, None,
     [],
     ("own PID not identified among 2 processes new since the start (NVML gave no per-process memory): "
      "exclusivity unknown",)),
    # ... but a process there before our first context is foreign all the same
    (snap(Seen(U0, 90000, None)), snap(Seen(U0, 90000, None), Seen(U0, 90001, None), Seen(U0, 90002, None)), {1},
     None, False, [row(0, 90000, None, None, "both")],
     ("own PID not identified among 2 processes new since the start (NVML gave no per-process memory): "
      "exclusivity unknown",)),
    # the end snapshot failed: what the start saw still counts
    (snap(Seen(U0, 4242, 1)), snap(error="OSError: lost"), {500}, None, False, [row(0, 4242, None, 1, "start")],
     ("not measured at the end: OSError: lost",)),
])
def test_sharing_rule(start: Snapshot, end: Snapshot, ours: set[int], mine: Optional[int], exclusive: Optional[bool],
                      foreign: List[Dict[str, Any]], notes: tuple[str, ...]) -> None:
    got = sharing.judge(start, end, VISIBLE, ours, False, lambda _uuid: mine, name_of)
    assert got.sharing == {"exclusive": exclusive, "allowed": False, "foreign": foreign}
    assert got.notes == notes
    assert sharing.validate(got.sharing) == []


@pytest.mark.parametrize("start, end, visible, note", [
    (snap(error="no NVML"), snap(error="no NVML"), VISIBLE, "not measured: NVML could not list processes (no NVML)"),
    (snap(Seen(U0, 4242, 1)), snap(), {}, "not measured: the run used no GPU"),
])
def test_not_measured_is_null_never_true(start: Snapshot, end: Snapshot, visible: Dict[str, int], note: str) -> None:
    got = sharing.judge(start, end, visible, {500}, True, None, name_of)
    assert (got.sharing, got.notes) == ({"exclusive": None, "allowed": True, "foreign": []}, (note,))


def entry(check_id: str, status: str, threshold: Optional[float] = 100.0, detail: str = "d") -> Dict[str, Any]:
    return {"id": check_id, "status": status, "threshold": threshold, "detail": detail}


SHARED = {"exclusive": False, "allowed": False, "foreign": [row(0, 4242, "python3", 1717986918, "both")]}
WHY = "inconclusive: GPU 0 shared with PID 4242 python3, 1.6 GiB; measured: "


@pytest.mark.parametrize("given, sharing_, status, detail", [
    (entry("gemm.bf16", "fail", detail="34% of baseline"), SHARED, "inconclusive", WHY + "fail: 34% of baseline"),
    (entry("gemm.bf16", "warn", detail="85%"), SHARED, "inconclusive", WHY + "warn: 85%"),
    (entry("gemm.bf16", "pass"), SHARED, "pass", "d"),  # a pass on a shared GPU proves the floor
    (entry("gemm.bf16", "fail", threshold=None, detail="products wrong"), SHARED, "fail", "products wrong"),
    (entry("matmul.bf16", "fail"), SHARED, "fail", "d"),  # not a throughput check
    (entry("gemm.bf16", "fail"), dict(SHARED, allowed=True), "fail", "d"),  # --allow-shared-gpu: judged as measured
    (entry("gemm.bf16", "fail"), {"exclusive": None, "allowed": False, "foreign": []}, "fail", "d"),
])
def test_throughput_on_a_shared_gpu_is_inconclusive(given: Dict[str, Any], sharing_: Dict[str, Any], status: str,
                                                    detail: str) -> None:
    [got] = sharing.judge_throughput_entries([given], sharing_, {"gemm.bf16"})
    assert (got["status"], got["detail"]) == (status, detail)


@pytest.mark.parametrize("sharing_, line", [
    (SHARED, "not exclusive: GPU 0 shared with PID 4242 python3, 1.6 GiB (throughput checks inconclusive; "
             "not verified)"),
    (dict(SHARED, allowed=True), "not exclusive: GPU 0 shared with PID 4242 python3, 1.6 GiB (--allow-shared-gpu: "
                                 "throughput is the tenant's share)"),
    ({"exclusive": True, "allowed": False, "foreign": []}, "GPUs exclusive to this run"),
    ({"exclusive": None, "allowed": False, "foreign": []}, "GPU exclusivity not measured"),
])
def test_verdict_line(sharing_: Dict[str, Any], line: str) -> None:
    assert sharing.verdict_line(sharing_) == line


class Source:
    """An NVML double: a process table per GPU; grow() adds to our PID's memory."""

    def __init__(self, table: Dict[str, Dict[int, Optional[int]]], ours: int, fail: bool = False) -> None:
        self.table, self.ours, self.fail = table, ours, fail

    def devices(self) -> List[str]:
        if self.fail:
            raise OSError("nvmlDeviceGetCount_v2 failed with NVML error 999")
        return list(self.table)

    def processes(self, uuid: str) -> List[tuple[int, Optional[int]]]:
        return sorted(self.table[uuid].items())

    def utilization(self, uuid: str) -> Optional[int]:
        return 99

    def grower(self, uuid: str) -> Callable[[int], Callable[[], None]]:
        def grow(nbytes: int) -> Callable[[], None]:
            self.table[uuid][self.ours] = (self.table[uuid][self.ours] or 0) + nbytes
            return lambda: None
        return grow


def test_take_and_identify_by_growth() -> None:
    src = Source({U0: {90000: 5 << 30, 90001: 1 << 30}}, ours=90001)
    assert sharing.take(src) == Snapshot((Seen(U0, 90000, 5 << 30), Seen(U0, 90001, 1 << 30)), {U0: 99})
    assert sharing.identify_by_growth(src, U0, src.grower(U0)) == 90001
    blind = Source({U0: {90000: None, 90001: None}}, ours=90001)
    assert sharing.identify_by_growth(blind, U0, lambda _n: (lambda: None)) is None
    assert sharing.take(Source({}, 0, fail=True)).error == "OSError: nvmlDeviceGetCount_v2 failed with NVML error 999"


def test_own_pids_follow_the_process_tree(tmp_path: Path) -> None:
    for pid, ppid in ((500, 1), (501, 500), (502, 501), (600, 1)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (py thon) S {ppid} 1 1 0\n")
    (tmp_path / "self").mkdir()
    assert sharing.own_pids(500, str(tmp_path)) == {500, 501, 502}


def test_ctypes_process_list_grows_its_buffer_and_reads_unknown_memory() -> None:
    calls: List[int] = []

    def fake(_dev: Any, count: Any, infos: Any) -> int:
        size = ctypes.cast(count, ctypes.POINTER(ctypes.c_uint)).contents
        calls.append(size.value)
        if size.value < 20:
            size.value = 20
            return int(nvml.NVML_ERROR_INSUFFICIENT_SIZE)
        arr = ctypes.cast(infos, ctypes.POINTER(nvml.ProcessInfo))
        arr[0].pid, arr[0].usedGpuMemory = 4242, 1 << 30
        arr[1].pid, arr[1].usedGpuMemory = 77, nvml.NVML_VALUE_NOT_AVAILABLE
        size.value = 2
        return int(nvml.NVML_SUCCESS)

    assert nvml._list_processes(fake, ctypes.c_void_p(), "f") == [(4242, 1 << 30), (77, None)]
    assert calls == [16, 32]
