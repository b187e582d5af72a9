"""gpu.topology's rule (verify/imagesmith_payload/topology.py) with NVML doubles: no torch, no driver."""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional, Set, Tuple

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "verify"))

from imagesmith_payload import topology
from imagesmith_payload.baselines import load_baselines

H200 = "NVIDIA H200"
BUS = {"GPU-a": "00000000:1B:00.0", "GPU-b": "00000000:43:00.0", "GPU-c": "00000000:52:00.0"}
NUMA = {c: 0 for c in range(0, 8)} | {c: 1 for c in range(8, 16)}
FIX = "; check the NVLink state with nvidia-smi nvlink -s (board or fabric fault)"


def links_to(peer: str, up: int, down: int = 0, unsupported: int = 0) -> List[Tuple[Optional[bool], Optional[str]]]:
    remote = "0000:" + BUS[peer].split(":", 1)[1].lower()  # NVML's remote bus id may use a short domain
    return [(True, remote)] * up + [(False, remote)] * down + [(None, None)] * unsupported


class Source:
    """An NVML double: devices, links, a PCIe level for every pair, CPU affinity."""

    def __init__(self, devices: List[str], links: Dict[str, Any], affinity: Dict[str, Set[int]], level: int = 40,
                 name: str = H200) -> None:
        self.uuids, self.links, self.affinity, self.level, self.name = devices, links, affinity, level, name

    def devices(self) -> List[Tuple[str, str, str]]:
        return [(u, self.name, BUS[u]) for u in self.uuids]

    def common_ancestor(self, a: str, b: str) -> int:
        return self.level

    def nvlinks(self, uuid: str) -> List[Tuple[Optional[bool], Optional[str]]]:
        return list(self.links.get(uuid, []))

    def cpu_affinity(self, uuid: str) -> Set[int]:
        return self.affinity.get(uuid, set(range(8)))


def expected(name: str) -> Optional[int]:
    return (load_baselines().get("nvlinks", {}).get(name) or {}).get("links")


@pytest.mark.parametrize("source, status, detail", [
    (Source(["GPU-a", "GPU-b"], {"GPU-a": links_to("GPU-b", 18), "GPU-b": links_to("GPU-a", 18)}, {}), "pass",
     "2 GPUs, NVLink links up per GPU: 18, 18 (expected 18); CPU affinity within one NUMA node"),
    (Source(["GPU-a", "GPU-b"], {"GPU-a": links_to("GPU-b", 16, down=2), "GPU-b": links_to("GPU-a", 18)}, {}), "fail",
     f"GPU 0 (NVIDIA H200): 2 NVLink link(s) down; GPU 0 (NVIDIA H200): 16 of 18 NVLink links up{FIX}"),
    (Source(["GPU-a", "GPU-b"], {"GPU-a": links_to("GPU-b", 0, unsupported=18), "GPU-b": links_to("GPU-a", 18)}, {}),
     "fail", f"GPU 0 (NVIDIA H200): 0 of 18 NVLink links up{FIX}"),
    (Source(["GPU-a", "GPU-b"], {"GPU-a": links_to("GPU-b", 18), "GPU-b": links_to("GPU-a", 18)},
            {"GPU-b": {6, 7, 8, 9}}), "warn",
     "2 GPUs, NVLink links up per GPU: 18, 18 (expected 18); CPU affinity crosses NUMA nodes (GPU 1 CPUs on NUMA "
     "nodes 0,1): pin each rank's CPUs to its GPU's node (numactl / the launcher's binding)"),
    # one GPU (the device machine: every link 'Not Supported'): no peer, nothing to link
    (Source(["GPU-a"], {"GPU-a": links_to("GPU-b", 0, unsupported=18)}, {"GPU-a": set(range(16))}), "warn",
     "1 GPU: no peer to link; CPU affinity crosses NUMA nodes (GPU 0 CPUs on "
     "NUMA nodes 0,1): pin each rank's CPUs to its GPU's node (numactl / the launcher's binding)"),
    (Source(["GPU-a"], {}, {"GPU-a": set(range(8))}), "pass", "1 GPU: no peer to link; CPU affinity within one NUMA node"),
    # a model without an expected count (PCIe cards): the matrix only
    (Source(["GPU-a", "GPU-b"], {}, {}, level=30, name="NVIDIA H100 PCIe"), "pass",
     "2 GPUs, NVLink links up per GPU: 0, 0; CPU affinity within one NUMA node"),
    (Source([], {}, {}), "skip", "no GPU visible to NVML"),
])
def test_topology_verdict(source: Source, status: str, detail: str) -> None:
    got_status, got_detail, _ = topology.measure(source, NUMA, expected)
    assert (got_status, got_detail) == (status, detail)


def test_the_matrix_reads_like_nvidia_smi_topo() -> None:
    source = Source(["GPU-a", "GPU-b", "GPU-c"], {"GPU-a": links_to("GPU-b", 18), "GPU-b": links_to("GPU-a", 18)},
                    {"GPU-c": {8, 9, 10, 11}}, level=50)
    _, _, data = topology.measure(source, NUMA, expected)
    assert data["matrix"] == {"GPU0": {"GPU0": "X", "GPU1": "NV18", "GPU2": "SYS"},
                              "GPU1": {"GPU0": "NV18", "GPU1": "X", "GPU2": "SYS"},
                              "GPU2": {"GPU0": "SYS", "GPU1": "SYS", "GPU2": "X"}}
    assert data["nvlinks"]["GPU0"] == {"up": 18, "down": 0, "unsupported": 0, "expected": 18}
    assert (data["cpu_affinity"]["GPU2"], data["numa_nodes"]["GPU2"]) == ("8-11", [1])


@pytest.mark.parametrize("text, cpus", [("0-3,8,10-11\n", {0, 1, 2, 3, 8, 10, 11}), ("", set()), ("5", {5})])
def test_cpulists(text: str, cpus: Set[int]) -> None:
    assert topology.parse_cpulist(text) == cpus
    assert topology.parse_cpulist(topology.cpulist(cpus)) == cpus
