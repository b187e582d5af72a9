"""Evidence figures from a release report: per released digest, each artifact
with its manifest and layer bytes, pushed or unchanged, and the seconds the
evidence step took (inventory run in the image + registry round trips).

    .venv/bin/python bench/evidence.py build/release.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(path: str) -> None:
    report = json.loads(Path(path).read_text())
    print(f"{'target':40} {'artifact':16} {'status':9} {'manifest B':>10} {'layer B':>9}")
    for t in report["targets"]:
        ev = t.get("evidence") or {}
        for a in ev.get("artifacts", []):
            print(f"{t['target']:40} {a['kind']:16} {a['status']:9} {a.get('size') or 0:>10} {a.get('layer_size') or 0:>9}")
        if ev:
            print(f"{'':40} {'(digest total)':16} {ev.get('pushed', 0):>2} pushed {'':>8} pushed {ev.get('pushed_bytes', 0)} B "
                  f"in {ev.get('seconds', 0):.2f} s (+ {ev.get('inventory_seconds', 0):.2f} s measuring the image)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build/release.json")
