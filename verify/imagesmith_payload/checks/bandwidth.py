"""Memory bandwidth: HBM device-to-device copy, pinned host<->device."""

from __future__ import annotations

from typing import Any, Callable, Dict, Tuple

from ..context import Context
from ..formulas import copy_gbps
from ..judge import judge_throughput
from ..registry import check
from ..results import Result, failed, measured
from ..stats import median, spread_percent
from ..timing import event_times_ms
from ._common import fresh_seed

D2D_BYTES = 2 << 30  # far beyond the 60 MB L2
HOST_BYTES = 512 << 20
REPEATS = 20


def device_random_bytes(torch: Any, nbytes: int, device: Any, seed: int) -> Any:
    """Random int32 words generated on the device (fast even for GiBs)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randint(-(2 ** 31), 2 ** 31 - 1, (nbytes // 4,), generator=gen, device=device,
                         dtype=torch.int32)


def time_copy(torch: Any, device: Any, dst: Any, src: Any) -> float:
    """Median seconds of dst.copy_(src); then the copy is compared exactly."""
    times = event_times_ms(torch, device, lambda i: dst.copy_(src, non_blocking=True), 3, REPEATS)
    if not torch.equal(dst.to(device), src.to(device)):
        raise RuntimeError("the copied bytes differ from the source")
    return median(times) / 1e3


def d2d(torch: Any, device: Any, seed: int) -> float:
    src = device_random_bytes(torch, D2D_BYTES, device, seed)
    dst = torch.empty_like(src)
    return copy_gbps(D2D_BYTES, time_copy(torch, device, dst, src), read_and_write=True)


def host_buffers(torch: Any, device: Any, seed: int) -> Tuple[Any, Any]:
    on_device = device_random_bytes(torch, HOST_BYTES, device, seed)
    pinned = torch.empty(on_device.shape, dtype=on_device.dtype, pin_memory=True)
    pinned.copy_(on_device)
    return pinned, on_device


def h2d(torch: Any, device: Any, seed: int) -> float:
    pinned, _ = host_buffers(torch, device, seed)
    dst = torch.empty(pinned.shape, dtype=pinned.dtype, device=device)
    return copy_gbps(HOST_BYTES, time_copy(torch, device, dst, pinned), read_and_write=False)


def d2h(torch: Any, device: Any, seed: int) -> float:
    pinned, on_device = host_buffers(torch, device, seed + 1)
    return copy_gbps(HOST_BYTES, time_copy(torch, device, pinned, on_device), read_and_write=False)


def bandwidth_check(ctx: Context, check_id: str, measure: Callable[[Any, Any, int], float],
                    what: str) -> Result:
    torch, seed = ctx.torch, fresh_seed()
    try:
        per_gpu: Dict[int, float] = {d.index: measure(torch, d, seed) for d in ctx.devices()}
    except RuntimeError as exc:
        return failed(f"{what}: {exc}")
    finally:
        ctx.release_memory()
    slowest = min(per_gpu, key=lambda i: per_gpu[i])
    verdict = judge_throughput(per_gpu[slowest], ctx.threshold(check_id), f"{what} on GPU {slowest}")
    data = {"per_gpu_gbps": {str(i): round(v, 1) for i, v in per_gpu.items()},
            "spread_percent": round(spread_percent(list(per_gpu.values())), 2)}
    return measured(per_gpu[slowest], verdict, data=data)


@check("bandwidth.d2d", "HBM device-to-device copy (read + write)", tier="standard",
       unit="GB/s", needs="gpu", throughput=True)
def device_copy(ctx: Context) -> Result:
    return bandwidth_check(ctx, "bandwidth.d2d", d2d, "2 GiB device copy")


@check("bandwidth.h2d", "pinned host-to-device copy", tier="standard", unit="GB/s", needs="gpu", throughput=True)
def host_to_device(ctx: Context) -> Result:
    return bandwidth_check(ctx, "bandwidth.h2d", h2d, "512 MiB pinned H2D")


@check("bandwidth.d2h", "device-to-pinned-host copy", tier="standard", unit="GB/s", needs="gpu", throughput=True)
def device_to_host(ctx: Context) -> Result:
    return bandwidth_check(ctx, "bandwidth.d2h", d2h, "512 MiB pinned D2H")
