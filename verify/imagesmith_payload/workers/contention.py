"""One of N processes sharing a GPU: GEMMs for a fixed time after a common start.

Protocol through files in DIR: write DIR/ready.I when warmed up, wait for
DIR/go, run for SECONDS, write DIR/result.I.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from imagesmith_payload.atomic import write_text

N = 8192


def wait_for(path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout:.0f} s")
        time.sleep(0.002)


def run_for(seconds: float, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> float:
    """GEMMs back to back for `seconds`; TFLOP/s from the count and the wall time."""
    count, t0 = 0, time.perf_counter()
    while True:
        for _ in range(8):
            torch.matmul(a, b, out=out)
        count += 8
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return 2.0 * N ** 3 * count / elapsed / 1e12


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("index", type=int)
    p.add_argument("--fraction", type=float, required=True)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--device", type=int, default=0)
    a = p.parse_args()
    torch.cuda.set_device(a.device)
    torch.cuda.set_per_process_memory_fraction(a.fraction, a.device)
    gen = torch.Generator(device="cuda").manual_seed(a.index + 1)
    x = torch.randn(N, N, device="cuda", dtype=torch.bfloat16, generator=gen)
    y = torch.randn(N, N, device="cuda", dtype=torch.bfloat16, generator=gen)
    out = torch.empty_like(x)
    run_for(0.3, x, y, out)  # warm-up: cuBLAS handle, kernel selection, clocks
    write_text(os.path.join(a.dir, f"ready.{a.index}"), "")
    wait_for(os.path.join(a.dir, "go"), 120.0)
    tflops = run_for(a.seconds, x, y, out)
    write_text(os.path.join(a.dir, f"result.{a.index}.json"),
               json.dumps({"tflops": tflops, "finite": bool(torch.isfinite(out).all())}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
