"""torchrun worker: a small model under DistributedDataParallel for N steps.

Rank 0 writes {losses, params_equal, ...} to the JSON path given.
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
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from imagesmith_payload.atomic import write_text


def build(seed: int, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(seed)  # DDP broadcasts rank 0's weights anyway
    return torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(),
                               torch.nn.Linear(256, 256), torch.nn.GELU(),
                               torch.nn.Linear(256, 1)).to(device)


def batch(seed: int, rank: int, step: int, device: torch.device) -> Any:
    """Each rank its own shard of a fixed random regression task."""
    gen = torch.Generator().manual_seed(seed * 100003 + rank * 1009 + step)
    x = torch.randn(256, 128, generator=gen)
    w = torch.Generator().manual_seed(seed)
    teacher = torch.randn(128, 1, generator=w) / 128 ** 0.5
    return x.to(device), torch.tanh(x @ teacher).to(device)


def train(model: Any, seed: int, rank: int, steps: int, device: torch.device) -> List[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(steps):
        x, y = batch(seed, rank, step, device)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def params_equal(module: torch.nn.Module) -> bool:
    """Every rank's parameters bitwise equal to rank 0's."""
    flat = torch.cat([p.detach().reshape(-1) for p in module.parameters()])
    ref = flat.clone()
    dist.broadcast(ref, src=0)
    same = torch.tensor([int(torch.equal(flat, ref))], device=flat.device)
    dist.all_reduce(same, op=dist.ReduceOp.MIN)
    return bool(same.item())


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=120.0)
    a = p.parse_args()
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=a.timeout))
    device = torch.device("cuda", local)
    model = DistributedDataParallel(build(a.seed + rank, device), device_ids=[local])
    losses = train(model, a.seed, rank, a.steps, device)
    result: Dict[str, Any] = {"world": dist.get_world_size(), "steps": a.steps,
                              "losses": [round(v, 6) for v in losses],
                              "params_equal": params_equal(model.module)}
    if rank == 0:
        write_text(a.out, json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
