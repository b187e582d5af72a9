"""Helpers that several check modules share (torch passed in, never imported)."""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, Sequence

from ..judge import relative_error


def fresh_seed() -> int:
    """New random data every run (never zeros); the seed goes into the report."""
    return int.from_bytes(os.urandom(4), "little")


def randn(torch: Any, shape: Sequence[int], device: Any, seed: int, dtype: Any = None) -> Any:
    """Standard normal data drawn where it will live (fast for large GPU buffers)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    data = torch.randn(*shape, generator=gen, dtype=torch.float32, device=device)
    return data if dtype in (None, torch.float32) else data.to(dtype)


def rel_err(torch: Any, out: Any, ref: Any) -> float:
    """||out - ref|| / ||ref|| in float64 on the CPU; inf when out is not finite."""
    out64 = out.detach().to("cpu", torch.float64)
    ref64 = ref.detach().to("cpu", torch.float64)
    if not bool(torch.isfinite(out64).all()):
        return float("inf")
    return relative_error(float(((out64 - ref64) ** 2).sum()), float((ref64 ** 2).sum()))


@contextlib.contextmanager
def precision(torch: Any, tf32: bool) -> Iterator[None]:
    """Set cuBLAS/cuDNN TF32 for the block, restore afterwards."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (matmul.allow_tf32, cudnn.allow_tf32)
    matmul.allow_tf32, cudnn.allow_tf32 = tf32, tf32
    try:
        yield
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = saved


def gpu_label(torch: Any, device: Any) -> str:
    if device.type != "cuda":
        return "cpu"
    major, minor = torch.cuda.get_device_capability(device)
    return f"cuda:{device.index} sm_{major}{minor}"
