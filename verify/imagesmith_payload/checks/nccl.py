"""NCCL across every visible GPU, in torchrun children with a hard timeout."""

from __future__ import annotations

from typing import Any, List

from ..context import Context
from ..judge import judge_throughput
from ..procs import WorkerOutcome, run_worker_json, torchrun_argv
from ..registry import check
from ..results import Result, failed, measured, passed
from ._common import fresh_seed

ALLREDUCE_BYTES = 1 << 30  # >= 1 GiB messages


def collective_timeout(ctx: Context) -> float:
    return ctx.config.collective_timeout_s + 30.0


def run_collective(ctx: Context, mode: str, extra: List[str]) -> WorkerOutcome:
    ctx.release_memory()
    timeout = ctx.config.collective_timeout_s
    def argv(out: str) -> List[str]:
        return torchrun_argv("collective.py", ctx.gpu_count, [mode, out, "--timeout", str(timeout * 0.8), *extra])

    return run_worker_json(argv, timeout)


@check("nccl.smoke", "NCCL all_reduce/all_gather/broadcast exact on all GPUs", needs="multi_gpu",
       timeout_s=collective_timeout)
def smoke(ctx: Context) -> Result:
    run = run_collective(ctx, "smoke", [])
    problem = run.problem(f"torchrun on {ctx.gpu_count} GPUs", ctx.config.collective_timeout_s)
    if problem or run.data is None:
        return failed(problem or "no result")
    wrong = [k for k, ok in run.data["ok"].items() if not ok]
    detail = f"{ctx.gpu_count} GPUs, NCCL {run.data.get('nccl')}, {run.proc.seconds:.1f} s"
    if wrong:
        return failed(f"wrong results from {', '.join(wrong)} ({detail})", data=run.data)
    return passed(f"exact integer all_reduce, all_gather, broadcast; {detail}",
                  ctx.gpu_count, data=run.data)


@check("nccl.allreduce", "all-reduce bus bandwidth, 1 GiB int32, exact every iteration",
       tier="standard", unit="GB/s", needs="multi_gpu", timeout_s=collective_timeout,
       throughput=True)
def allreduce(ctx: Context) -> Result:
    seed = fresh_seed() % (1 << 30)
    run = run_collective(ctx, "allreduce", ["--bytes", str(ALLREDUCE_BYTES), "--seed", str(seed)])
    problem = run.problem(f"torchrun on {ctx.gpu_count} GPUs", ctx.config.collective_timeout_s)
    if problem or run.data is None:
        return failed(problem or "no result")
    data: Any = dict(run.data, seed=seed)
    if data["mismatched_iterations"]:
        return failed(f"all_reduce gave a wrong sum in {data['mismatched_iterations']} "
                      f"rank-iterations of {data['iters']}", data=data)
    verdict = judge_throughput(data["busbw_gbps"], ctx.threshold("nccl.allreduce"),
                               f"busbw on {data['world']} GPUs")
    return measured(data["busbw_gbps"], verdict, data=data,
                    extra_detail=f"algbw {data['algbw_gbps']:.1f} GB/s, sums exact")
