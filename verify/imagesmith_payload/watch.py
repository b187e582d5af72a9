"""The run's two NVML snapshots and its sharing verdict (sharing.py holds the rule)."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional, Tuple

from .context import Context
from .nvml import open_nvml
from .sharing import NvmlSource, Snapshot, Verdict, identify_by_growth, judge, own_pids, take

NO_NVML = "libnvidia-ml.so.1 is not loadable here (no NVIDIA driver visible)"


class SharingWatch:
    """begin() before the first CUDA context, end() after the last check, verdict() for the report."""

    def __init__(self, ctx: Context, source: Any = None) -> None:
        self.ctx, self.source = ctx, source
        self.start: Optional[Snapshot] = None
        self.result: Optional[Verdict] = None
        self.end_snapshot: Optional[Snapshot] = None

    def begin(self) -> None:
        if self.source is None:
            nvml = open_nvml()
            self.source = NvmlSource(nvml) if nvml is not None else None
        self.start = take(self.source) if self.source is not None else Snapshot(error=NO_NVML)

    def end(self) -> None:
        """The end snapshot and the verdict, with this process's CUDA contexts still alive."""
        if self.start is None or self.result is not None:
            return
        self.end_snapshot = take(self.source) if self.source is not None else Snapshot(error=NO_NVML)
        grow = self._grower()
        handshake = None if grow is None or self.source is None else (
            lambda uuid: identify_by_growth(self.source, uuid, grow(uuid)))
        self.result = judge(self.start, self.end_snapshot, self.visible(), own_pids(os.getpid()),
                            self.ctx.config.allow_shared_gpu, handshake)

    def verdict(self) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """(the report's sharing key, what environment.gpu_sharing says of how it was measured)."""
        result = self.result
        if result is None:  # the watchdog reports a hung run: no end snapshot, no marker allocation
            start = self.start or Snapshot(error="the run stopped before the start snapshot")
            result = judge(start, Snapshot(error="the run stopped before the end snapshot"), self._visible_safe(),
                           own_pids(os.getpid()), self.ctx.config.allow_shared_gpu)
        end = self.end_snapshot or Snapshot()
        detail = {"measured_by": "NVML compute and graphics process lists at the start and the end of the run",
                  "utilization_pct": {"start": dict(self.start.utilization) if self.start else {},
                                      "end": dict(end.utilization)},
                  "notes": list(result.notes)}
        return result.sharing, detail

    def visible(self) -> Dict[str, int]:
        """NVML UUID -> the payload's GPU index, for every GPU the run could use."""
        if self.ctx.gpu_count == 0:
            return {}
        torch, out = self.ctx.torch, {}
        for i in range(self.ctx.gpu_count):
            uuid = getattr(torch.cuda.get_device_properties(i), "uuid", None)
            if uuid is None:
                return {}
            text = str(uuid)
            out[text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"] = i
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
