"""torchrun worker: NCCL smoke (exact integer collectives) or all-reduce bus bandwidth.

Run by the payload as `python -m torch.distributed.run ... collective.py MODE OUT.json`;
rank 0 writes the JSON result.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from typing import Any, Dict, List

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from imagesmith_payload.atomic import write_text
from imagesmith_payload.formulas import allreduce_algbw, allreduce_busbw
from imagesmith_payload.judge import nccl_version_string
from imagesmith_payload.stats import median

SMOKE_ELEMENTS = 1 << 22


def setup(timeout_s: float) -> Dict[str, int]:
    env = {k: int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    torch.cuda.set_device(env["LOCAL_RANK"])
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=timeout_s))
    return env


def smoke(rank: int, world: int) -> Dict[str, Any]:
    """all_reduce, all_gather and broadcast of integers, each compared exactly."""
    dev = torch.device("cuda", torch.cuda.current_device())
    base = torch.arange(SMOKE_ELEMENTS, dtype=torch.int64, device=dev)
    x = base * (rank + 1) + 7 * rank
    dist.all_reduce(x)
    want = base * (world * (world + 1) // 2) + 7 * (world * (world - 1) // 2)
    gathered = [torch.empty_like(base) for _ in range(world)]
    dist.all_gather(gathered, base + rank)
    bcast = base + 12345 if rank == 0 else torch.zeros_like(base)
    dist.broadcast(bcast, src=0)
    ok = {"all_reduce": torch.equal(x, want),
          "all_gather": all(torch.equal(g, base + r) for r, g in enumerate(gathered)),
          "broadcast": torch.equal(bcast, base + 12345)}
    return {"ok": _all_ranks(ok)}


def _all_ranks(flags: Dict[str, bool]) -> Dict[str, bool]:
    """A flag holds only if it held on every rank."""
    t = torch.tensor([int(v) for v in flags.values()], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return {k: bool(v) for k, v in zip(flags, t.tolist())}


def rank_payload(seed: int, rank: int, n: int) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed + rank)
    return torch.randint(0, 1 << 20, (n,), generator=gen, device="cuda", dtype=torch.int32)


def allreduce(rank: int, world: int, nbytes: int, iters: int, seed: int) -> Dict[str, Any]:
    """Timed in-place all_reduce of random int32; every result compared exactly."""
    n = nbytes // 4
    src = rank_payload(seed, rank, n)
    want = torch.zeros_like(src)
    for r in range(world):
        want += rank_payload(seed, r, n)
    buf = torch.empty_like(src)
    times: List[float] = []
    bad = 0
    for i in range(iters + 3):
        buf.copy_(src)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dist.all_reduce(buf)
        end.record()
        end.synchronize()
        bad += 0 if torch.equal(buf, want) else 1
        if i >= 3:
            times.append(start.elapsed_time(end))
    bad_all = torch.tensor([bad], device="cuda")
    dist.all_reduce(bad_all)
    seconds = median(times) / 1e3
    return {"bytes": n * 4, "iters": iters, "times_ms": [round(t, 4) for t in times],
            "mismatched_iterations": int(bad_all.item()),
            "algbw_gbps": allreduce_algbw(n * 4, seconds),
            "busbw_gbps": allreduce_busbw(n * 4, seconds, world)}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=("smoke", "allreduce"))
    p.add_argument("out")
    p.add_argument("--bytes", type=int, default=1 << 30)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=120.0)
    a = p.parse_args()
    env = setup(a.timeout)
    rank, world = env["RANK"], env["WORLD_SIZE"]
    result = smoke(rank, world) if a.mode == "smoke" else \
        allreduce(rank, world, a.bytes, a.iters, a.seed)
    result.update(world=world, nccl=nccl_version_string(torch.cuda.nccl.version()))
    if rank == 0:
        write_text(a.out, json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
