"""NVML through ctypes (images carry no pynvml): driver version and sensors."""

from __future__ import annotations

import ctypes
import threading
import time
from typing import Any, Dict, List, Optional, Set, Tuple

from .judge import cuda_version_string, decode_throttle_reasons
from .parsers import parse_proc_driver_version

LIBRARY = "libnvidia-ml.so.1"
NVML_SUCCESS = 0
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_VALUE_NOT_AVAILABLE = 2**64 - 1  # usedGpuMemory where the driver will not say (e.g. no permission)
CLOCK_SM, CLOCK_MEM = 1, 2
TEMPERATURE_GPU = 0
NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS


class Nvml:
    """A thin, typed view of the few NVML calls the payload uses."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib

    def _call(self, name: str, *args: Any) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != NVML_SUCCESS:
            raise OSError(f"{name} failed with NVML error {rc}")

    def driver_version(self) -> str:
        buf = ctypes.create_string_buffer(96)
        self._call("nvmlSystemGetDriverVersion", buf, ctypes.c_uint(96))
        return buf.value.decode()

    def cuda_driver_version(self) -> str:
        code = ctypes.c_int()
        self._call("nvmlSystemGetCudaDriverVersion_v2", ctypes.byref(code))
        return cuda_version_string(code.value)

    def handle(self, index: int, uuid: Optional[str] = None) -> ctypes.c_void_p:
        """Device handle by UUID (CUDA and NVML order may differ), else by index."""
        dev = ctypes.c_void_p()
        if uuid:
            key = uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
            if self.lib.nvmlDeviceGetHandleByUUID(key.encode(), ctypes.byref(dev)) == NVML_SUCCESS:
                return dev
        self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(dev))
        return dev

    def _uint(self, name: str, dev: ctypes.c_void_p, *args: Any) -> Optional[int]:
        out = ctypes.c_uint()
        rc = getattr(self.lib, name)(dev, *args, ctypes.byref(out))
        return out.value if rc == NVML_SUCCESS else None

    def throttle_mask(self, dev: ctypes.c_void_p) -> Optional[int]:
        out = ctypes.c_ulonglong()
        for name in ("nvmlDeviceGetCurrentClocksEventReasons",
                     "nvmlDeviceGetCurrentClocksThrottleReasons"):
            fn = getattr(self.lib, name, None)
            if fn is not None and fn(dev, ctypes.byref(out)) == NVML_SUCCESS:
                return int(out.value)
        return None

    def sample(self, dev: ctypes.c_void_p) -> Dict[str, Any]:
        """Clocks (MHz), temperature (C), power (W) and clocks-event reasons now."""
        power = self._uint("nvmlDeviceGetPowerUsage", dev)
        mask = self.throttle_mask(dev)
        return {
            "sm_clock_mhz": self._uint("nvmlDeviceGetClockInfo", dev, ctypes.c_int(CLOCK_SM)),
            "mem_clock_mhz": self._uint("nvmlDeviceGetClockInfo", dev, ctypes.c_int(CLOCK_MEM)),
            "temperature_c": self._uint("nvmlDeviceGetTemperature", dev,
                                        ctypes.c_int(TEMPERATURE_GPU)),
            "power_w": None if power is None else power / 1000.0,
            "throttle": [] if mask is None else list(decode_throttle_reasons(mask)),
        }


    def device_count(self) -> int:
        out = ctypes.c_uint()
        self._call("nvmlDeviceGetCount_v2", ctypes.byref(out))
        return int(out.value)

    def uuid(self, dev: ctypes.c_void_p) -> str:
        buf = ctypes.create_string_buffer(96)
        self._call("nvmlDeviceGetUUID", dev, buf, ctypes.c_uint(96))
        return buf.value.decode()

    def utilization_pct(self, dev: ctypes.c_void_p) -> Optional[int]:
        """The GPU's busy percentage over the driver's last sample period."""
        rates = Utilization()
        fn = getattr(self.lib, "nvmlDeviceGetUtilizationRates", None)
        if fn is None or fn(dev, ctypes.byref(rates)) != NVML_SUCCESS:
            return None
        return int(rates.gpu)

    def memory(self, dev: ctypes.c_void_p) -> Optional[Tuple[int, int]]:
        """(bytes in use by processes, bytes the driver reserves) from nvmlDeviceGetMemoryInfo_v2; None where
        the driver has no v2 (its v1 ``used`` counts the reserve too, so nobody's share can be told from it).
        Unlike the process lists this is the device's, whatever PID namespace asks."""
        fn = getattr(self.lib, "nvmlDeviceGetMemoryInfo_v2", None)
        info = MemoryV2(version=NVML_MEMORY_V2)
        if fn is None or fn(dev, ctypes.byref(info)) != NVML_SUCCESS:
            return None
        return int(info.used), int(info.reserved)

    def processes(self, dev: ctypes.c_void_p) -> List[Tuple[int, Optional[int]]]:
        """(pid, used bytes or None) of every compute and graphics process on the device.
        PIDs are in the PID namespace the driver sees (the host's, inside a container)."""
        found: Dict[int, Optional[int]] = {}
        for kind in ("Compute", "Graphics"):
            for pid, used in self._process_list(dev, kind):
                found[pid] = used if found.get(pid) is None else found[pid]
        return sorted(found.items())

    def _process_list(self, dev: ctypes.c_void_p, kind: str) -> List[Tuple[int, Optional[int]]]:
        for suffix in ("_v3", "_v2"):  # both take nvmlProcessInfo_v2_t
            fn = getattr(self.lib, f"nvmlDeviceGet{kind}RunningProcesses{suffix}", None)
            if fn is not None:
                return _list_processes(fn, dev, f"nvmlDeviceGet{kind}RunningProcesses{suffix}")
        raise OSError(f"this driver's NVML has no nvmlDeviceGet{kind}RunningProcesses_v2/_v3")


    def pci_bus_id(self, dev: ctypes.c_void_p) -> str:
        info = PciInfo()
        fn = getattr(self.lib, "nvmlDeviceGetPciInfo_v3", None) or self.lib.nvmlDeviceGetPciInfo_v2
        if fn(dev, ctypes.byref(info)) != NVML_SUCCESS:
            raise OSError("nvmlDeviceGetPciInfo failed")
        bus_id: bytes = info.busId
        return bus_id.decode()

    def name(self, dev: ctypes.c_void_p) -> str:
        buf = ctypes.create_string_buffer(96)
        self._call("nvmlDeviceGetName", dev, buf, ctypes.c_uint(96))
        return buf.value.decode()

    def common_ancestor(self, a: ctypes.c_void_p, b: ctypes.c_void_p) -> Optional[int]:
        level = ctypes.c_int()
        rc = self.lib.nvmlDeviceGetTopologyCommonAncestor(a, b, ctypes.byref(level))
        return int(level.value) if rc == NVML_SUCCESS else None

    def nvlinks(self, dev: ctypes.c_void_p, count: int = NVLINK_MAX_LINKS) -> List[Tuple[Optional[bool], Optional[str]]]:
        """(active, or None where the link is not supported; the remote end's PCI bus id) per link."""
        out: List[Tuple[Optional[bool], Optional[str]]] = []
        for link in range(count):
            state, remote = ctypes.c_int(), PciInfo()
            if self.lib.nvmlDeviceGetNvLinkState(dev, ctypes.c_uint(link), ctypes.byref(state)) != NVML_SUCCESS:
                out.append((None, None))
                continue
            fn = getattr(self.lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2", None)
            ok = fn is not None and fn(dev, ctypes.c_uint(link), ctypes.byref(remote)) == NVML_SUCCESS
            out.append((bool(state.value), remote.busId.decode() if ok else None))
        return out

    def cpu_affinity(self, dev: ctypes.c_void_p, words: int = 16) -> Set[int]:
        """The CPUs NVML says are close to the device (its ideal affinity)."""
        mask = (ctypes.c_ulong * words)()
        if self.lib.nvmlDeviceGetCpuAffinity(dev, ctypes.c_uint(words), mask) != NVML_SUCCESS:
            return set()
        bits = 8 * ctypes.sizeof(ctypes.c_ulong)
        return {w * bits + b for w in range(words) for b in range(bits) if mask[w] >> b & 1}



class PciInfo(ctypes.Structure):
    """nvmlPciInfo_t (nvml.h)."""

    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint), ("bus", ctypes.c_uint),
                ("device", ctypes.c_uint), ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]


class MemoryV2(ctypes.Structure):
    """nvmlMemory_v2_t (nvml.h): used excludes the driver's reserve."""

    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong), ("reserved", ctypes.c_ulonglong),
                ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


NVML_MEMORY_V2 = ctypes.sizeof(MemoryV2) | (2 << 24)  # nvmlMemory_v2 (0x02000028)


class Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class ProcessInfo(ctypes.Structure):
    """nvmlProcessInfo_v2_t (nvml.h)."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


def _list_processes(fn: Any, dev: ctypes.c_void_p, name: str) -> List[Tuple[int, Optional[int]]]:
    size = 16
    for _ in range(4):  # the list may grow between the calls
        count = ctypes.c_uint(size)
        infos = (ProcessInfo * size)()
        rc = fn(dev, ctypes.byref(count), infos)
        if rc == NVML_SUCCESS:
            return [(int(p.pid), None if p.usedGpuMemory == NVML_VALUE_NOT_AVAILABLE else int(p.usedGpuMemory))
                    for p in infos[: count.value]]
        if rc != NVML_ERROR_INSUFFICIENT_SIZE:
            raise OSError(f"{name} failed with NVML error {rc}")
        size = max(size * 2, int(count.value) + 8)
    raise OSError(f"{name}: the process list kept growing")


_NVML: List[Optional[Nvml]] = []


def open_nvml() -> Optional[Nvml]:
    """NVML initialised once per process, or None where there is no driver."""
    if not _NVML:
        _NVML.append(_load())
    return _NVML[0]


def _load() -> Optional[Nvml]:
    try:
        lib = ctypes.CDLL(LIBRARY)
        init = getattr(lib, "nvmlInit_v2", None) or lib.nvmlInit
        if init() != NVML_SUCCESS:
            return None
        return Nvml(lib)
    except (OSError, AttributeError):
        return None


def driver_version() -> Optional[str]:
    """NVML first, then /proc/driver/nvidia/version; None without a driver."""
    nvml = open_nvml()
    if nvml is not None:
        try:
            return nvml.driver_version()
        except OSError:
            pass
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as fh:
            return parse_proc_driver_version(fh.read())
    except OSError:
        return None


class Sampler:
    """Samples NVML sensors of some devices every `interval_s` on a thread."""

    def __init__(self, nvml: Nvml, handles: Dict[int, ctypes.c_void_p],
                 interval_s: float = 0.5) -> None:
        self.nvml, self.handles, self.interval_s = nvml, handles, interval_s
        self.samples: Dict[int, List[Dict[str, Any]]] = {i: [] for i in handles}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._t0 = time.monotonic()

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            for index, dev in self.handles.items():
                sample = self.nvml.sample(dev)
                sample["t"] = round(time.monotonic() - self._t0, 2)
                self.samples[index].append(sample)
            self._stop.wait(self.interval_s)
