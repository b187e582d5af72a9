#!/usr/bin/env python3
"""How many steps the leak detector needs, on synthetic series and on real loops.

    python3 bench/leak_detector.py                       # synthetic series only (no torch)
    python3 bench/leak_detector.py --real --busy 4 --clean-runs 10   # + real loops (torch), 4 spinning processes

Synthetic: a steady leak on an exact counter sampled every 2 steps (the GPU plan,
torch.cuda.memory_allocated), every 15 steps (the CPU plan, live tensor bytes) and
on host RSS with +-1 MiB jitter; the steps from the first sample until
stats.leak_verdict says "leak" (judged every CHECK_EVERY_SAMPLES samples, as the loop does).
Real: leak_loop on the first CUDA device (or the CPU) with 0.05 and 1 MiB/step injected,
quick and standard plans, then --clean-runs clean standard loops; optionally with
--busy processes spinning on the cores. Prints a table.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
from typing import List, Optional, Sequence

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "verify"))

from imagesmith_payload.checks.leak import CHECK_EVERY_SAMPLES, QUICK, STANDARD, WARMUP_STEPS
from imagesmith_payload.stats import DEVICE_LIMITS, HOST_LIMITS, LEAK_MIN_SAMPLES, MIB, LeakLimits, leak_verdict

LEAKS = (0.05, 0.09, 1.0)
SERIES = (("exact counter, every 2 steps (GPU plan)", 2, DEVICE_LIMITS, 0.0),
          ("exact counter, every 15 steps (CPU plan)", 15, DEVICE_LIMITS, 0.0),
          ("host RSS, +-1 MiB jitter, every 2 steps", 2, HOST_LIMITS, 1.0))


def steps_to_detect(per_step_mib: float, every: int, limits: LeakLimits, jitter_mib: float, seed: int,
                    max_steps: int = 5000) -> Optional[int]:
    """Loop steps until a steady leak is called, or None within max_steps."""
    rng = random.Random(seed)
    xs: List[int] = []
    ys: List[float] = []
    for i in range(WARMUP_STEPS, WARMUP_STEPS + max_steps):
        if i % every:
            continue
        xs.append(i)
        ys.append(900 * MIB + per_step_mib * MIB * i + rng.uniform(-jitter_mib, jitter_mib) * MIB)
        due = len(xs) >= LEAK_MIN_SAMPLES and len(xs) % CHECK_EVERY_SAMPLES == 0
        if due and leak_verdict(xs, ys, limits).leaking:
            return i - WARMUP_STEPS + 1
    return None


def synthetic_rows(seeds: int = 3) -> List[List[str]]:
    rows = []
    for name, every, limits, jitter in SERIES:
        cells = [span([steps_to_detect(leak, every, limits, jitter, s) for s in range(seeds)]) for leak in LEAKS]
        rows.append([name, *cells])
    return rows


def span(values: Sequence[Optional[int]]) -> str:
    """'71', '295-303', or 'never' when any seed was not caught."""
    if any(v is None for v in values):
        return "never"
    lo, hi = min(v for v in values if v is not None), max(v for v in values if v is not None)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def real_rows(busy: int, clean_runs: int) -> List[List[str]]:
    import torch

    from imagesmith_payload.checks.leak import leak_loop

    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        rows = []
        for leak in (0.05, 1.0):
            for plan, name in ((QUICK, "quick"), (STANDARD, "standard")):
                run = leak_loop(torch, device, leak, plan)
                caught = run["caught"]
                rows.append([f"{device.type} loop, {leak} MiB/step, {name} plan",
                             f"{caught['steps']} steps, {caught['seconds']:.1f} s" if caught else "not caught"])
        alarms, seconds = 0, []
        for _ in range(clean_runs):
            run = leak_loop(torch, device, 0.0, STANDARD)
            alarms += run["device"].verdict().leaking or run["host"].verdict().leaking
            seconds.append(run["seconds"])
        if clean_runs:
            rows.append([f"{device.type} loop, clean x{clean_runs}, standard plan",
                         f"{alarms} alarms; {min(seconds):.1f}-{max(seconds):.1f} s each"])
        return rows
    finally:
        for proc in spinners:
            proc.kill()


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return [" | ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in [header, *rows]]


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--real", action="store_true", help="also run leak_loop (needs torch)")
    p.add_argument("--busy", type=int, default=0, help="spinning processes during the real loops")
    p.add_argument("--clean-runs", type=int, default=10)
    a = p.parse_args(argv)
    print("\n".join(table(["synthetic series: steps to detect", *(f"{x} MiB/step" for x in LEAKS)],
                          synthetic_rows())))
    if a.real:
        print()
        print("\n".join(table([f"real loop ({a.busy} busy processes)", "result"], real_rows(a.busy, a.clean_runs))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
