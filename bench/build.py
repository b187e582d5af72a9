"""Build benchmark: cold, warm and partial rebuilds of a matrix, image sizes,
and a naive single-stage Dockerfile of the kind blog posts show, side by side.

    python bench/build.py [--matrix examples/local.yaml] [--json bench/results/build-local.json]

A fresh Debian base is bootstrapped first (not timed) so that the cold build
reuses no layer of an earlier one; the naive image is built FROM that same
base and installs the same torch. Everything it makes is removed at the end
unless --keep.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from imagesmith.model import matrix, plan
from imagesmith.model.buildreport import BuildReport
from imagesmith.stages.building import build
from imagesmith.stages.tools import bootstrap

LOCAL_ROOTS = ("/opt/wheels", "/etc/ssl/certs")  # the folders examples/local.yaml names (make release allows them too)
from imagesmith.edges.engine import Engine  # noqa: E402

NAIVE = """\
FROM {base}
RUN apt-get update && apt-get install -y python3-pip
COPY ca.pem /ca.pem
ENV PIP_CERT=/ca.pem
RUN pip3 install --break-system-packages {torch}
"""


def timed_build(path: Path, engine: Engine, out: Path, **select: tuple[str, ...]) -> tuple[float, BuildReport]:
    m = matrix.load(path, allowed_roots=LOCAL_ROOTS)
    p = plan.expand(m, "20261130").select(**select)
    t0 = time.monotonic()
    report = build.Builder(p, m, engine, out, jobs=2).run()
    return time.monotonic() - t0, report


def naive_build(engine: Engine, base: str, torch: str, tag: str, ca: Path) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as ctx:
        Path(ctx, "Dockerfile").write_text(NAIVE.format(base=base, torch=torch))
        shutil.copy(ca, Path(ctx, "ca.pem"))
        t0 = time.monotonic()
        proc = subprocess.run(["docker", "build", "--network", "host", "-t", tag, ctx], capture_output=True, text=True)
        seconds = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"naive build failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    info = engine.image(tag)
    return seconds, info.size if info else 0


def with_base(src: Path, bases: dict[str, str], folder: Path, repository: str) -> Path:
    text = src.read_text().replace("repository: imagesmith/local", f"repository: {repository}")
    for old, new in bases.items():
        text = text.replace(old, new)
    for item in src.parent.iterdir():
        if item.is_dir():
            shutil.copytree(item, folder / item.name, dirs_exist_ok=True)
    path = folder / src.name
    path.write_text(text)
    return path


def cli_wall(path: Path, out: Path, only: str, layer: str) -> float:
    cmd = [sys.executable, "-m", "imagesmith.cli", "build", "-m", str(path), "--out", str(out), "--only", only, "--layer", layer, "-q",
           *(f"--allow-root={root}" for root in LOCAL_ROOTS)]
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.monotonic() - t0


def touch_project(path: Path) -> None:
    req = path.parent / "requirements" / "project.txt"
    req.write_text(req.read_text() + "six==1.17.0\n")


def row(name: str, seconds: float, report: BuildReport | None, note: str = "") -> dict:
    built = [r.target for r in report.results if r.status == "built"] if report else []
    return {"run": name, "seconds": round(seconds, 3), "built": len(built), "targets": len(report.results) if report else 1,
            "ok": report.ok if report else True, "note": note or ", ".join(t.rsplit("-", 1)[1] for t in built)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--matrix", default="examples/local.yaml", type=Path)
    ap.add_argument("--json", default="bench/results/build-local.json", type=Path)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    engine, run = Engine(), uuid.uuid4().hex[:6]
    base, _ = bootstrap.bootstrap(engine, "debian12", f"imagesmith-bench/debian:bookworm-{run}")
    trixie, _ = bootstrap.bootstrap(engine, "debian13", f"imagesmith-bench/debian:trixie-{run}")
    repository = f"imagesmith-bench/local-{run}"
    with tempfile.TemporaryDirectory() as tmp:
        path = with_base(args.matrix.resolve(), {"imagesmith/debian:bookworm": base, "imagesmith/debian:trixie": trixie},
                         Path(tmp), repository)
        out = Path(tmp, "build")
        rows, sizes = [], {}
        cold_s, cold = timed_build(path, engine, out)
        if not cold.ok:
            raise SystemExit("cold build failed: " + "; ".join(f"{r.target}: {r.error}" for r in cold.results if not r.ok))
        rows.append(row("cold", cold_s, cold))
        sizes = {r.target: r.size_bytes for r in cold.results}
        warm_s, warm = timed_build(path, engine, out)
        rows.append(row("warm (nothing changed)", warm_s, warm, f"{sum(r.status == 'cached' for r in warm.results)} cached"))
        one_s, one = timed_build(path, engine, out, only=("cu130-py3.11",), layers=("base",))
        rows.append(row("warm, the CUDA base alone", one_s, one, f"{sum(r.status == 'cached' for r in one.results)} cached"))
        cli_s = cli_wall(path, out, "cu130-py3.11", "base")
        rows.append({"run": "warm, CUDA base alone, CLI wall", "seconds": round(cli_s, 2), "built": 0, "targets": 1,
                     "ok": True, "note": "imagesmith build --only cu130-py3.11 --layer base, process start included"})
        touch_project(path)
        part_s, part = timed_build(path, engine, out)
        rows.append(row("project requirement changed", part_s, part))
        torch = next(r.facts["torch"].split("+")[0] for r in cold.results if r.target.endswith("cu130-py3.11-debian12-base") and r.facts)
        naive_tag = f"imagesmith-bench/naive:{run}"
        naive_cold, naive_size = naive_build(engine, base, f"torch=={torch}", naive_tag, Path("/etc/ssl/certs/ca-certificates.crt"))
        naive_warm, _ = naive_build(engine, base, f"torch=={torch}", naive_tag, Path("/etc/ssl/certs/ca-certificates.crt"))
        naive_layers = [(h["CreatedBy"][-70:], h["Size"]) for h in engine.history(naive_tag) if h["Size"] > 1e6]
        rows.append({"run": "naive cold (single stage)", "seconds": round(naive_cold, 1), "built": 1, "targets": 1, "ok": True, "note": f"torch=={torch}"})
        rows.append({"run": "naive warm (docker cache)", "seconds": round(naive_warm, 1), "built": 0, "targets": 1, "ok": True, "note": ""})
        ours = sizes.get(next(t for t in sizes if t.endswith("cu130-py3.11-debian12-base")), 0)
        result = {"schema": "imagesmith.bench-build/1", "matrix": str(args.matrix), "rows": rows,
                  "sizes_bytes": sizes, "naive_size_bytes": naive_size, "ours_cuda_base_bytes": ours,
                  "warm_over_cold": round(warm_s / cold_s, 4), "naive_layers": naive_layers,
                  "pip_cache_in_naive_bytes": pip_cache_bytes(naive_tag)}
        print_table(result)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        if not args.keep:
            caches = [f"imagesmith-cache:{r.context_hash.split(':', 1)[1]}" for rep in (cold, part) for r in rep.results if r.context_hash]
            cleanup(engine, [naive_tag] + [f"{repository}:{t}" for t in sizes] + sorted(set(caches)) + [base, trixie])


def pip_cache_bytes(tag: str) -> int:
    proc = subprocess.run(["docker", "run", "--rm", "--entrypoint", "du", tag, "-sb", "/root/.cache/pip"],
                          capture_output=True, text=True)
    return int(proc.stdout.split()[0]) if proc.returncode == 0 and proc.stdout else 0


def print_table(result: dict) -> None:
    print(f"\n{'run':34} {'seconds':>8} {'built':>6}  note")
    for r in result["rows"]:
        print(f"{r['run']:34} {r['seconds']:8.2f} {r['built']:>3}/{r['targets']:<2}  {r['note']}")
    print(f"\nwarm / cold = {result['warm_over_cold'] * 100:.2f}%\n\n{'image':44} {'size GB':>8}")
    for target, size in result["sizes_bytes"].items():
        print(f"{target:44} {size / 1e9:8.2f}")
    print(f"{'naive single-stage (same torch, same base)':44} {result['naive_size_bytes'] / 1e9:8.2f}")
    print("\nnaive image, layers over 1 MB:")
    for created_by, size in result["naive_layers"]:
        print(f"  {size / 1e9:6.2f} GB  {created_by}")
    print(f"  of which pip's cache (/root/.cache/pip): {result['pip_cache_in_naive_bytes'] / 1e9:.2f} GB")


def cleanup(engine: Engine, refs: list[str]) -> None:
    for ref in refs:
        try:
            engine.remove_image(ref)
        except Exception as exc:  # noqa: BLE001 - best effort, say what stayed
            print(f"could not remove {ref}: {exc}", file=sys.stderr)


if __name__ == "__main__":
    main()
