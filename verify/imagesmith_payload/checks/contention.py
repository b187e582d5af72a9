"""Several processes share one GPU, each with a memory fraction: fair and efficient."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

from ..context import Context
from ..judge import judge_contention
from ..procs import WORKERS, child_env, kill_group
from ..registry import check
from ..results import Result, failed, outcome

RUN_SECONDS = 4.0
START_TIMEOUT = 120.0


class Group:
    """N worker processes on GPU 0 coordinated through files in a temporary folder."""

    def __init__(self, n: int, folder: str) -> None:
        self.n, self.folder = n, folder
        fraction = 0.9 / n
        self.procs = [self._start(i, fraction) for i in range(n)]

    def _start(self, i: int, fraction: float) -> "subprocess.Popen[bytes]":
        with open(os.path.join(self.folder, f"stderr.{i}"), "wb") as err:
            return subprocess.Popen(
                [sys.executable, os.path.join(WORKERS, "contention.py"), self.folder, str(i),
                 "--fraction", f"{fraction:.4f}", "--seconds", str(RUN_SECONDS)],
                stdout=subprocess.DEVNULL, stderr=err, env=child_env(), start_new_session=True)

    def wait_files(self, pattern: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not all(os.path.exists(os.path.join(self.folder, pattern.format(i)))
                      for i in range(self.n)):
            dead = [p for p in self.procs if p.poll() not in (None, 0)]
            if dead:
                index = self.procs.index(dead[0])
                raise RuntimeError(f"worker {index} exited {dead[0].returncode}: "
                                   f"{_tail(self.folder, index)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers not done with {pattern!r} within {timeout:.0f} s")
            time.sleep(0.01)

    def run(self) -> List[Dict[str, Any]]:
        try:
            self.wait_files("ready.{}", START_TIMEOUT)
            open(os.path.join(self.folder, "go"), "w").close()  # workers poll for it
            self.wait_files("result.{}.json", RUN_SECONDS + 60.0)
            return [_load(os.path.join(self.folder, f"result.{i}.json")) for i in range(self.n)]
        finally:
            self.stop()

    def stop(self) -> None:
        """Reap the workers; when some result is missing, kill them all first."""
        finished = all(os.path.exists(os.path.join(self.folder, f"result.{i}.json"))
                       for i in range(self.n))
        for proc in self.procs:
            if not finished and proc.poll() is None:
                kill_group(proc)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                proc.wait()


def _load(path: str) -> Dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _tail(folder: str, index: int) -> str:
    with open(os.path.join(folder, f"stderr.{index}"), encoding="utf-8", errors="replace") as fh:
        return " | ".join(fh.read().strip().splitlines()[-3:])


def run_group(n: int) -> List[Dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="imagesmith-share-") as folder:
        return Group(n, folder).run()


@check("contention.shared_gpu", "2-4 processes share GPU 0: aggregate and fairness vs solo",
       tier="standard", unit="x solo", needs="gpu", timeout_s=400.0, throughput=True)
def shared_gpu(ctx: Context) -> Result:
    ctx.release_memory()
    n = max(2, min(4, ctx.config.contention_processes))
    try:
        solo = run_group(1)[0]
        shared = run_group(n)
    except (RuntimeError, TimeoutError, OSError) as exc:
        return failed(f"{type(exc).__name__}: {exc}")
    if not all(r["finite"] for r in shared + [solo]):
        return failed("a worker's GEMM result was not finite")
    per = [r["tflops"] for r in shared]
    status, detail = judge_contention(solo["tflops"], per)
    data = {"solo_tflops": round(solo["tflops"], 1), "per_process_tflops": [round(v, 1) for v in per],
            "processes": n, "memory_fraction_each": round(0.9 / n, 4)}
    return outcome(status, detail, round(sum(per) / solo["tflops"], 3), 0.85, data=data)
