"""Render benchmark: a generated matrix of ~7,400 targets, timed stage by stage.

    .venv/bin/python bench/render.py [--cells 1850] [--json FILE]
    IMAGESMITH_ROOT=/path/to/other/checkout .venv/bin/python bench/render.py   # the same on other code

The matrix lists every valid (torch, CUDA, Python, OS) cell of the knowledge
base under ``include`` (the first N of them) with four layers (base, cv, nlp,
project with a requirements file, labels, env, apt packages, services), so
each cell makes four targets. Stages: load + validate, plan, render in
memory (with the parse-back check), write the contexts to an empty folder,
``render --check`` against them, and the whole ``imagesmith render`` command
in a fresh process. Prints a table (wall time, and user and system CPU time:
on a busy machine CPU time is the steadier figure, and system time is the
file system's); ``--json`` also writes the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(os.environ.get("IMAGESMITH_ROOT") or Path(__file__).resolve().parent.parent)  # another checkout: "before"
sys.path.insert(0, str(ROOT))

from imagesmith.model import compat, matrix, plan  # noqa: E402
from imagesmith.render import contexts as render  # noqa: E402

HEAD = """\
version: 1
image:
  repository: ml/bench
  registry: harbor.example.com
  labels: {org.opencontainers.image.vendor: "Example Corp", org.opencontainers.image.source: "https://git.example.com/x"}
layers:
  base: {apt: [curl, git], env: {HF_HOME: /cache/hf, OMP_NUM_THREADS: "8"}}
  cv: {packages: [torchvision, "opencv-python-headless==4.14.0.94"]}
  nlp: {packages: ["transformers==4.57.6", "tokenizers==0.22.1"]}
  project:
    parent: cv
    requirements: requirements.txt
    services:
      jupyter: {enabled: true, bind: 0.0.0.0, port: 8888}
      sshd: {enabled: true, port: 2222}
tags:
  immutable: "{torch}-{accel}-py{python}-{os}-{layer}-{date}"
sources:
  torch_index_url: "https://download.pytorch.org/whl/{variant}"
  index_url: https://pypi.org/simple
matrix:
  torch: []
  cuda: []
  python: []
  os: []
  include:
"""


def cells(kb: compat.KnowledgeBase, n: int) -> list[tuple[str, str, str, str]]:
    """The first ``n`` valid cells: every torch patch release x variant x Python x OS."""
    out = []
    for version in kb.torch_versions():
        release = kb.torch[version]
        if release.torchvision is None:
            continue
        for variant in release.variants.values():
            for python in release.python:
                out += [(version, variant.cuda or "cpu", python, os_key) for os_key in kb.os]
    return out[:n]


def generate(folder: Path, n: int) -> Path:
    kb = compat.load()
    rows = "".join(f'    - {{torch: "{t}", cuda: "{c}", python: "{p}", os: {o}}}\n' for t, c, p, o in cells(kb, n))
    (folder / "requirements.txt").write_text("rich==15.0.0\ntabulate==0.9.0\n")
    path = folder / "matrix.yaml"
    path.write_text(HEAD + rows)
    return path


def timed(label: str, rows: list[tuple[str, float, float, float]], fn, *args):  # type: ignore[no-untyped-def]
    t0, c0 = time.perf_counter(), os.times()
    result = fn(*args)
    c1 = os.times()
    rows.append((label, time.perf_counter() - t0, c1.user - c0.user, c1.system - c0.system))
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", type=int, default=1850)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows: list[tuple[str, float, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="imagesmith-bench-") as tmp:
        folder = Path(tmp)
        path = generate(folder, args.cells)
        m = timed("load + validate", rows, matrix.load, path)
        p = timed("plan", rows, plan.expand, m, "20261130")
        contexts = timed("render (in memory)", rows, render.render_all, p, m)
        timed("write contexts", rows, render.write, contexts, folder / "out")
        drift = timed("check (render --check)", rows, render.check, contexts, folder / "out")
        assert not drift, drift[:3]
        cmd = [sys.executable, "-m", "imagesmith.cli", "render", "-m", str(path), "--out", str(folder / "cli")]
        env = dict(os.environ, PYTHONPATH=str(ROOT), SOURCE_DATE_EPOCH="1796083200")
        t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=folder)  # not the checkout: -m imports from the cwd first
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        rows.append(("imagesmith render (whole command)", time.perf_counter() - t0,
                     c1.ru_utime - c0.ru_utime, c1.ru_stime - c0.ru_stime))
        assert proc.returncode == 0, proc.stderr[-2000:]
    targets = len(p.targets)
    width = max(len(r[0]) for r in rows)
    load = os.getloadavg()[0]
    print(f"render benchmark: {len(m.cells)} cells, {targets} targets (load average {load:.1f} on {os.cpu_count()} CPUs)")
    print(f"| {'stage'.ljust(width)} | wall s | user CPU s | system CPU s |")
    print(f"| {'-' * width} | ---: | ---: | ---: |")
    for label, seconds, user, system in rows:
        print(f"| {label.ljust(width)} | {seconds:.2f} | {user:.2f} | {system:.2f} |")
    if args.json:
        args.json.write_text(json.dumps({"cells": len(m.cells), "targets": targets, "load_average": load,
                                         "wall_s": {r[0]: round(r[1], 3) for r in rows},
                                         "user_s": {r[0]: round(r[2], 3) for r in rows},
                                         "system_s": {r[0]: round(r[3], 3) for r in rows}}, indent=2) + "\n")


if __name__ == "__main__":
    main()
