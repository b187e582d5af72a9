"""gpu.topology: NVLink / PCIe / NUMA between the GPUs, as NVML reports them (no torch)."""

from __future__ import annotations

import os
from typing import Dict, List, Optional

from ..context import Context
from ..nvml import open_nvml
from ..registry import check
from ..results import Result, outcome, skipped
from ..topology import NvmlTopologySource, measure, numa_map

NODES = "/sys/devices/system/node"


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        return None


def numa_of_cpu() -> Dict[int, int]:
    try:
        nodes: List[int] = sorted(int(n[4:]) for n in os.listdir(NODES) if n.startswith("node") and n[4:].isdigit())
    except OSError:
        nodes = []
    return numa_map(_read, nodes)


@check("gpu.topology", "GPU pairs (NVLink, PCIe, NUMA) and NVLink links against the model's count",
       needs="nothing")
def topology(ctx: Context) -> Result:
    nvml = open_nvml()
    if nvml is None:
        return skipped("no NVML here (libnvidia-ml.so.1 not loadable): topology not measured")
    expected = ctx.baselines.get("nvlinks") or {}
    status, detail, data = measure(NvmlTopologySource(nvml), numa_of_cpu(),
                                   lambda name: (expected.get(name) or {}).get("links"))
    return outcome(status, detail, data=data)
