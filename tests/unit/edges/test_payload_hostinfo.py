"""imagesmith.edges.hostinfo against a fake NVML module (the seam is a constructor parameter)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from imagesmith.edges import hostinfo


class FakeNvml:
    """Just enough of pynvml: two GPUs, one without power readings."""

    NVML_TEMPERATURE_GPU, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2

    def __init__(self, fail_init: bool = False) -> None:
        self.fail_init, self.calls, self.inits = fail_init, 0, 0

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.inits -= 1

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"580.159.04"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 13000

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H200"

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h:08d}"

    def nvmlDeviceGetPciInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(busId=f"00000000:{h + 0x18:02X}:00.0".encode())

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        self.calls += 1
        return SimpleNamespace(total=143771 * 2**20, used=(1000 + self.calls) * 2**20)

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return (9, 0)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=97, memory=40)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 50 + h

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        if h == 1:
            raise RuntimeError("Not Supported")
        return 650000

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return 1980 if clock == self.NVML_CLOCK_SM else 3201


def test_inventory() -> None:
    nvml = FakeNvml()
    info = hostinfo.inventory(nvml)
    assert (info.driver, info.cuda_driver, info.error) == ("580.159.04", "13.0", None)
    assert info.gpus[1] == hostinfo.HostGpu(1, "NVIDIA H200", "GPU-00000001", "00000000:19:00.0", 143771, "9.0")
    assert nvml.inits == 0  # shut down again


def test_inventory_without_a_driver_says_why() -> None:
    info = hostinfo.inventory(FakeNvml(fail_init=True))
    assert info.gpus == () and info.driver is None
    assert info.error == ("NVML unavailable (RuntimeError: NVML Shared Library Not Found); "
                          "no NVIDIA driver on this host?")


@pytest.mark.parametrize("driver_cuda, image_cuda, status", [
    ("13.0", "13.0", "pass"), ("13.0", "12.8", "pass"), ("12.4", "12.8", "warn"), ("12.8", "13.0", "fail"),
    (None, "12.8", "fail"),
])
def test_driver_supports(driver_cuda: Any, image_cuda: str, status: str) -> None:
    info = hostinfo.HostInfo("580.159.04" if driver_cuda else None, driver_cuda, (), None if driver_cuda else "x")
    assert hostinfo.driver_supports(info, image_cuda)[0] == status


def test_sampler_records_every_series_and_summarises() -> None:
    ticks = iter(range(100))
    sampler = hostinfo.NvmlSampler(nvml=FakeNvml(), interval_s=0.25, clock=lambda: float(next(ticks)))
    sampler._open()
    sampler._t0 = 0.0
    for _ in range(3):
        sampler.sample_once()
    result = sampler.result()
    gpu0, gpu1 = result["gpus"]
    assert gpu0["series"]["t"] == [0.0, 1.0, 2.0]
    assert gpu0["series"]["memory_used_mib"] == [1001.0, 1003.0, 1005.0]
    assert gpu1["series"]["power_w"] == [None, None, None]
    assert gpu0["summary"]["power_w"] == {"max": 650.0, "mean": 650.0}
    assert gpu1["summary"]["power_w"] is None
    assert gpu0["summary"]["temperature_c"]["max"] == 50 and gpu1["summary"]["samples"] == 3
    assert (gpu0["name"], gpu0["uuid"]) == ("NVIDIA H200", "GPU-00000000")


def test_sampler_thread_runs_and_stops() -> None:
    with hostinfo.NvmlSampler(indices=[0], nvml=FakeNvml(), interval_s=0.01) as sampler:
        import time
        time.sleep(0.1)
    result = sampler.result()
    assert len(result["gpus"]) == 1 and result["gpus"][0]["summary"]["samples"] >= 3 and result["error"] is None


def test_sampler_without_nvml_reports_the_error() -> None:
    sampler = hostinfo.NvmlSampler(nvml=FakeNvml(fail_init=True))
    sampler.start()
    assert sampler.stop() == {"interval_s": 0.25, "error": "NVML unavailable (RuntimeError: NVML Shared Library "
                              "Not Found)", "gpus": []}
