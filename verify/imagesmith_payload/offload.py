"""Independent checks in worker processes, started with the run and collected at its end.

A check registered with ``worker="NAME"`` runs, with the other checks of that name, in one
child process of the payload (``run.py --worker-checks ID,... --worker-out FILE``, the same
arguments otherwise, so the same config): the same Python, environment and image, on other
CPU cores while the main process imports torch and runs the GPU checks. What a worker
costs mostly is imports (torch._dynamo through torch.optim, transformers) and hashing, so
running them side by side shortens the wall time without dropping or shrinking a check.

A worker that crashes, prints no result or runs past its checks' timeouts fails each of
its checks with the reason; it never passes one. Workers are the payload's children: the
shared-GPU rule counts them as the payload's own.

A check that can only skip, as far as the config already says (:func:`idle`), gets no worker:
it runs in the main process through the same gate, to the same skip, and no second process
imports torch beside the main one's import for nothing (on a machine with few cores that
import is the time before the first check).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from .atomic import write_text
from .procs import child_env, kill_group
from .registry import CheckSpec
from .report import sanitize
from .results import Result, failed

RUN_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "run.py")
STRIP = {"--out": 2, "--emit-marker": 1}  # the parent's own outputs: never a worker's


def worker_argv(args: Sequence[str], ids: Sequence[str], out: str) -> List[str]:
    """The parent's arguments without its outputs, plus the worker's checks and result file."""
    kept, i = [], 0
    while i < len(args):
        flag = args[i].split("=", 1)[0]
        if flag in STRIP:
            i += 1 if "=" in args[i] else STRIP[flag]
            continue
        kept.append(args[i])
        i += 1
    return [sys.executable, RUN_PY, *kept, "--worker-checks", ",".join(ids), "--worker-out", out]


class Worker:
    def __init__(self, name: str, specs: Sequence[CheckSpec], args: Sequence[str], timeout_s: float) -> None:
        self.name, self.specs, self.timeout_s = name, list(specs), timeout_s
        self.dir = tempfile.mkdtemp(prefix=f"imagesmith-worker-{name}-")
        self.out, self.log = os.path.join(self.dir, "entries.json"), os.path.join(self.dir, "stderr.log")
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(worker_argv(args, [s.id for s in specs], self.out),
                                         stdout=subprocess.DEVNULL, stderr=err, env=child_env(),
                                         start_new_session=True)
        self.t0 = time.monotonic()
        self._entries: Optional[Dict[str, Dict[str, Any]]] = None
        self._why = ""

    def entries(self) -> Dict[str, Dict[str, Any]]:
        """Each check's report entry (waits for the worker once)."""
        if self._entries is None:
            self._entries = self._collect()
        return self._entries

    def _collect(self) -> Dict[str, Dict[str, Any]]:
        try:
            return self._read()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _read(self) -> Dict[str, Dict[str, Any]]:
        try:
            code = self.proc.wait(timeout=max(1.0, self.timeout_s - (time.monotonic() - self.t0)))
        except subprocess.TimeoutExpired:
            self.kill()
            self._why = f"its worker process ({self.name}) ran past {self.timeout_s:.0f} s and was killed"
            return {}
        try:
            with open(self.out, encoding="utf-8") as fh:
                got = json.load(fh)
            return {e["id"]: e for e in got if isinstance(e, dict) and isinstance(e.get("id"), str)}
        except (OSError, ValueError, TypeError):
            self._why = f"its worker process ({self.name}) exited {code} without a result: {self._tail()}"
            return {}

    def result(self, spec: CheckSpec) -> Optional[Dict[str, Any]]:
        """The worker's entry for `spec`, or None (then `problem` says why)."""
        return self.entries().get(spec.id)

    def problem(self) -> str:
        return self._why or f"its worker process ({self.name}) reported no result for it: {self._tail()}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            kill_group(self.proc)
            self.proc.wait()

    def _tail(self) -> str:
        try:
            with open(self.log, encoding="utf-8", errors="replace") as fh:
                lines = fh.read().strip().splitlines()
        except OSError:
            return "no output"
        return " | ".join(line.strip() for line in lines[-3:]) or "no output"


def idle(spec: CheckSpec, config: Any) -> bool:
    """Will ``spec`` only skip, known before torch is imported? A GPU check in CPU mode as asked (--gpus none), where
    the host could attach no GPU (it ran the container without, ``gpu_unavailable``) or where a CPU-only torch is
    expected; or a layer check whose layer is neither declared nor installed (layers.load_layer's own rule). It only
    places the check: an idle one runs in the main process through the same gate (a CPU image whose torch turns out
    to be a CUDA build, with a GPU, still runs its GPU checks, there)."""
    if spec.needs in ("gpu", "multi_gpu") and (config.gpus == "none" or config.gpu_unavailable or config.expected.cuda == "cpu"):
        return True
    from .checks.layers import LAYER_MODULES

    layer = spec.id.split(".")[1] if spec.id.startswith("layers.") else ""
    if layer in LAYER_MODULES and layer not in config.layers:
        try:
            return importlib.util.find_spec(LAYER_MODULES[layer][0]) is None
        except (ImportError, ValueError):
            return False
    return False


class Offload:
    """The run's workers, one per worker name among the chosen checks that may do some work (:func:`idle`)."""

    def __init__(self, specs: Sequence[CheckSpec], ctx: Any, args: Sequence[str]) -> None:
        groups: Dict[str, List[CheckSpec]] = {}
        for spec in specs:
            if spec.worker and not idle(spec, ctx.config):
                groups.setdefault(spec.worker, []).append(spec)
        self.workers = {name: Worker(name, group, args, sum(s.timeout_for(ctx) for s in group))
                        for name, group in groups.items()}
        self.by_id = {s.id: self.workers[s.worker] for s in specs if s.worker in self.workers and not idle(s, ctx.config)}

    def __contains__(self, check_id: str) -> bool:
        return check_id in self.by_id

    def entry(self, spec: CheckSpec, finish: Callable[[CheckSpec, Result, float], Dict[str, Any]]) -> Dict[str, Any]:
        """The worker's entry for `spec`, or a failed one saying why there is none."""
        worker = self.by_id[spec.id]
        got = worker.result(spec)
        if got is None:
            return finish(spec, failed(f"not run: {worker.problem()}"), time.monotonic() - worker.t0)
        return got

    def kill_all(self) -> None:
        for worker in self.workers.values():
            worker.kill()


def write_entries(path: str, entries: List[Dict[str, Any]]) -> None:
    """A worker's result, atomically (the parent never reads half a file)."""
    write_text(path, json.dumps(sanitize(entries), allow_nan=False))
