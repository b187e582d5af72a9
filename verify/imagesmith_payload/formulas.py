"""Pure rate formulas: what was counted, over how long."""

from __future__ import annotations


def gemm_tflops(m: int, n: int, k: int, seconds: float) -> float:
    """A (m x k) @ B (k x n) does 2mnk floating-point operations."""
    return 2.0 * m * n * k / seconds / 1e12


def copy_gbps(nbytes: int, seconds: float, read_and_write: bool = True) -> float:
    """Device copy counts bytes read plus bytes written (like the reference)."""
    moved = 2 * nbytes if read_and_write else nbytes
    return moved / seconds / 1e9


def allreduce_algbw(nbytes: int, seconds: float) -> float:
    """Algorithm bandwidth, GB/s: message size over time."""
    return nbytes / seconds / 1e9


def allreduce_busbw(nbytes: int, seconds: float, world_size: int) -> float:
    """Bus bandwidth as nccl-tests define it: algbw * 2(n-1)/n."""
    if world_size < 1:
        raise ValueError("world_size must be >= 1")
    return allreduce_algbw(nbytes, seconds) * 2.0 * (world_size - 1) / world_size


def sdpa_tflops(batch: int, heads: int, seq: int, head_dim: int, seconds: float,
                causal: bool) -> float:
    """Forward attention: QK^T and PV are 2 * 2*b*h*s*s*d; causal does half."""
    flops = 4.0 * batch * heads * seq * seq * head_dim
    if causal:
        flops /= 2.0
    return flops / seconds / 1e12
