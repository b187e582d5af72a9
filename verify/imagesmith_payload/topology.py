"""GPU topology from NVML, as `nvidia-smi topo -m` shows it, and its verdict (no torch here).

A source (nvml.Nvml through NvmlTopologySource, or a test double) answers:
devices() -> [(uuid, name, pci bus id)], common_ancestor(a, b) -> NVML level,
nvlinks(uuid) -> [(active or None when not supported, remote pci bus id or None)],
cpu_affinity(uuid) -> set of CPUs. numa_of_cpu maps a CPU to its NUMA node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from .judge import FAIL, PASS, SKIP, WARN

if TYPE_CHECKING:
    from .nvml import Nvml

# nvmlGpuTopologyLevel_t -> the nvidia-smi topo -m legend
LEVELS = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
Link = Tuple[Optional[bool], Optional[str]]


def matrix(source: Any, devices: Sequence[Tuple[str, str, str]],
           links: Mapping[str, Sequence[Link]]) -> Dict[str, Dict[str, str]]:
    """GPUi -> GPUj -> 'X' | 'NV18' | 'PIX' | ... : NVLinks between them where any is up, else the PCIe level."""
    bus_of = {uuid: _bus(bus) for uuid, _, bus in devices}
    out: Dict[str, Dict[str, str]] = {}
    for i, (a, _, _) in enumerate(devices):
        row = out.setdefault(f"GPU{i}", {})
        for j, (b, _, _) in enumerate(devices):
            if i == j:
                row[f"GPU{j}"] = "X"
                continue
            nv = sum(1 for up, remote in links[a] if up and remote is not None and _bus(remote) == bus_of[b])
            row[f"GPU{j}"] = f"NV{nv}" if nv else LEVELS.get(source.common_ancestor(a, b), "?")
    return out


def _bus(bus: str) -> str:
    """'00000000:1B:00.0' and '0000:1b:00.0' alike."""
    parts = bus.strip().lower().split(":")
    if len(parts) == 3 and all(c in "0123456789abcdef" for c in parts[0]) and parts[0]:
        return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}"
    return bus.strip().lower()


def link_counts(links: Sequence[Link]) -> Dict[str, int]:
    return {"up": sum(1 for up, _ in links if up), "down": sum(1 for up, _ in links if up is False),
            "unsupported": sum(1 for up, _ in links if up is None)}


def numa_nodes(cpus: Set[int], numa_of_cpu: Mapping[int, int]) -> List[int]:
    return sorted({numa_of_cpu[c] for c in cpus if c in numa_of_cpu})


def judge(devices: Sequence[Tuple[str, str, str]], links: Mapping[str, Sequence[Link]],
          affinity: Mapping[str, Set[int]], numa_of_cpu: Mapping[int, int],
          expected: Callable[[str], Optional[int]]) -> Tuple[str, str]:
    """(status, detail): links down or missing fail (between 2 or more GPUs of a model with an
    expected count); a GPU whose CPU affinity spans NUMA nodes warns."""
    if not devices:
        return SKIP, "no GPU visible to NVML"
    problems: List[str] = []
    if len(devices) >= 2:
        for i, (uuid, name, _) in enumerate(devices):
            want, got = expected(name), link_counts(links.get(uuid, ()))
            if want is None:
                continue
            if got["down"]:
                problems.append(f"GPU {i} ({name}): {got['down']} NVLink link(s) down")
            if got["up"] + got["down"] < want or got["up"] < want:
                problems.append(f"GPU {i} ({name}): {got['up']} of {want} NVLink links up")
    if problems:
        return FAIL, "; ".join(problems) + "; check the NVLink state with nvidia-smi nvlink -s (board or fabric fault)"
    crossing = [f"GPU {i} CPUs on NUMA nodes {','.join(map(str, nodes))}" for i, (uuid, _, _) in enumerate(devices)
                if len(nodes := numa_nodes(affinity.get(uuid, set()), numa_of_cpu)) > 1]
    summary = _summary(devices, links, expected)
    if crossing:
        return WARN, (f"{summary}; CPU affinity crosses NUMA nodes ({'; '.join(crossing)}): pin each rank's CPUs to "
                      "its GPU's node (numactl / the launcher's binding)")
    return PASS, f"{summary}; CPU affinity within one NUMA node"


def _summary(devices: Sequence[Tuple[str, str, str]], links: Mapping[str, Sequence[Link]],
             expected: Callable[[str], Optional[int]]) -> str:
    if len(devices) < 2:
        return "1 GPU: no peer to link"
    ups = [link_counts(links.get(u, ()))["up"] for u, _, _ in devices]
    want = {expected(n) for _, n, _ in devices} - {None}
    wanted = f" (expected {want.pop()})" if len(want) == 1 else ""
    return f"{len(devices)} GPUs, NVLink links up per GPU: {', '.join(map(str, ups))}{wanted}"


def parse_cpulist(text: str) -> Set[int]:
    """'0-3,8,10-11' -> {0, 1, 2, 3, 8, 10, 11}."""
    out: Set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def numa_map(read: Callable[[str], Optional[str]], nodes: Sequence[int]) -> Dict[int, int]:
    """CPU -> NUMA node from /sys/devices/system/node/nodeN/cpulist."""
    out: Dict[int, int] = {}
    for node in nodes:
        text = read(f"/sys/devices/system/node/node{node}/cpulist")
        for cpu in parse_cpulist(text or ""):
            out[cpu] = node
    return out


def cpulist(cpus: Set[int]) -> str:
    """{0, 1, 2, 3, 8} -> '0-3,8'."""
    out, run = [], []  # type: List[str], List[int]
    for cpu in sorted(cpus) + [-2]:
        if run and cpu != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(cpu)
    return ",".join(out)


class NvmlTopologySource:
    """The topology calls of nvml.Nvml, by device UUID."""

    def __init__(self, nvml: Nvml) -> None:
        self.nvml = nvml

    def _dev(self, uuid: str) -> Any:
        return self.nvml.handle(0, uuid)

    def devices(self) -> List[Tuple[str, str, str]]:
        handles = [self.nvml.handle(i) for i in range(self.nvml.device_count())]
        return [(self.nvml.uuid(h), self.nvml.name(h), self.nvml.pci_bus_id(h)) for h in handles]

    def common_ancestor(self, a: str, b: str) -> Optional[int]:
        return self.nvml.common_ancestor(self._dev(a), self._dev(b))

    def nvlinks(self, uuid: str) -> List[Link]:
        return list(self.nvml.nvlinks(self._dev(uuid)))

    def cpu_affinity(self, uuid: str) -> Set[int]:
        return set(self.nvml.cpu_affinity(self._dev(uuid)))


def measure(source: Any, numa_of_cpu: Mapping[int, int],
            expected: Callable[[str], Optional[int]]) -> Tuple[str, str, Dict[str, Any]]:
    """(status, detail, data) of gpu.topology: the matrix, link counts against the model's, affinity."""
    devices = source.devices()
    links = {u: source.nvlinks(u) for u, _, _ in devices}
    affinity = {u: source.cpu_affinity(u) for u, _, _ in devices}
    status, detail = judge(devices, links, affinity, numa_of_cpu, expected)
    data = {"matrix": matrix(source, devices, links),
            "nvlinks": {f"GPU{i}": dict(link_counts(links[u]), expected=expected(n)) for i, (u, n, _) in enumerate(devices)},
            "cpu_affinity": {f"GPU{i}": cpulist(affinity[u]) for i, (u, _, _) in enumerate(devices)},
            "numa_nodes": {f"GPU{i}": numa_nodes(affinity[u], numa_of_cpu) for i, (u, _, _) in enumerate(devices)}}
    return status, detail, data
