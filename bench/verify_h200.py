#!/usr/bin/env python3
"""Bare PyTorch reference loop + the payload, in the same run, side by side.

    python3 bench/verify_h200.py --tiers quick,standard --out-dir DIR [--label h200]

1. Times the reference figures with a plain loop written here (not the payload's
   code): bf16/fp16 8192^3 and tf32/fp32 10000^3 GEMMs, a device-to-device copy
   (bytes read + written), a pinned host-to-device copy.  Mean and median of timed
   repeats after warm-ups, CUDA events, random data.
2. Runs `verify/run.py --tier T --require-gpu --out DIR/LABEL-T.json` per tier, or with
   --via-cli `python3 -m imagesmith.cli verify --local --tier T --require-gpu --json ...`
   (wall time measured around the whole process).
3. Prints a table: bare loop | payload | issue reference | payload % of reference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE = {"gemm.bf16": 784.0, "gemm.fp16": 754.0, "gemm.tf32": 345.0, "gemm.fp32": 49.0,
             "bandwidth.d2d": 4238.0, "bandwidth.h2d": 55.0, "sdpa.perf": 476.0}
UNITS = {"bandwidth.d2d": "GB/s", "bandwidth.h2d": "GB/s"}


def timed_ms(fn: Callable[[], object], warmup: int, repeats: int) -> List[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end))
    return out


def gemm(dtype: torch.dtype, n: int, tf32: bool, repeats: int) -> Dict[str, float]:
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    ms = timed_ms(lambda: a @ b, 3, repeats)
    flop = 2.0 * n ** 3
    torch.backends.cuda.matmul.allow_tf32 = False
    return {"mean": flop / (statistics.mean(ms) / 1e3) / 1e12,
            "median": flop / (statistics.median(ms) / 1e3) / 1e12}


def copy_d2d(nbytes: int) -> Dict[str, float]:
    src = torch.randint(0, 255, (nbytes,), device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    ms = timed_ms(lambda: dst.copy_(src), 3, 20)
    return {"mean": 2 * nbytes / (statistics.mean(ms) / 1e3) / 1e9,
            "median": 2 * nbytes / (statistics.median(ms) / 1e3) / 1e9}


def copy_h2d(nbytes: int) -> Dict[str, float]:
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8).pin_memory()
    dst = torch.empty(nbytes, device="cuda", dtype=torch.uint8)
    ms = timed_ms(lambda: dst.copy_(src, non_blocking=True), 3, 20)
    return {"mean": nbytes / (statistics.mean(ms) / 1e3) / 1e9,
            "median": nbytes / (statistics.median(ms) / 1e3) / 1e9}


def bare_loop() -> Dict[str, Dict[str, float]]:
    out = {
        "gemm.bf16": gemm(torch.bfloat16, 8192, False, 10),
        "gemm.fp16": gemm(torch.float16, 8192, False, 10),
        "gemm.tf32": gemm(torch.float32, 10000, True, 10),
        "gemm.fp32": gemm(torch.float32, 10000, False, 5),
        "bandwidth.d2d": copy_d2d(2 << 30),
        "bandwidth.h2d": copy_h2d(512 << 20),
    }
    torch.cuda.empty_cache()
    return out


def run_payload(tier: str, out_path: str, config: str, via_cli: bool) -> Dict[str, Any]:
    """The payload alone, or through `imagesmith verify --local` (which adds NVML samples)."""
    if via_cli:
        argv = [sys.executable, "-m", "imagesmith.cli", "verify", "--local", "--tier", tier,
                "--require-gpu", "--json", out_path]
    else:
        argv = [sys.executable, os.path.join(ROOT, "verify", "run.py"), "--tier", tier,
                "--require-gpu", "--out", out_path] + (["--config", config] if config else [])
    t0 = time.monotonic()
    proc = subprocess.run(argv)
    wall = time.monotonic() - t0
    with open(out_path, encoding="utf-8") as fh:
        report = json.load(fh)
    report["bench"] = {"wall_s": round(wall, 2), "exit_code": proc.returncode}
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=2)
    return report


def table(bare: Dict[str, Dict[str, float]], report: Dict[str, Any]) -> List[str]:
    values = {c["id"]: c for c in report["checks"]}
    rows = [f"{'metric':<15} {'bare mean':>10} {'bare med':>10} {'payload':>10} {'reference':>10}"
            f" {'payload/ref':>11} {'payload/bare':>12}  status"]
    for key, ref in REFERENCE.items():
        entry = values.get(key, {})
        val = entry.get("value")
        b = bare.get(key, {})
        pct = f"{100 * val / ref:.1f}%" if isinstance(val, (int, float)) else "-"
        vs_bare = f"{100 * val / b['median']:.1f}%" if b and isinstance(val, (int, float)) else "-"
        rows.append(f"{key:<15} {b.get('mean', float('nan')):>10.1f} {b.get('median', float('nan')):>10.1f}"
                    f" {val if val is not None else '-':>10} {ref:>10.1f} {pct:>11} {vs_bare:>12}"
                    f"  {entry.get('status', '-')} {UNITS.get(key, 'TFLOP/s')}")
    return rows


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--tiers", default="quick,standard")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--label", default="h200")
    p.add_argument("--config", default="")
    p.add_argument("--no-bare", action="store_true")
    p.add_argument("--via-cli", action="store_true", help="run `imagesmith verify --local` (--config unused)")
    a = p.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    bare = {} if a.no_bare else bare_loop()
    with open(os.path.join(a.out_dir, f"{a.label}-bare-loop.json"), "w", encoding="utf-8") as fh:
        json.dump({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                   "bare_loop": bare}, fh, indent=2)
    for tier in filter(None, a.tiers.split(",")):
        report = run_payload(tier, os.path.join(a.out_dir, f"{a.label}-{tier}.json"), a.config,
                             a.via_cli)
        s = report["summary"]
        print(f"\n== {a.label} tier {tier}: wall {report['bench']['wall_s']} s, payload "
              f"{report['duration_s']} s, {s}")
        print("\n".join(table(bare, report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
