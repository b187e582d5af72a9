"""The host's watch over a verify run's GPUs (imagesmith.edges.gpuwatch) with a pynvml double, and the verdict
that joins it with the payload's windows (imagesmith.stages.verify.gpuwatch): a tenant before the container, during one
check only, after it; the run's own processes by cgroup or process tree; memory nobody listed; whole or not."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import pytest

from imagesmith.edges import gpuwatch as edge
from imagesmith.edges import hostinfo
from imagesmith.model import loader, schemas, verifyreport
from imagesmith.stages.verify import gpuwatch

FIXTURES = Path(__file__).parents[3] / "fixtures" / "reports"
U0 = "GPU-7a65ac6b-3763-a794-2800-fe5e215e2be5"
CID = "c0ffee" * 10 + "abcd"
MIB = 2**20


class NotFound(Exception):
    """pynvml's NVMLError_NotFound: no utilization sample since the last one."""


class Nvml:
    """pynvml's process, memory and utilization calls for one GPU: ``table`` pid -> bytes, ``hidden`` bytes held by
    processes it does not list, ``util`` pid -> SM %, ``v2`` False: a driver without memory v2."""

    nvmlMemory_v2 = 0x02000028

    def __init__(self) -> None:
        self.table: dict[int, Optional[int]] = {}
        self.util: dict[int, int] = {}
        self.hidden, self.v2, self.broken = 0, True, False

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return U0 if h == 0 else "GPU-other"

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        if self.broken:
            raise RuntimeError("GPU is lost")
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in sorted(self.table.items())]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return []

    def nvmlDeviceGetMemoryInfo(self, h: int, version: Any = None) -> SimpleNamespace:
        if version != self.nvmlMemory_v2 or not self.v2:
            raise TypeError("no version argument")
        return SimpleNamespace(used=sum(v or 0 for v in self.table.values()) + self.hidden + 6 * MIB)

    def nvmlDeviceGetProcessUtilization(self, h: int, since: int) -> list[SimpleNamespace]:
        if not self.util:
            raise NotFound("Not Found")
        return [SimpleNamespace(pid=pid, smUtil=u, timeStamp=since + 1) for pid, u in self.util.items()]


def fake_proc(root: Path, procs: dict[int, tuple[int, str, str]]) -> str:
    """pid -> (ppid, comm, cgroup line)."""
    for pid, (ppid, comm, cgroup) in procs.items():
        d = root / str(pid)
        d.mkdir()
        (d / "stat").write_text(f"{pid} ({comm}) S {ppid} 1 1 0\n")
        (d / "comm").write_text(comm + "\n")
        (d / "cgroup").write_text(cgroup + "\n")
    return str(root)


PROCS = {4242: (1, "neighbour", "0::/user.slice"), 4243: (1, "trainer", "0::/user.slice"), 700: (600, "python3", f"0::/docker/{CID}"),
         701: (700, "python3", f"0::/docker/{CID}"), 600: (1, "containerd-shim", "0::/system.slice"),
         900: (1, "python3", "0::/user.slice"), 901: (900, "python3", "0::/user.slice")}


class Clock:
    t = 1000.0

    def __call__(self) -> float:
        return self.t


def watch_of(nvml: Nvml, proc: str, clock: Clock) -> edge.ProcessWatch:
    return edge.ProcessWatch(nvml, edge.watch_devices(nvml, ["0"]), clock=clock, proc_root=proc)


def tick(w: edge.ProcessWatch, nvml: Nvml, clock: Clock, t: float, table: dict[int, Optional[int]], hidden: int = 0) -> None:
    clock.t, nvml.table, nvml.hidden = t, dict(table), hidden
    w.tick()


def test_watch_devices_by_index_or_uuid() -> None:
    nvml = Nvml()
    assert list(edge.watch_devices(nvml, None)) == [0, 1]
    assert edge.watch_devices(nvml, [U0]) == {0: (0, U0)}
    assert edge.watch_devices(nvml, [U0.removeprefix("GPU-")]) == {0: (0, U0)}
    assert edge.watch_devices(nvml, ["1"]) == {1: (1, "GPU-other")}


def test_owners_by_cgroup_and_by_process_tree(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, PROCS)
    ours = edge.in_container(CID, proc)
    assert (ours(700), ours(701), ours(4242), ours(600), ours(31337)) == (True, True, False, False, False)
    tree = edge.descendant_of(900, proc)
    assert (tree(900), tree(901), tree(700), tree(31337)) == (True, True, False, False)


def test_a_tenant_before_the_container_during_one_check_and_after(tmp_path: Path) -> None:
    nvml, clock = Nvml(), Clock()
    w = watch_of(nvml, fake_proc(tmp_path, PROCS), clock)
    tick(w, nvml, clock, 1000.0, {4242: 900 * MIB})  # before the container exists: foreign
    w.claim(edge.in_container(CID, w.proc_root))
    tick(w, nvml, clock, 1000.25, {})  # it left
    nvml.util = {700: 93}
    tick(w, nvml, clock, 1001.0, {700: 2048 * MIB, 701: 600 * MIB})  # the container's payload and its worker
    tick(w, nvml, clock, 1002.0, {700: 2048 * MIB, 4243: 1024 * MIB})  # a neighbour during one check
    nvml.util = {}
    tick(w, nvml, clock, 1003.0, {700: 2048 * MIB})
    got = w.result()
    rows = [(p["pid"], p["owner"], p["name"], p["first"], p["last"], p["used_bytes"] // MIB, p["sm_util_max"]) for p in got["processes"]]
    assert rows == [(4242, "foreign", "neighbour", 1000.0, 1000.0, 900, None), (700, "run", "python3", 1001.0, 1003.0, 2048, 93),
                    (701, "run", "python3", 1001.0, 1001.0, 600, None), (4243, "foreign", "trainer", 1002.0, 1002.0, 1024, None)]
    assert (got["samples"], got["largest_gap_s"], got["own_seen"], got["error"], got["unseen"]) == (5, 1.0, True, None, [])
    assert [r["pid"] for r in w.foreign_between(1001.6, 1001.8)] == [4243]  # within the half-second margin of 1002.0
    assert w.foreign_between(1000.6, 1001.4) == []  # after the first left, before the second came: nobody


def test_memory_nobody_listed_is_a_tenant_the_watch_cannot_name(tmp_path: Path) -> None:
    nvml, clock = Nvml(), Clock()
    w = watch_of(nvml, fake_proc(tmp_path, PROCS), clock)
    w.claim(edge.in_container(CID, w.proc_root))
    for i in range(12):  # a PID namespace of its own holds 1 GiB from 1001.0 to 1002.0
        tick(w, nvml, clock, 1000.0 + i * 0.25, {700: 2048 * MIB}, (1 << 30) if 4 <= i <= 8 else 0)
    got = w.result()
    assert got["unseen"] == [{"index": 0, "uuid": U0, "first": 1001.0, "last": 1002.0, "used_bytes": (1 << 30) + 6 * MIB}]
    assert got["accounted_samples"] == {U0: 12}


def test_an_nvml_failure_ends_the_watch_and_says_so(tmp_path: Path) -> None:
    nvml, clock = Nvml(), Clock()
    w = watch_of(nvml, fake_proc(tmp_path, PROCS), clock)
    nvml.broken = True
    w.tick()
    assert w.result()["error"] == "NVML failed while watching: RuntimeError: GPU is lost"


def test_the_sampler_carries_the_watch() -> None:
    from tests.unit.edges.test_payload_hostinfo import FakeNvml

    class WithProcesses(FakeNvml, Nvml):
        def __init__(self) -> None:
            FakeNvml.__init__(self)
            Nvml.__init__(self)

        def nvmlDeviceGetMemoryInfo(self, h: int, version: Any = None) -> SimpleNamespace:
            return FakeNvml.nvmlDeviceGetMemoryInfo(self, h) if version is None else Nvml.nvmlDeviceGetMemoryInfo(self, h, version)

        def nvmlDeviceGetUUID(self, h: int) -> str:
            return Nvml.nvmlDeviceGetUUID(self, h)

    sampler = hostinfo.NvmlSampler(indices=[U0], nvml=WithProcesses(), watch=True)
    sampler._open()
    sampler.sample_once()
    got = sampler.result()
    assert [g["index"] for g in got["gpus"]] == [0] and got["watch"]["samples"] == 1


# -- the verdict -------------------------------------------------------------------------------------------------

def entry(cid: str, status: str, start: float, end: float, detail: str = "34% of baseline") -> dict[str, Any]:
    return {"id": cid, "title": cid, "status": status, "value": 270.0, "threshold": 588.0, "unit": "TFLOP/s",
            "baseline": 784.0, "percent_of_baseline": 34.0, "detail": detail, "optional": False, "duration_s": end - start,
            "window": {"start": start, "end": end}}


def report(checks: list[dict[str, Any]], payload_sharing: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    return {"checks": checks, "summary": {}, "mode": {"mode": "gpu", "gpus": 1, "gpu_checks": {}},
            "environment": {"gpus": [{"index": 0, "name": "NVIDIA H200", "uuid": U0}]},
            "sharing": payload_sharing or {"exclusive": True, "allowed": False, "foreign": [], "reason": "payload: clean"}}


def host_watch(processes: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    return {"interval_s": 0.25, "samples": 40, "largest_gap_s": 0.28, "error": None, "own_seen": True,
            "accounted_samples": {U0: 40}, "processes": processes, "unseen": []} | kw


RUN = {"index": 0, "uuid": U0, "pid": 700, "owner": "run", "name": "python3", "first": 1000.0, "last": 1010.0, "used_bytes": 3 << 30}
NEIGHBOUR = {"index": 0, "uuid": U0, "pid": 4242, "owner": "foreign", "name": "python3", "first": 1003.0, "last": 1004.0,
             "used_bytes": 2 << 30}
CHECKS = [entry("gemm.bf16", "pass", 1001.0, 1002.0), entry("gemm.fp16", "fail", 1003.2, 1003.6),
          entry("gemm.tf32", "fail", 1005.0, 1005.5), entry("matmul.bf16", "fail", 1003.2, 1003.6)]


def test_a_tenant_during_one_check_makes_that_check_alone_inconclusive() -> None:
    got = gpuwatch.join(report(CHECKS), host_watch([RUN, NEIGHBOUR]), None, allowed=False)
    assert [c["status"] for c in got["checks"]] == ["pass", "inconclusive", "fail", "fail"]
    assert got["checks"][1]["detail"] == ("inconclusive: GPU 0 shared with PID 4242 python3, 2.0 GiB during this check; "
                                          "measured: fail: 34% of baseline")
    assert got["sharing"]["exclusive"] is False
    assert got["sharing"]["foreign"] == [{"gpu": 0, "uuid": U0, "pid": 4242, "name": "python3", "used_bytes": 2 << 30,
                                          "seen": "during", "first": 1003.0, "last": 1004.0, "by": "host"}]
    assert got["summary"]["inconclusive"] == 1 and got["mode"]["gpu_checks"]["inconclusive"] == 1


def test_what_the_host_watch_writes_is_a_report_imagesmith_reads_back() -> None:
    """The host's tenants (``seen: during``; ``pid: null`` for memory no listed process holds) pass the verify report's
    schema and its parse: a shared-GPU verdict written with --json is read again by ``imagesmith report`` and the
    fleet."""
    unseen = [{"index": 0, "uuid": U0, "first": 1003.0, "last": 1004.0, "used_bytes": 1 << 30}]
    got = gpuwatch.join(report(CHECKS), host_watch([RUN, NEIGHBOUR], unseen=unseen), None, allowed=False)
    doc = json.loads((FIXTURES / "verify-gpu.json").read_text()) | {"sharing": got["sharing"]}
    loader.check_schema(doc, schemas.VERIFY_REPORT, "verify.json")
    tenants = verifyreport.parse(doc, "verify.json").sharing.foreign  # type: ignore[union-attr]
    assert [(t.pid, t.seen, t.used_bytes) for t in tenants] == [(4242, "during", 2 << 30), (None, "during", 1 << 30)]


@pytest.mark.parametrize("watch, unwatched, exclusive, reason", [
    (host_watch([RUN]), None, True,
     "the host watched every 0.25 s for the whole run (40 samples): no other process, every MiB accounted for"),
    (host_watch([RUN], largest_gap_s=2.5), None, None,
     "the host's watch paused for 2.5 s (more than 1 s) during the run"),
    (host_watch([], own_seen=False), None, None,
     "NVML on this host never listed the run's own processes (imagesmith runs in another PID namespace than the "
     "engine's containers?): its lists say nothing of others"),
    (host_watch([RUN], accounted_samples={}), None, None,
     "this driver gives no per-device memory v2 figures: memory of processes NVML does not list goes unnoticed"),
    ({"error": "NVML unavailable (NVMLError_LibraryNotFound)", "samples": 0}, None, None,
     "NVML unavailable (NVMLError_LibraryNotFound)"),
    (None, "the engine is remote (DOCKER_HOST=tcp://gpu-7:2376): NVML on this host says nothing of its GPUs", None,
     "the engine is remote (DOCKER_HOST=tcp://gpu-7:2376): NVML on this host says nothing of its GPUs"),
])
def test_exclusive_only_when_the_host_watched_the_whole_run(watch: Any, unwatched: Any, exclusive: Any, reason: str) -> None:
    got = gpuwatch.join(report(CHECKS[:1]), watch, unwatched, allowed=False)
    assert (got["sharing"]["exclusive"], got["sharing"]["reason"]) == (exclusive, reason)


def test_unseen_memory_counts_only_where_the_watch_saw_the_run_itself() -> None:
    unseen = [{"index": 0, "uuid": U0, "first": 1003.0, "last": 1004.0, "used_bytes": 1 << 30}]
    seeing = gpuwatch.join(report(CHECKS), host_watch([RUN], unseen=unseen), None, allowed=False)
    assert seeing["sharing"]["exclusive"] is False and seeing["checks"][1]["status"] == "inconclusive"
    blind = gpuwatch.join(report(CHECKS), host_watch([], unseen=unseen, own_seen=False), None, allowed=False)
    assert blind["sharing"]["exclusive"] is None  # that memory may be the run's own


def test_without_a_watch_the_payloads_evidence_still_counts() -> None:
    seen = {"exclusive": False, "allowed": False, "reason": "x", "foreign": [
        {"gpu": 0, "uuid": U0, "pid": None, "name": None, "used_bytes": 2 << 30, "seen": "during", "first": 1003.0,
         "last": 1004.0, "by": "payload"}]}
    got = gpuwatch.join(report(CHECKS, seen), None, "the engine is remote", allowed=False)
    assert got["sharing"]["exclusive"] is False and [c["status"] for c in got["checks"]][:3] == ["pass", "inconclusive", "fail"]


def test_the_host_names_the_tenant_of_a_check_the_payload_found_inconclusive() -> None:
    unnamed = entry("gemm.fp16", "inconclusive", 1003.2, 1003.6,
                    "inconclusive: GPU 0: 2.6 GiB held by processes this run cannot see during this check; measured: fail: 34%")
    got = gpuwatch.join(report([unnamed]), host_watch([RUN, NEIGHBOUR]), None, allowed=False)
    assert got["checks"][0]["detail"] == ("inconclusive: GPU 0 shared with PID 4242 python3, 2.0 GiB during this check; "
                                          "measured: fail: 34%")


def test_a_cpu_run_is_left_as_it_is_and_gpus_get_their_host_index() -> None:
    cpu = {"checks": [], "environment": {"gpus": []}, "sharing": {"exclusive": None}}
    assert gpuwatch.join(cpu, host_watch([]), None, allowed=False) is cpu
    rep = report([]) | {"environment": {"gpus": [{"index": 0, "uuid": U0}]}}
    got = gpuwatch.host_indexes(rep, {"gpus": [{"index": 2, "uuid": U0}, {"index": 3, "uuid": "GPU-other"}]})
    assert got["environment"]["gpus"] == [{"index": 0, "uuid": U0, "host_index": 2}]


class Live:
    def __init__(self, hits: list[dict[str, Any]]) -> None:
        self.hits = hits

    def foreign_between(self, start: float, end: float) -> list[dict[str, Any]]:
        return self.hits


@pytest.mark.parametrize("line, hits, shown", [
    ("[ 3/7] gemm.fp16                fail        262.0 TFLOP/s    0.4s  fp16 34% of baseline", [NEIGHBOUR],
     ["[ 3/7] gemm.fp16                inconclusive        262.0 TFLOP/s    0.4s  fp16 34% of baseline (the host saw GPU 0 "
      "shared with PID 4242 python3, 2.0 GiB during this check)"]),
    ("[ 3/7] gemm.fp16                fail        262.0 TFLOP/s    0.4s  fp16 34% of baseline", [],
     ["[ 3/7] gemm.fp16                fail        262.0 TFLOP/s    0.4s  fp16 34% of baseline"]),
    ("[ 1/7] matmul.bf16              fail        0.5    0.4s  wrong", [NEIGHBOUR],  # not a throughput check
     ["[ 1/7] matmul.bf16              fail        0.5    0.4s  wrong"]),
    ("imagesmith payload: 2 pass, 0 warn, 0 fail, 0 skip, 5 inconclusive in 7.3 s; GPUs exclusive to this run -> OK", [], []),
    ("imagesmith payload: tier standard, 7 checks; python 3.12.3", [], ["imagesmith payload: tier standard, 7 checks; python 3.12.3"]),
])
def test_live_lines_in_the_hosts_words(line: str, hits: list[dict[str, Any]], shown: list[str]) -> None:
    printed: list[str] = []
    live = gpuwatch.live(printed.append, lambda: Live(hits))
    assert live is not None
    live(line)
    assert printed == shown
    assert gpuwatch.live(None, lambda: Live(hits)) is None
