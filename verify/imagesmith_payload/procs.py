"""Child processes with a hard timeout: collectives must time out, not hang."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers")
# Never let a child enable NVLink multicast (NVLS): it can wedge shared hosts.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1"}


@dataclass(frozen=True)
class ProcResult:
    returncode: Optional[int]
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float

    def tail(self, lines: int = 4) -> str:
        text = (self.stderr or self.stdout).strip().splitlines()
        return " | ".join(line.strip() for line in text[-lines:])


def child_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = dict(os.environ)
    env.update({k: v for k, v in SAFE_ENV.items() if k not in os.environ})
    env.update(extra or {})
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_process(argv: Sequence[str], timeout_s: float,
                env: Optional[Dict[str, str]] = None) -> ProcResult:
    """Run argv in its own process group; on timeout kill the whole group."""
    t0 = time.monotonic()
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env or child_env(), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return ProcResult(proc.returncode, out, err, False, time.monotonic() - t0)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        return ProcResult(proc.returncode, out or "", err or "", True, time.monotonic() - t0)


def kill_group(proc: "subprocess.Popen[Any]") -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


LOOPBACK = "127.0.0.1"


def torchrun_argv(script: str, nprocs: int, args: Sequence[str]) -> List[str]:
    """python -m torch.distributed.run, single node, one process per GPU, meeting on the loopback address at a free
    port. Not ``--standalone``: its rendezvous hands the workers this host's name, and a container without a network
    (Docker's none network, what verify runs in) has no address for its own name: the workers wait on it until
    the check's timeout. The spellings are torchrun's since torch 1.10."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--node_rank=0", f"--master_addr={LOOPBACK}",
            f"--master_port={free_port()}", f"--nproc_per_node={nprocs}", os.path.join(WORKERS, script), *args]


def free_port() -> int:
    """A TCP port on the loopback address nothing listens on now (the rendezvous binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def run_worker_json(argv_for: Any, timeout_s: float) -> "WorkerOutcome":
    """Run a worker that writes JSON to the path given as its last argument."""
    with tempfile.TemporaryDirectory(prefix="imagesmith-") as tmp:
        out_path = os.path.join(tmp, "result.json")
        proc = run_process(argv_for(out_path), timeout_s)
        data = _read_json(out_path)
    return WorkerOutcome(proc, data)


@dataclass(frozen=True)
class WorkerOutcome:
    proc: ProcResult
    data: Optional[Dict[str, Any]]

    def problem(self, what: str, timeout_s: float) -> Optional[str]:
        """Why this run gave no usable result, or None."""
        if self.proc.timed_out:
            return f"{what} timed out after {timeout_s:.0f} s (hang?): {self.proc.tail()}"
        if self.proc.returncode != 0 or self.data is None:
            return f"{what} exited {self.proc.returncode}: {self.proc.tail()}"
        return None


def _read_json(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
