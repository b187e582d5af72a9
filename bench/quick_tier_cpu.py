#!/usr/bin/env python3
"""The quick tier's time before its first check, on a CPU machine: `verify --local` and in a container.

    python3 bench/quick_tier_cpu.py --runs 3 --image IMAGE --out bench/results/quick-tier-cpu/quick-tier-cpu.json

Each run is `imagesmith verify … --tier quick --gpus none`, from the command to the verdict. Its stderr is read
line by line as it comes and each milestone timestamped (seconds since the command started):

  started     the payload's first line (`imagesmith payload: started`): the host's work and the process start
  header      `imagesmith payload: tier …`: the payload's imports, its workers started, torch imported
  first       `[ 1/N]`: the first check's line
  end         the verdict

"Cold" for --local is a fresh PYTHONPYCACHEPREFIX: no bytecode for imagesmith, the payload or torch, every
module compiled from source, as on a machine whose torch ships no .pyc. "Warm" runs reuse that prefix (bytecode
present). The page cache is never dropped here (a shared machine), so cold is cold for bytecode, not for disk.
In a container each run is a new container of the same image (the image's own .pyc; page cache warm after the
first). Writes every figure and a Markdown table to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MILESTONES = (("started", "imagesmith payload: started"), ("header", "imagesmith payload: tier "), ("first", "[ 1/"))


def one_run(argv: List[str], env: Dict[str, str], root: str = ROOT) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="quick-cpu-") as tmp:
        out = os.path.join(tmp, "report.json")
        t0 = time.monotonic()
        proc = subprocess.Popen([*argv, "--json", out], cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, env=env)
        seen: Dict[str, Optional[float]] = {name: None for name, _ in MILESTONES}
        assert proc.stderr is not None
        for line in proc.stderr:
            for name, prefix in MILESTONES:
                if seen[name] is None and prefix in line:
                    seen[name] = round(time.monotonic() - t0, 2)
        code = proc.wait()
        wall = round(time.monotonic() - t0, 2)
        report = json.loads(Path(out).read_text()) if os.path.exists(out) else {}
    checks = report.get("checks") or []
    s = report.get("summary") or {}
    return {"wall_s": wall, **{f"{k}_at_s": v for k, v in seen.items()}, "exit_code": code,
            "load_average_1m": round(os.getloadavg()[0], 2),  # a shared machine: what else ran meanwhile
            "payload_duration_s": report.get("duration_s"),
            "counts": f"{s.get('pass')}/{s.get('warn')}/{s.get('fail')}/{s.get('skip')}",
            "slowest": sorted(((c["id"], c.get("duration_s", 0)) for c in checks), key=lambda kv: -kv[1])[:4],
            "launch": report.get("launch")}


def series(label: str, argv: List[str], runs: int, env: Dict[str, str], root: str = ROOT) -> List[Dict[str, Any]]:
    out = []
    for i in range(runs):
        run = one_run(argv, env, root) | {"label": label, "run": "cold" if i == 0 else "warm"}
        print(json.dumps({k: run[k] for k in ("label", "run", "wall_s", "started_at_s", "header_at_s", "first_at_s")}),
              file=sys.stderr, flush=True)
        out.append(run)
    return out


def table(rows: List[Dict[str, Any]]) -> List[str]:
    lines = ["| mode | run | wall s | payload started s | torch imported (header) s | first check s | "
             "pass/warn/fail/skip | load (1 min) | slowest checks (s) |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | --- |"]
    for r in rows:
        slow = ", ".join(f"{k} {v}" for k, v in r["slowest"])
        lines.append(f"| {r['label']} | {r['run']} | {r['wall_s']} | {r['started_at_s']} | {r['header_at_s']} | "
                     f"{r['first_at_s']} | {r['counts']} | {r['load_average_1m']} | {slow} |")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--image", help="also run in a container of this image (a torch CPU image)")
    p.add_argument("--out", required=True)
    p.add_argument("--code", action="append", default=[], metavar="LABEL=DIR",
                   help="time the imagesmith tree in DIR (e.g. `git archive REV | tar -x -C DIR`), labelled LABEL, "
                        "in the order given (default: this tree); each tree's runs follow one another")
    args = p.parse_args()
    cli = [sys.executable, "-m", "imagesmith.cli", "verify", "--tier", "quick", "--gpus", "none"]
    rows: List[Dict[str, Any]] = []
    for code, root in [c.split("=", 1) for c in args.code] or [("this tree", ROOT)]:
        tree = dict(os.environ, PYTHONPATH=root)
        with tempfile.TemporaryDirectory(prefix="pycache-") as prefix:
            env = dict(tree, PYTHONPYCACHEPREFIX=prefix)  # a fresh bytecode cache: the first run compiles all
            rows += series(f"{code}: --local", [*cli, "--local"], args.runs, env, root)
        if args.image:
            rows += series(f"{code}: container", [*cli, args.image, "--no-pull"], args.runs, tree, root)
    lines = table(rows)
    print("\n".join(lines))
    doc = {"machine": f"{os.cpu_count()} CPUs, no GPU ({os.uname().nodename})", "python": sys.version.split()[0],
           "page_cache_dropped": False, "runs": rows, "table": lines}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(doc, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
