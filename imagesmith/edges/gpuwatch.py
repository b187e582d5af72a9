"""The host's watch over the GPUs of a verify run (NVML through pynvml, on the engine's own host).

From inside a container the payload sees only its own PID namespace; the host sees every process.
:class:`ProcessWatch` samples, with :class:`~imagesmith.edges.hostinfo.NvmlSampler`'s every tick
(250 ms), each watched GPU's compute and graphics processes with their memory, per-process SM
utilization where the driver gives it, and the device's used memory (memory v2). A process is the
run's own when the owner test says so (:func:`in_container`: its cgroup names the container;
:func:`descendant_of`: the payload's process tree in ``--local`` mode); every other one is foreign,
with PID, name, memory and first and last time seen (wall clock, the payload's window clock). Memory
no listed process holds, for a second or more, is a tenant this watch cannot list (the payload's
memory ledger, the same code). Until the owner test is set (before the container exists) every
process is foreign: nothing of the run is on the GPU yet.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from imagesmith.resources import payload_module

Owner = Callable[[int], bool]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_proc(pid: int, name: str, proc_root: str = "/proc") -> str | None:
    """``/proc/PID/NAME`` (comm, cgroup, stat) as text, at most 64 KiB; None when it cannot be read."""
    try:
        with open(os.path.join(proc_root, str(pid), name), encoding="utf-8", errors="replace") as fh:
            return fh.read(65536)
    except OSError:
        return None


def in_container(container_id: str, proc_root: str = "/proc") -> Owner:
    """A PID is the container's when its cgroup path names the container's full ID (Docker's
    ``/docker/<id>`` or ``docker-<id>.scope``, Podman's ``libpod-<id>.scope``)."""
    def owner(pid: int) -> bool:
        text = read_proc(pid, "cgroup", proc_root)
        return bool(container_id) and text is not None and container_id in text
    return owner


def descendant_of(root: int, proc_root: str = "/proc") -> Owner:
    """A PID is the run's when it is ``root`` or its parent chain reaches ``root`` (``--local``)."""
    def owner(pid: int) -> bool:
        seen: set[int] = set()
        while pid > 1 and pid not in seen:
            if pid == root:
                return True
            seen.add(pid)
            stat = read_proc(pid, "stat", proc_root)
            try:
                pid = int(stat[stat.rindex(")") + 2:].split()[1]) if stat else 0  # "pid (comm) state ppid ..."
            except (ValueError, IndexError):
                return False
        return False
    return owner


@dataclass
class Seen:
    """One process on one GPU as the watch saw it."""

    index: int
    uuid: str
    pid: int
    owner: str  # run | foreign
    name: str | None
    first: float
    last: float
    used_bytes: int | None = None
    sm_util_max: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "uuid": self.uuid, "pid": self.pid, "owner": self.owner, "name": self.name,
                "first": round(self.first, 3), "last": round(self.last, 3), "used_bytes": self.used_bytes,
                "sm_util_max": self.sm_util_max}


@dataclass
class ProcessWatch:
    """Processes and unaccounted memory of some GPUs, one :meth:`tick` at a time (NvmlSampler's thread)."""

    nvml: Any
    devices: Mapping[int, tuple[Any, str]]  # host NVML index -> (handle, uuid)
    interval_s: float = 0.25
    clock: Callable[[], float] = time.time
    proc_root: str = "/proc"
    owner: Owner | None = None
    seen: dict[tuple[str, int], Seen] = field(default_factory=dict)
    samples: int = 0
    first: float | None = None
    last: float | None = None
    largest_gap_s: float = 0.0
    error: str | None = None
    _ledgers: dict[str, Any] = field(default_factory=dict)
    _util_ts: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def claim(self, owner: Owner) -> None:
        """From now on, processes ``owner`` accepts are the run's (set once the container exists)."""
        with self._lock:
            self.owner = owner

    def tick(self) -> None:
        """One sample of every watched GPU; an NVML failure ends the watch (and is said)."""
        if self.error is not None:
            return
        t = self.clock()
        try:
            readings = [(index, uuid, *self._read(handle, uuid)) for index, (handle, uuid) in self.devices.items()]
        except Exception as exc:  # a GPU lost, NVML gone: the watch ends here
            with self._lock:
                self.error = f"NVML failed while watching: {type(exc).__name__}: {exc}"
            return
        sharing = payload_module("sharing")
        with self._lock:
            for index, uuid, used, listing, util in readings:
                for pid, held in listing:
                    self._see(index, uuid, pid, held, util.get(pid), t)
                self._ledgers.setdefault(uuid, sharing.MemoryLedger()).feed(t, sharing.unaccounted(used, listing))
            if self.last is not None:
                self.largest_gap_s = max(self.largest_gap_s, t - self.last)
            self.first = t if self.first is None else self.first
            self.last, self.samples = t, self.samples + 1

    def _see(self, index: int, uuid: str, pid: int, held: int | None, util: int | None, t: float) -> None:
        row = self.seen.get((uuid, pid))
        if row is None:  # decided once, when first listed (before the owner test is set, nothing is the run's)
            mine = self.owner is not None and self.owner(pid)
            name = read_proc(pid, "comm", self.proc_root)
            row = self.seen[(uuid, pid)] = Seen(index, uuid, pid, "run" if mine else "foreign",
                                                name.strip()[:64] if name else None, t, t)
        row.last = t
        if held is not None and (row.used_bytes is None or held > row.used_bytes):
            row.used_bytes = held
        if util is not None and (row.sm_util_max is None or util > row.sm_util_max):
            row.sm_util_max = util

    def _read(self, handle: Any, uuid: str) -> tuple[list[int | None], list[tuple[int, int | None]], dict[int, int]]:
        before = self._memory(handle)
        listing: dict[int, int | None] = {}
        for fn in (self.nvml.nvmlDeviceGetComputeRunningProcesses, self.nvml.nvmlDeviceGetGraphicsRunningProcesses):
            for proc in fn(handle):
                used = getattr(proc, "usedGpuMemory", None)
                listing[int(proc.pid)] = used if listing.get(int(proc.pid)) is None else listing[int(proc.pid)]
        after = self._memory(handle)
        return [before, after], sorted(listing.items()), self._utilization(handle, uuid)

    def _memory(self, handle: Any) -> int | None:
        """Bytes in use by processes (memory v2, the driver's reserve excluded); None where the driver has no v2."""
        try:
            return int(self.nvml.nvmlDeviceGetMemoryInfo(handle, version=self.nvml.nvmlMemory_v2).used)
        except Exception:  # an older pynvml (no version), a driver without v2
            return None

    def _utilization(self, handle: Any, uuid: str) -> dict[int, int]:
        """Per-process SM utilization since the last sample, where the driver gives it (none when idle)."""
        try:
            got = self.nvml.nvmlDeviceGetProcessUtilization(handle, self._util_ts.get(uuid, 0))
        except Exception:  # NVMLError_NotFound: no sample since then; NotSupported on some GPUs
            return {}
        out: dict[int, int] = {}
        for s in got:
            out[int(s.pid)] = max(out.get(int(s.pid), 0), int(s.smUtil))
            self._util_ts[uuid] = max(self._util_ts.get(uuid, 0), int(s.timeStamp))
        return out

    # -- what it saw ----------------------------------------------------------------------------
    def foreign_between(self, start: float, end: float) -> list[dict[str, Any]]:
        """Foreign processes seen, and unaccounted memory held, at some time in [start, end] (live, for progress lines)."""
        margin = payload_module("sharing").MARGIN_S
        with self._lock:
            rows = [s.to_json() for s in self.seen.values() if s.owner == "foreign"]
            rows += [{"index": self._index(uuid), "uuid": uuid, "pid": None, "name": None, "first": a, "last": b,
                      "used_bytes": most} for uuid, ledger in self._ledgers.items()
                     for a, b, most in ledger.episodes() if self.own_seen()]
        return [r for r in rows if r["first"] - margin <= end and r["last"] + margin >= start]

    def own_seen(self) -> bool:
        """The watch listed a process of the run: its lists speak of the run's PID namespace."""
        return any(s.owner == "run" for s in self.seen.values())

    def _index(self, uuid: str) -> int:
        return next((i for i, (_h, u) in self.devices.items() if u == uuid), -1)

    def result(self) -> dict[str, Any]:
        """What the verify report's ``nvml.watch`` holds (imagesmith.stages.verify.gpuwatch judges it)."""
        with self._lock:
            unseen = [{"index": self._index(uuid), "uuid": uuid, "first": round(a, 3), "last": round(b, 3), "used_bytes": most}
                      for uuid, ledger in sorted(self._ledgers.items()) for a, b, most in ledger.episodes()]
            return {"interval_s": self.interval_s, "samples": self.samples, "first": self.first, "last": self.last,
                    "largest_gap_s": round(self.largest_gap_s, 3), "error": self.error, "owner_set": self.owner is not None,
                    "own_seen": self.own_seen(),
                    "accounted_samples": {uuid: ledger.samples for uuid, ledger in sorted(self._ledgers.items())},
                    "processes": [s.to_json() for s in sorted(self.seen.values(), key=lambda s: (s.index, s.first, s.pid))],
                    "unseen": unseen}


def watch_devices(nvml: Any, wanted: Sequence[str] | None) -> dict[int, tuple[Any, str]]:
    """Host NVML index -> (handle, uuid) of the GPUs ``wanted`` (NVML indexes or UUIDs; None: every GPU)."""
    count = int(nvml.nvmlDeviceGetCount())
    every = {i: nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)}
    found = {i: (h, _text(nvml.nvmlDeviceGetUUID(h))) for i, h in every.items()}
    if wanted is None:
        return found
    keep = {w.strip() for w in wanted if w.strip()}
    return {i: (h, u) for i, (h, u) in found.items() if str(i) in keep or u in keep or u.removeprefix("GPU-") in keep}
