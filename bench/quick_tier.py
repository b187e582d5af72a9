#!/usr/bin/env python3
"""Quick tier wall time, cold then warm: `imagesmith verify --local --tier quick`, from the command to the verdict.

    python3 bench/quick_tier.py --runs 3 --label h200 --out bench/results/quick-tier-h200.json [-- EXTRA VERIFY ARGS]

Run 1 is cold: the page cache is dropped first where this user may (root on the device machine;
`cold_cache_dropped` says whether it was), and it is the first run of the machine's session.
Each run's stderr is read line by line as it comes: the time to the payload's first progress line
("[ 1/N] ...") is the time before the first check. Prints a table; writes every figure to --out.
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


def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
        return True
    except OSError:
        return False


def one_run(extra: List[str]) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="quick-tier-") as tmp:
        out = os.path.join(tmp, "report.json")
        argv = [sys.executable, "-m", "imagesmith.cli", "verify", "--local", "--tier", "quick", "--json", out, *extra]
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        first: Optional[float] = None
        lines = []
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if first is None and line.startswith("[ 1/"):
                first = time.monotonic() - t0
        code = proc.wait()
        wall = time.monotonic() - t0
        report = json.loads(Path(out).read_text()) if os.path.exists(out) else {}
    checks = report.get("checks") or []
    return {"wall_s": round(wall, 2), "first_check_at_s": None if first is None else round(first, 2),
            "payload_duration_s": report.get("duration_s"), "exit_code": code,
            "summary": report.get("summary"), "sharing": report.get("sharing"),
            "checks": {c["id"]: [c["status"], c["duration_s"]] for c in checks},
            "log_tail": lines[-4:]}


def table(runs: List[Dict[str, Any]]) -> List[str]:
    rows = ["| run | wall s | before 1st check s | payload s | pass/warn/fail/skip | slowest checks |",
            "| --- | ---: | ---: | ---: | --- | --- |"]
    for i, r in enumerate(runs):
        s = r["summary"] or {}
        slow = sorted(r["checks"].items(), key=lambda kv: -kv[1][1])[:3]
        rows.append(f"| {'cold' if i == 0 else 'warm'} {i + 1} | {r['wall_s']} | {r['first_check_at_s']} | "
                    f"{r['payload_duration_s']} | {s.get('pass')}/{s.get('warn')}/{s.get('fail')}/{s.get('skip')} | "
                    + ", ".join(f"{k} {v[1]}" for k, v in slow) + " |")
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--label", default="h200")
    p.add_argument("--out", required=True)
    p.add_argument("extra", nargs="*", help="more `imagesmith verify` arguments (after --)")
    args = p.parse_args()
    dropped = drop_caches()
    runs = [one_run(args.extra) for _ in range(args.runs)]
    rows = table(runs)
    print("\n".join(rows))
    doc = {"label": args.label, "command": "imagesmith verify --local --tier quick " + " ".join(args.extra),
           "cold_cache_dropped": dropped, "runs": runs, "table": rows}
    with open(args.out, "w") as fh:
        json.dump(doc, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
