"""The run's watch over its GPUs: two NVML snapshots and a sampler between them (sharing.py holds the rule)."""

from __future__ import annotations

import copy
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .context import Context
from .environment import nvml_uuid
from .nvml import open_nvml
from .sharing import (
    INTERVAL_S,
    MemoryLedger,
    NvmlSource,
    Snapshot,
    Verdict,
    Watched,
    identify_by_growth,
    judge,
    own_pids,
    proc_name,
    take,
    unaccounted,
)

NO_NVML = "libnvidia-ml.so.1 is not loadable here (no NVIDIA driver visible)"
MEASURED_BY = (f"the payload: NVML process lists and device memory every {INTERVAL_S:g} s from before its first CUDA "
               "context to after its last check")


class SharingWatch:
    """begin() before the first CUDA context, end() after the last check, verdict() for the report;
    foreign_now() for judging a check as it ends."""

    def __init__(self, ctx: Context, source: Any = None, clock: Callable[[], float] = time.time,
                 interval_s: float = INTERVAL_S, me: Optional[int] = None, proc_root: str = "/proc") -> None:
        self.ctx, self.source, self.clock, self.interval_s = ctx, source, clock, interval_s
        self.me, self.proc_root = os.getpid() if me is None else me, proc_root
        self.start: Optional[Snapshot] = None
        self.result: Optional[Verdict] = None
        self.end_snapshot: Optional[Snapshot] = None
        self.watched = Watched()
        self._uuids: List[str] = []
        self._owners: Dict[int, bool] = {}
        self._visible: Optional[Dict[str, int]] = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # -- the watch ---------------------------------------------------------------------------
    def begin(self) -> None:
        if self.source is None:
            nvml = open_nvml()
            self.source = NvmlSource(nvml) if nvml is not None else None
        self.start = take(self.source, self.clock) if self.source is not None else Snapshot(error=NO_NVML, t=self.clock())
        if self.source is None or self.start.error:
            return
        self._uuids = sorted({p.uuid for p in self.start.procs} | set(self.start.utilization))
        self.sample()  # the first sample with the start snapshot: nothing of ours holds memory yet
        self._thread = threading.Thread(target=self._run, name="imagesmith-sharing-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if not self.sample():
                return

    def sample(self) -> bool:
        """One sample of every device: listed tenants and unaccounted memory; False once NVML failed."""
        t = self.clock()
        try:
            readings = [(uuid, *self._read(uuid)) for uuid in self._uuids]
        except Exception as exc:  # a device lost, NVML gone: the watch ends here, and says so
            with self._lock:
                self.watched.error = f"NVML failed while watching: {type(exc).__name__}: {exc}"
            return False
        with self._lock:
            for uuid, used, listing in readings:
                for pid, held in listing:
                    if self._ours(pid):
                        self.watched.own_listed = True
                    else:
                        self.watched.see(uuid, pid, held, t, None if (uuid, pid) in self.watched.listed else proc_name(pid, self.proc_root))
                self.watched.ledgers.setdefault(uuid, MemoryLedger()).feed(t, unaccounted(used, listing))
            self.watched.tick(t)
        return True

    def _read(self, uuid: str) -> Tuple[List[Optional[int]], List[Tuple[int, Optional[int]]]]:
        memory = getattr(self.source, "memory_used", None)
        before = memory(uuid) if memory is not None else None
        listing = self.source.processes(uuid)
        after = memory(uuid) if memory is not None else None
        return [before, after], listing

    def _ours(self, pid: int) -> bool:
        """This payload or a descendant (decided when first listed, while its parent still lives)."""
        if pid not in self._owners:
            ours = own_pids(self.me, self.proc_root)
            self._owners[pid] = pid in ours
        return self._owners[pid]

    def end(self) -> None:
        """Stop sampling; the end snapshot and the verdict, with this process's CUDA contexts still alive."""
        if self.start is None or self.result is not None:
            return
        self._stop_sampler()
        self.end_snapshot = take(self.source, self.clock) if self.source is not None else Snapshot(error=NO_NVML, t=self.clock())
        if self.source is not None and not self.end_snapshot.error and not self.start.error:
            self.sample()  # the last sample beside the end snapshot
        grow = self._grower()
        handshake = None if grow is None or self.source is None else (
            lambda uuid: identify_by_growth(self.source, uuid, grow(uuid)))
        self.result = judge(self.start, self.end_snapshot, self.visible(), own_pids(self.me, self.proc_root),
                            self.ctx.config.allow_shared_gpu, handshake, watched=self._watched_or_none())

    def _stop_sampler(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _watched_or_none(self) -> Optional[Watched]:
        with self._lock:
            return copy.deepcopy(self.watched) if self.watched.samples or self.watched.error else None

    # -- what the run reports ----------------------------------------------------------------
    def verdict(self) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """(the report's sharing key, what environment.gpu_sharing says of how it was measured)."""
        result = self.result
        if result is None:  # the watchdog reports a hung run: no end snapshot, no marker allocation
            start = self.start or Snapshot(error="the run stopped before the start snapshot")
            result = judge(start, Snapshot(error="the run stopped before the end snapshot"), self._visible_safe(),
                           own_pids(self.me, self.proc_root), self.ctx.config.allow_shared_gpu, watched=self._watched_or_none())
        end = self.end_snapshot or Snapshot()
        w = self.watched
        detail = {"measured_by": MEASURED_BY,
                  "samples": w.samples, "largest_gap_s": round(w.largest_gap_s, 3),
                  "own_processes_listed": w.own_listed,
                  "memory_accounted_samples": {u: ledger.samples for u, ledger in sorted(w.ledgers.items())},
                  "utilization_pct": {"start": dict(self.start.utilization) if self.start else {},
                                      "end": dict(end.utilization)},
                  "notes": list(result.notes) + ([w.error] if w.error else [])}
        return result.sharing, detail

    def foreign_now(self) -> List[Dict[str, Any]]:
        """The tenants seen so far on the GPUs this run uses (for judging a check as it ends)."""
        visible = self._visible_safe()
        if not visible or self.start is None:
            return []
        with self._lock:
            watched = copy.deepcopy(self.watched)
        ours = {pid for pid, mine in self._owners.items() if mine} | {self.me}
        now = judge(self.start, Snapshot(t=self.clock()), visible, ours, self.ctx.config.allow_shared_gpu, watched=watched)
        return list(now.sharing["foreign"])

    def visible(self) -> Dict[str, int]:
        """NVML UUID -> the payload's GPU index, for every GPU the run could use."""
        if self._visible is not None:
            return self._visible
        if self.ctx.gpu_count == 0:
            return {}
        out = {}
        for i in range(self.ctx.gpu_count):
            uuid = nvml_uuid(self.ctx.torch.cuda.get_device_properties(i))
            if uuid is None:
                return {}
            out[uuid] = i
        self._visible = out
        return out

    def _visible_safe(self) -> Dict[str, int]:
        try:
            return self.visible()
        except Exception:
            return {}

    def _grower(self) -> Optional[Callable[[str], Callable[[int], Callable[[], None]]]]:
        """uuid -> (bytes -> release): a fresh allocation on that GPU, for identify_by_growth."""
        visible = self._visible_safe()
        if not visible:
            return None
        torch = self.ctx.torch

        def on(uuid: str) -> Callable[[int], Callable[[], None]]:
            def grow(nbytes: int) -> Callable[[], None]:
                torch.cuda.empty_cache()  # a fresh segment, not one from the allocator's cache
                buf = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{visible[uuid]}")
                torch.cuda.synchronize(visible[uuid])

                def release() -> None:
                    nonlocal buf
                    del buf
                    torch.cuda.empty_cache()
                return release
            return grow
        return on
