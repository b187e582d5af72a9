"""Host GPUs through NVML (pynvml, from nvidia-ml-py): inventory and a sampler.

`inventory()` says which driver and GPUs the host has.  `NvmlSampler` records
per-GPU memory, utilisation, temperature, power and clocks every 250 ms on a
thread while a container runs; `result()` is JSON-ready for the verify report.
The NVML module is a constructor parameter (a seam): tests pass a fake.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from imagesmith.edges.gpuwatch import ProcessWatch, watch_devices

SERIES = ("memory_used_mib", "utilization_gpu_pct", "utilization_memory_pct",
          "temperature_c", "power_w", "sm_clock_mhz", "mem_clock_mhz")


def load_nvml() -> Any:
    import pynvml  # nvidia-ml-py

    return pynvml


@dataclass(frozen=True)
class HostGpu:
    index: int
    name: str
    uuid: str
    pci_bus_id: str
    memory_total_mib: int
    capability: Optional[str]


@dataclass(frozen=True)
class HostInfo:
    driver: Optional[str]
    cuda_driver: Optional[str]  # the newest CUDA the driver supports, e.g. "13.0"
    gpus: Tuple[HostGpu, ...] = ()
    error: Optional[str] = None  # why NVML could not be read

def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _or_none(fn: Callable[[], Any]) -> Any:
    """NVML calls some GPUs do not support (NVMLError_NotSupported) give None."""
    try:
        return fn()
    except Exception:
        return None


def cuda_version_string(code: int) -> str:
    """nvmlSystemGetCudaDriverVersion: 13000 -> '13.0'."""
    return f"{code // 1000}.{code % 1000 // 10}"


def inventory(nvml: Any = None) -> HostInfo:
    """Driver, CUDA driver version and GPUs; HostInfo.error says why not."""
    try:
        nvml = nvml or load_nvml()
        nvml.nvmlInit()
    except Exception as exc:
        return HostInfo(None, None, (), f"NVML unavailable ({type(exc).__name__}: {exc}); "
                        "no NVIDIA driver on this host?")
    try:
        count = nvml.nvmlDeviceGetCount()
        return HostInfo(_text(nvml.nvmlSystemGetDriverVersion()),
                        _or_none(lambda: cuda_version_string(nvml.nvmlSystemGetCudaDriverVersion())),
                        tuple(_gpu(nvml, i) for i in range(count)))
    finally:
        _or_none(nvml.nvmlShutdown)


def _gpu(nvml: Any, index: int) -> HostGpu:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    cap = _or_none(lambda: nvml.nvmlDeviceGetCudaComputeCapability(handle))
    return HostGpu(
        index=index,
        name=_text(nvml.nvmlDeviceGetName(handle)),
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        pci_bus_id=_text(nvml.nvmlDeviceGetPciInfo(handle).busId),
        memory_total_mib=int(nvml.nvmlDeviceGetMemoryInfo(handle).total // 2**20),
        capability=f"{cap[0]}.{cap[1]}" if cap else None,
    )


def driver_supports(host: HostInfo, toolkit_cuda: str) -> Tuple[str, str]:
    """('pass'|'warn'|'fail', why): the driver's CUDA version against an image's CUDA.

    Same rule as the payload's driver check when no knowledge-base figures are
    given: newer or equal passes; same major, older minor is minor-version
    compatibility (warn); an older major fails.
    """
    if host.cuda_driver is None:
        return "fail", host.error or "no NVIDIA driver found"
    have = tuple(int(p) for p in host.cuda_driver.split(".")[:2])
    need = tuple(int(p) for p in toolkit_cuda.split(".")[:2])
    if have >= need:
        return "pass", f"driver {host.driver} supports CUDA {host.cuda_driver} >= {toolkit_cuda}"
    if have[0] == need[0]:
        return "warn", (f"driver {host.driver} supports CUDA {host.cuda_driver} < {toolkit_cuda}: "
                        "minor-version compatibility only")
    return "fail", (f"driver {host.driver} supports CUDA {host.cuda_driver} only; the image needs "
                    f"CUDA {toolkit_cuda}: upgrade the host driver")


# --------------------------------------------------------------------- sampler
class NvmlSampler:
    """Samples GPUs on a daemon thread; use as a context manager or start()/stop(). With ``watch``, each
    tick also samples the GPUs' processes and memory (:class:`~imagesmith.edges.gpuwatch.ProcessWatch`):
    ``self.watch`` once started, its record in ``result()["watch"]``."""

    def __init__(self, indices: Optional[Sequence[int | str]] = None, interval_s: float = 0.25,
                 nvml: Any = None, clock: Callable[[], float] = time.monotonic, watch: bool = False) -> None:
        self.interval_s, self.clock = interval_s, clock
        self._nvml, self._indices, self._watch = nvml, indices, watch
        self.watch: Optional[ProcessWatch] = None
        self._handles: Dict[int, Any] = {}
        self._meta: Dict[int, Dict[str, str]] = {}
        self._series: Dict[int, Dict[str, List[Any]]] = {}
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._t0 = 0.0
        self.error: Optional[str] = None

    def __enter__(self) -> "NvmlSampler":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> None:
        try:
            self._open()
        except Exception as exc:
            self.error = f"NVML unavailable ({type(exc).__name__}: {exc})"
            return
        self._t0 = self.clock()
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
        self._thread.start()

    def _open(self) -> None:
        self._nvml = self._nvml or load_nvml()
        self._nvml.nvmlInit()
        wanted = None if self._indices is None else [str(i) for i in self._indices]
        devices = watch_devices(self._nvml, wanted)  # NVML indexes or UUIDs -> host index
        for i, (handle, uuid) in devices.items():
            self._handles[i] = handle
            self._meta[i] = {"name": _text(self._nvml.nvmlDeviceGetName(handle)), "uuid": uuid}
            self._series[i] = {k: [] for k in ("t",) + SERIES}
        if self._watch:
            self.watch = ProcessWatch(self._nvml, devices, self.interval_s)

    def stop(self) -> Dict[str, Any]:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._thread = None
            _or_none(self._nvml.nvmlShutdown)
        return self.result()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample_once()
            self._stop.wait(self.interval_s)

    def sample_once(self) -> None:
        if self.watch is not None:
            self.watch.tick()
        t = round(self.clock() - self._t0, 3)
        for i, handle in self._handles.items():
            series = self._series[i]
            series["t"].append(t)
            for key, value in read_sensors(self._nvml, handle).items():
                series[key].append(value)

    def result(self) -> Dict[str, Any]:
        gpus = [{"index": i, **self._meta[i], "series": self._series[i],
                 "summary": summarize(self._series[i])} for i in sorted(self._series)]
        out: Dict[str, Any] = {"interval_s": self.interval_s, "error": self.error, "gpus": gpus}
        if self._watch:
            out["watch"] = self.watch.result() if self.watch is not None else {"error": self.error or "not started", "samples": 0}
        return out


def read_sensors(nvml: Any, handle: Any) -> Dict[str, Any]:
    """One reading of every series; unsupported values are None."""
    util = _or_none(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
    mem = _or_none(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    power = _or_none(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
    return {
        "memory_used_mib": None if mem is None else round(mem.used / 2**20, 1),
        "utilization_gpu_pct": None if util is None else util.gpu,
        "utilization_memory_pct": None if util is None else util.memory,
        "temperature_c": _or_none(lambda: nvml.nvmlDeviceGetTemperature(
            handle, nvml.NVML_TEMPERATURE_GPU)),
        "power_w": None if power is None else power / 1000.0,
        "sm_clock_mhz": _or_none(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
        "mem_clock_mhz": _or_none(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)),
    }


def summarize(series: Dict[str, List[Any]]) -> Dict[str, Any]:
    """Per series: max and mean of the readings that exist."""
    out: Dict[str, Any] = {"samples": len(series.get("t", []))}
    for key in SERIES:
        values = [v for v in series.get(key, []) if isinstance(v, (int, float))]
        out[key] = ({"max": max(values), "mean": round(sum(values) / len(values), 2)}
                    if values else None)
    return out
