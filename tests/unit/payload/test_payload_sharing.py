"""The shared-GPU rule (verify/imagesmith_payload/sharing.py) with NVML doubles: no torch, no driver."""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "verify"))

from imagesmith_payload import nvml, sharing
from imagesmith_payload.sharing import MemoryLedger, Seen, Snapshot, Watched

U0, U1 = "GPU-aaaa", "GPU-bbbb"
VISIBLE = {U0: 0, U1: 1}
NAMES = {4242: "python3", 77: "Xorg", 500: "payload"}


def snap(*procs: Seen, error: Optional[str] = None) -> Snapshot:
    return Snapshot(tuple(procs), {U0: 0, U1: 0}, error)


def name_of(pid: int) -> Optional[str]:
    return NAMES.get(pid)


def row(gpu: int, pid: Optional[int], name: Optional[str], used: Optional[int], seen: str,
        first: Optional[float] = None, last: Optional[float] = None, by: str = "payload") -> Dict[str, Any]:
    return {"gpu": gpu, "uuid": U0 if gpu == 0 else U1, "pid": pid, "name": name, "used_bytes": used, "seen": seen,
            "first": first, "last": last, "by": by}


def clean(*uuids: str, own: bool = True, samples: int = 40) -> Watched:
    """A sampler's record of a whole run: our processes listed, every MiB accounted on ``uuids``."""
    watched = Watched(own_listed=own)
    for uuid in uuids:
        ledger = watched.ledgers.setdefault(uuid, MemoryLedger())
        for i in range(samples):
            ledger.feed(100.0 + i * 0.25, 8 << 20)
    for i in range(samples):
        watched.tick(100.0 + i * 0.25)
    return watched


# start, end, ours, handshake result, the sampler's record -> exclusive, foreign, notes
@pytest.mark.parametrize("start, end, ours, mine, watched, exclusive, foreign, notes", [
    # host mode: our PID is listed at the end; nothing else; watched whole and accounted: exclusive
    (snap(), snap(Seen(U0, 500, 2 << 30)), {500}, None, clean(U0, U1), True, [], ()),
    # the same two snapshots with nobody watching between them: not measured, never true
    (snap(), snap(Seen(U0, 500, 2 << 30)), {500}, None, None, None, [], ()),
    # host mode: a neighbour there from start to end, named from /proc
    (snap(Seen(U0, 4242, 1717986918)), snap(Seen(U0, 4242, 1717986918), Seen(U0, 500, 1 << 30)), {500}, None,
     clean(U0, U1), False, [row(0, 4242, "python3", 1717986918, "both")], ()),
    # a neighbour that left before the end, another that came during the run, on GPU 1
    (snap(Seen(U0, 77, None)), snap(Seen(U0, 500, 1), Seen(U1, 4242, 5), Seen(U1, 500, 1)), {500, 501}, None, None,
     False, [row(0, 77, "Xorg", None, "start"), row(1, 4242, "python3", 5, "end")], ()),
    # a child of ours (501) still on the GPU at the end is ours
    (snap(), snap(Seen(U0, 500, 1), Seen(U0, 501, 1)), {500, 501}, None, clean(U0, U1), True, [], ()),
    # a GPU the run does not use is not looked at
    (snap(Seen("GPU-other", 4242, 1)), snap(Seen(U0, 500, 1)), {500}, None, clean(U0, U1), True, [], ()),
    # older drivers in a container list host PIDs: the marker allocation finds ours (90001), the other is foreign
    (snap(Seen(U0, 90000, 3)), snap(Seen(U0, 90000, 3), Seen(U0, 90001, 9)), {1}, 90001, None,
     False, [row(0, 90000, None, 3, "both")],
     ("own PID 90001 (host namespace) found by a 256 MiB marker allocation",)),
    # ... no per-process memory: the only PID new since the start is ours
    (snap(Seen(U0, 90000, None)), snap(Seen(U0, 90000, None), Seen(U0, 90001, None)), {1}, None, None,
     False, [row(0, 90000, None, None, "both")],
     ("own PID 90001 (host namespace) taken as the only process new since the start",)),
    # ... nobody else, but the lists never showed a PID of this namespace: unknown, not exclusive
    (snap(), snap(Seen(U0, 90001, None)), {1}, None, clean(U0, U1, own=False), None, [],
     ("own PID 90001 (host namespace) taken as the only process new since the start",)),
    # ... two new PIDs and no way to tell: unknown, not blamed, not trusted
    (snap(), snap(Seen(U0, 90001, None), Seen(U0, 90002, None)), {1}, None, None, None,
     [],
     ("own PID not identified among 2 processes new since the start (NVML gave no per-process memory): "
      "exclusivity unknown",)),
    # ... but a process there before our first context is foreign all the same
    (snap(Seen(U0, 90000, None)), snap(Seen(U0, 90000, None), Seen(U0, 90001, None), Seen(U0, 90002, None)), {1},
     None, None, False, [row(0, 90000, None, None, "both")],
     ("own PID not identified among 2 processes new since the start (NVML gave no per-process memory): "
      "exclusivity unknown",)),
    # the end snapshot failed: what the start saw still counts
    (snap(Seen(U0, 4242, 1)), snap(error="OSError: lost"), {500}, None, None, False, [row(0, 4242, None, 1, "start")],
     ("not measured at the end: OSError: lost",)),
])
def test_sharing_rule(start: Snapshot, end: Snapshot, ours: set[int], mine: Optional[int], watched: Optional[Watched],
                      exclusive: Optional[bool], foreign: List[Dict[str, Any]], notes: tuple[str, ...]) -> None:
    got = sharing.judge(start, end, VISIBLE, ours, False, lambda _uuid: mine, name_of, watched)
    assert (got.sharing["exclusive"], got.sharing["foreign"], got.notes) == (exclusive, foreign, notes)
    assert sharing.validate(got.sharing) == []


def tenant_watch() -> Watched:
    """Host namespace: PID 4242 listed from 101 s to 103 s; on GPU 1 1.0 GiB nobody listed, 102 s to 104 s."""
    watched = clean(U0, U1)
    watched.see(U0, 4242, 1 << 30, 101.0, "python3")
    watched.see(U0, 4242, 2 << 30, 103.0, None)
    ledger = watched.ledgers[U1] = MemoryLedger()
    for t, held in ((101.75, 8 << 20), (102.0, 1 << 30), (103.0, 1 << 30), (104.0, 1 << 30), (104.25, 8 << 20)):
        ledger.feed(t, held)
    return watched


def test_the_sampler_names_tenants_between_the_snapshots_with_their_times() -> None:
    got = sharing.judge(snap(), snap(Seen(U0, 500, 1)), VISIBLE, {500}, False, None, name_of, tenant_watch())
    assert got.sharing["foreign"] == [row(0, 4242, "python3", 2 << 30, "during", 101.0, 103.0),
                                      row(1, None, None, 1 << 30, "during", 102.0, 104.0)]
    assert got.sharing["exclusive"] is False
    assert got.sharing["reason"] == ("another process used the GPU: GPU 0 shared with PID 4242 python3, 2.0 GiB; "
                                     "GPU 1: 1.0 GiB held by processes this run cannot see")


def test_listed_tenants_of_another_namespace_are_not_named_but_unseen_memory_is() -> None:
    watched = tenant_watch()
    watched.own_listed = False  # the lists never showed a PID of ours: their PIDs are not this namespace's
    got = sharing.judge(snap(), snap(), VISIBLE, {1}, False, None, name_of, watched)
    assert got.sharing["foreign"] == [row(1, None, None, 1 << 30, "during", 102.0, 104.0)]


@pytest.mark.parametrize("watched, reason", [  # the end snapshot lists no PID of ours: the sampler's record decides
    (clean(U0, U1), "no other process listed and every MiB accounted for in 40 samples (largest gap 0.25 s)"),
    (clean(U0), "this driver gives no per-device memory v2 figures, so memory held by processes this run cannot see "
                "goes unnoticed"),
    (clean(U0, U1, own=False), "NVML never listed this run's own processes here (another PID namespace): its lists say "
                               "nothing of others"),
    (Watched(error="NVML failed while watching: OSError: lost"),
     "not watched for the whole run (NVML failed while watching: OSError: lost)"),
])
def test_exclusive_only_when_watched_whole_and_accounted(watched: Watched, reason: str) -> None:
    got = sharing.judge(snap(), snap(), VISIBLE, {500}, False, None, name_of, watched)
    assert (got.sharing["exclusive"], got.sharing["reason"]) == (reason.startswith("no other") or None, reason)


@pytest.mark.parametrize("start, end, visible, note", [
    (snap(error="no NVML"), snap(error="no NVML"), VISIBLE, "not measured: NVML could not list processes (no NVML)"),
    (snap(Seen(U0, 4242, 1)), snap(), {}, "not measured: the run used no GPU"),
])
def test_not_measured_is_null_never_true(start: Snapshot, end: Snapshot, visible: Dict[str, int], note: str) -> None:
    got = sharing.judge(start, end, visible, {500}, True, None, name_of)
    assert (got.sharing, got.notes) == ({"exclusive": None, "allowed": True, "foreign": [], "reason": note}, (note,))


@pytest.mark.parametrize("readings, listing, left", [
    ([3 << 30, 3 << 30], [(500, 1 << 30)], 2 << 30),
    ([3 << 30, 2 << 30], [(500, 1 << 30)], 1 << 30),  # a process of ours freed meanwhile: the smaller reading
    ([1 << 30, 1 << 30], [(500, 2 << 30)], 0),  # grew after the reading: nothing unaccounted, never negative
    ([None, None], [(500, 1 << 30)], None),  # no memory v2
    ([3 << 30, 3 << 30], [(500, None)], None),  # a listed process without its figure
])
def test_unaccounted_memory(readings: List[Optional[int]], listing: List[Any], left: Optional[int]) -> None:
    assert sharing.unaccounted(readings, listing) == left


def test_the_memory_ledger_needs_a_tenant_to_stay() -> None:
    ledger = MemoryLedger(floor=100, hold_s=1.0)
    for t, held in ((0.0, 900), (0.5, 900), (0.75, 0),  # a context being born: 0.5 s, not a tenant
                    (2.0, 500), (2.5, None), (3.0, 700), (3.25, 50),  # 1.0 s over the floor, a blind sample within
                    (5.0, 400), (6.5, 400)):  # still there at the end of the run
        ledger.feed(t, held)
    assert ledger.episodes() == [(2.0, 3.0, 700), (5.0, 6.5, 400)]
    assert ledger.current() == (5.0, 6.5, 400)
    assert (ledger.samples, ledger.blind) == (8, 1)


def entry(check_id: str, status: str, threshold: Optional[float] = 100.0, detail: str = "d",
          window: Optional[tuple[float, float]] = (100.0, 110.0)) -> Dict[str, Any]:
    got: Dict[str, Any] = {"id": check_id, "status": status, "threshold": threshold, "detail": detail}
    if window is not None:
        got["window"] = {"start": window[0], "end": window[1]}
    return got


SHARED = {"exclusive": False, "allowed": False, "foreign": [row(0, 4242, "python3", 1717986918, "both", 95.0, 120.0)]}
WHY = "inconclusive: GPU 0 shared with PID 4242 python3, 1.6 GiB during this check; measured: "


@pytest.mark.parametrize("given, sharing_, status, detail", [
    (entry("gemm.bf16", "fail", detail="34% of baseline"), SHARED, "inconclusive", WHY + "fail: 34% of baseline"),
    (entry("gemm.bf16", "warn", detail="85%"), SHARED, "inconclusive", WHY + "warn: 85%"),
    (entry("gemm.bf16", "pass"), SHARED, "pass", "d"),  # a pass on a shared GPU proves the floor
    (entry("gemm.bf16", "fail", threshold=None, detail="products wrong"), SHARED, "fail", "products wrong"),
    (entry("matmul.bf16", "fail"), SHARED, "fail", "d"),  # not a throughput check
    (entry("gemm.bf16", "fail"), dict(SHARED, allowed=True), "fail", "d"),  # --allow-shared-gpu: judged as measured
    (entry("gemm.bf16", "fail"), {"exclusive": None, "allowed": False, "foreign": []}, "fail", "d"),
    # the tenant's time against the check's window (half a second of margin either side)
    (entry("gemm.bf16", "fail", window=(121.0, 125.0)), SHARED, "fail", "d"),  # it had left: the GPU is blamed
    (entry("gemm.bf16", "fail", window=(120.4, 125.0)), SHARED, "inconclusive", WHY + "fail: d"),
    (entry("gemm.bf16", "fail", window=(80.0, 94.0)), SHARED, "fail", "d"),  # before it came
    (entry("gemm.bf16", "fail", window=None), SHARED, "inconclusive", WHY + "fail: d"),  # no window: any tenant counts
    (entry("gemm.bf16", "fail", window=(121.0, 125.0)), {"allowed": False, "foreign": [row(0, 4242, None, None, "start")]},
     "inconclusive", "inconclusive: GPU 0 shared with PID 4242 during this check; measured: fail: d"),  # a tenant without times
])
def test_throughput_on_a_shared_gpu_is_inconclusive(given: Dict[str, Any], sharing_: Dict[str, Any], status: str,
                                                    detail: str) -> None:
    [got] = sharing.judge_throughput_entries([given], sharing_, {"gemm.bf16"})
    assert (got["status"], got["detail"]) == (status, detail)


ON_GPU1 = {"allowed": False, "foreign": [row(1, 4242, "python3", 1 << 30, "during", 95.0, 120.0)]}


def per_gpu(status: str, figures: Dict[str, float]) -> Dict[str, Any]:
    return dict(entry("gemm.bf16", status, threshold=588.0), baseline=784.0, data={"per_gpu_tflops": figures})


@pytest.mark.parametrize("given, status", [
    (per_gpu("fail", {"0": 790.0, "1": 270.0}), "inconclusive"),  # GPU 1 fell short with the tenant on it
    (per_gpu("fail", {"0": 270.0, "1": 790.0}), "fail"),  # GPU 0 fell short with nobody on it: GPU 0 is blamed
    (per_gpu("fail", {"0": 270.0, "1": 270.0}), "fail"),  # both short, a tenant on one: the other is blamed
    (per_gpu("warn", {"0": 790.0, "1": 650.0}), "inconclusive"),  # under the warn line (0.9 x 784) on GPU 1 only
    (per_gpu("warn", {"0": 650.0, "1": 790.0}), "warn"),
])
def test_only_a_tenant_on_the_gpu_that_fell_short_excuses_it(given: Dict[str, Any], status: str) -> None:
    [got] = sharing.judge_throughput_entries([given], ON_GPU1, {"gemm.bf16"})
    assert got["status"] == status


@pytest.mark.parametrize("window, got", [
    ({"start": 1.0, "end": 2.0}, (1.0, 2.0)),
    ({"start": 2.0, "end": 1.0}, None),
    ({"start": float("nan"), "end": 2.0}, None),
    ({"start": True, "end": 2.0}, None),
    ([1.0, 2.0], None),
])
def test_window_of_reads_only_a_sane_window(window: Any, got: Any) -> None:
    assert sharing.window_of({"window": window}) == got


@pytest.mark.parametrize("sharing_, line", [
    (SHARED, "not exclusive: GPU 0 shared with PID 4242 python3, 1.6 GiB (throughput checks during a tenant "
             "inconclusive; not verified)"),
    (dict(SHARED, allowed=True), "not exclusive: GPU 0 shared with PID 4242 python3, 1.6 GiB (--allow-shared-gpu: "
                                 "throughput is the tenant's share)"),
    ({"exclusive": True, "allowed": False, "foreign": []}, "GPUs exclusive to this run"),
    ({"exclusive": None, "allowed": False, "foreign": []}, "GPU exclusivity not measured"),
    ({"exclusive": None, "allowed": False, "foreign": [], "reason": "remote engine"},
     "GPU exclusivity not measured (remote engine)"),
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
    assert sharing.take(src, lambda: 7.0) == Snapshot((Seen(U0, 90000, 5 << 30), Seen(U0, 90001, 1 << 30)), {U0: 99}, t=7.0)
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
