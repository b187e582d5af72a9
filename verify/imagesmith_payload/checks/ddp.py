"""DistributedDataParallel training under torchrun: loss falls, ranks agree bitwise."""

from __future__ import annotations

from typing import List

from ..context import Context
from ..judge import loss_fell
from ..procs import run_worker_json, torchrun_argv
from ..registry import check
from ..results import Result, failed, passed
from ._common import fresh_seed
from .nccl import collective_timeout


@check("ddp.train", "DDP small model: loss falls, parameters bitwise equal across ranks",
       tier="standard", needs="gpu", timeout_s=collective_timeout)
def ddp_train(ctx: Context) -> Result:
    ctx.release_memory()
    seed, timeout = fresh_seed() % (1 << 20), ctx.config.collective_timeout_s

    def argv(out: str) -> List[str]:
        return torchrun_argv("ddp.py", ctx.gpu_count, [out, "--seed", str(seed),
                                                        "--timeout", str(timeout * 0.8)])
    run = run_worker_json(argv, timeout)
    problem = run.problem(f"torchrun DDP on {ctx.gpu_count} GPUs", timeout)
    if problem or run.data is None:
        return failed(problem or "no result")
    data = dict(run.data, seed=seed)
    fell, how = loss_fell(data["losses"], factor=0.7, window=5)
    detail = f"{data['world']} ranks, {how}"
    if not data["params_equal"]:
        return failed(f"parameters differ across ranks after training; {detail}", data=data)
    if not fell:
        return failed(f"loss did not fall enough; {detail}", data["losses"][-1], data=data)
    return passed(f"parameters bitwise equal; {detail}", data["losses"][-1], data=data)
