"""The shared CUDA layer against today's layout, measured in one run.

    python bench/cuda_layer.py [--matrix examples/local.yaml] [--json bench/results/cuda-layer-local.json] [--keep]

Two layouts of the same matrix: ``today`` (layers.base.cuda_libs: venv: the
nvidia-* wheels inside each cell's venv, one COPY) and ``shared`` (the wheels
in one layer per set, directly on the OS base). For each, on fresh copies of
the same Debian bases (no build cache carries over):

  cold      `imagesmith build` of the matrix, every target built (seconds);
  sizes     every image, and the CUDA bases against a naive single-stage image;
  release   a push of every image into an empty registry (scripts/local-registry.sh
            on a free port): bytes on disk after it, bytes each push sent, layers
            the registry already had;
  pull      a second engine (its own dockerd, data root and socket; the main engine
            is never touched) pulls one CUDA cell, then a sibling image with the
            same torch/CUDA on the same OS: the bytes of that second pull.

This machine cannot install a second Python on bookworm (python-build-standalone
comes from GitHub, which is not reachable here), so the sibling is the bookworm
CUDA cell's base built from a second matrix whose base layer adds one pip and
one apt package: its venv, apt and user layers are its own, as a cell with
another Python would have them; only the OS and (shared layout) the CUDA
layer are common.

Then the planning estimate for the production matrix.yaml (20 CUDA cells),
from the knowledge base's wheel sizes and the compressed sizes measured here.
Everything made is removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import docker
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import build as buildbench  # noqa: E402  (bench/build.py: the naive image)
from imagesmith.edges.engine import Engine  # noqa: E402
from imagesmith.edges.registry import Credentials, Registry  # noqa: E402
from imagesmith.model import compat, footprint, matrix, plan  # noqa: E402
from imagesmith.stages.building import build, buildreport  # noqa: E402
from imagesmith.stages.release import publish  # noqa: E402
from imagesmith.stages.tools import bootstrap  # noqa: E402
from imagesmith.units import gb  # noqa: E402

LAYOUTS = ("shared", "today")  # shared first: any cache in the proxy helps today's layout, not ours
DATE = "20261130"


# -- helpers -------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clone_base(engine: Engine, ref: str, tag: str) -> str:
    """A fresh image of the same root file system (new image ID: no build cache applies)."""
    container = engine.client.containers.create(ref, ["true"])
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tar = Path(tmp, "rootfs.tar")
            with tar.open("wb") as fh:
                for chunk in container.export():
                    fh.write(chunk)
            repo, name = tag.split(":", 1)
            return engine.import_rootfs(tar, repo, name, ["ENV LANG=C.UTF-8", 'CMD ["bash"]'])
    finally:
        container.remove(force=True)


def layout_matrix(src: Path, folder: Path, layout: str, bases: dict[str, str], repository: str,
                  sibling: bool = False) -> Path:
    """``src`` with this layout, these bases and repository; ``sibling``: only the bookworm CUDA
    cell's base, with one more pip and apt package."""
    data = yaml.safe_load(src.read_text())
    data["image"]["repository"] = repository
    data["base_images"] = bases
    data["layers"]["base"]["cuda_libs"] = "venv" if layout == "today" else "shared"
    if sibling:
        cuda = data["matrix"]["cuda"]
        data["matrix"] = {"torch": data["matrix"]["torch"], "cuda": cuda, "python": ["3.11"], "os": ["debian12"]}
        data["layers"] = {"base": dict(data["layers"]["base"], packages=["six==1.17.0"], apt=["less"])}
        data["tags"] = {"immutable": "sibling-{torch}-{accel}-py{python}-{os}-{layer}-{date}"}
    for item in src.parent.iterdir():
        if item.is_dir():
            shutil.copytree(item, folder / item.name, dirs_exist_ok=True)
    path = folder / ("sibling.yaml" if sibling else src.name)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def cold_build(path: Path, engine: Engine, out: Path) -> tuple[float, buildreport.BuildReport]:
    m = matrix.load(path, allowed_roots=buildbench.LOCAL_ROOTS)
    t0 = time.monotonic()
    report = build.Builder(plan.expand(m, DATE), m, engine, out, jobs=2).run()
    seconds = time.monotonic() - t0
    if not report.ok:
        raise SystemExit(f"{path.name}: build failed: " + "; ".join(f"{r.target}: {r.error}" for r in report.results if not r.ok))
    return seconds, report


class LocalRegistry:
    """scripts/local-registry.sh on a free port with its own folder."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port = folder, free_port()
        self.env = dict(os.environ, IMAGESMITH_REGISTRY_DIR=str(folder), IMAGESMITH_REGISTRY_PORT=str(self.port))

    def __enter__(self) -> "LocalRegistry":
        subprocess.run(["bash", str(ROOT / "scripts" / "local-registry.sh"), "start"], env=self.env, check=True,
                       capture_output=True)
        user, password = (self.folder / "credentials").read_text().strip().split(":", 1)
        self.auth = {"username": user, "password": password}
        self.client = Registry(self.host, Credentials(user, password, "bench"))
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["bash", str(ROOT / "scripts" / "local-registry.sh"), "stop"], env=self.env, capture_output=True)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stored_bytes(self) -> tuple[int, int]:
        blobs = [p for p in (self.folder / "data").rglob("data") if p.is_file() and "/blobs/" in str(p)]
        return sum(p.stat().st_size for p in blobs), len(blobs)


def push_all(engine: Engine, reg: LocalRegistry, repo: str, images: list[tuple[str, str]]) -> tuple[float, dict[str, Any]]:
    """Push (target, image ID) pairs in order; what each push sent."""
    name, out = f"{reg.host}/{repo}", {}
    t0 = time.monotonic()
    for target, image_id in images:
        lines: list[str] = []
        engine.tag(image_id, name, target)
        engine.push(name, target, reg.auth, lines.append)
        manifest = reg.client.manifest(repo, target)
        config = reg.client.config(repo, image_id)
        assert manifest is not None
        diff_ids = config["rootfs"]["diff_ids"]
        traffic = publish.traffic(manifest.raw, diff_ids, lines)
        layers = [{"diff_id": d, "digest": layer["digest"], "size": layer["size"]} for d, layer in zip(diff_ids, json.loads(manifest.raw)["layers"])]
        out[target] = dict(traffic.__dict__) | {"layers": layers}
        engine.untag(f"{name}:{target}")
    return time.monotonic() - t0, out


class SecondEngine:
    """A dockerd of our own: fresh data root, own exec root, socket and bridge, no iptables.

    Never ``--bridge none``: dockerd then deletes the host's docker0 (the main
    engine's bridge). It gets a bridge interface of its own instead."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.sock = folder / "docker.sock"
        self.bridge = f"isb{uuid.uuid4().hex[:8]}"

    def __enter__(self) -> "SecondEngine":
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "daemon.json").write_text("{}")
        for cmd in (["link", "add", "name", self.bridge, "type", "bridge"], ["addr", "add", "10.213.13.1/24", "dev", self.bridge]):
            subprocess.run(["ip", *cmd], check=True)
        self.log = (self.folder / "dockerd.log").open("w")
        self.proc = subprocess.Popen(
            ["dockerd", "--config-file", str(self.folder / "daemon.json"), "--data-root", str(self.folder / "root"),
             "--exec-root", str(self.folder / "exec"), "--pidfile", str(self.folder / "docker.pid"),
             "--host", f"unix://{self.sock}", "--bridge", self.bridge, "--iptables=false", "--ip-masq=false",
             "--ip-forward=false"],
            stdout=self.log, stderr=self.log, start_new_session=True)
        for _ in range(300):
            try:
                self.client = docker.DockerClient(base_url=f"unix://{self.sock}", timeout=900)
                self.client.ping()
                return self
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.2)
        self.__exit__()
        raise SystemExit(f"second dockerd did not start: {(self.folder / 'dockerd.log').read_text()[-1500:]}")

    def __exit__(self, *exc: object) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()
        subprocess.run(["ip", "link", "delete", self.bridge], check=False)
        subprocess.run(["rm", "-rf", str(self.folder / "root"), str(self.folder / "exec")], check=False)

    def pull(self, reg: LocalRegistry, repo: str, tag: str) -> dict[str, Any]:
        """Pull and count: the layers downloaded (with their registry sizes) and those already here."""
        manifest = reg.client.manifest(repo, tag)
        assert manifest is not None
        sizes = {layer["digest"].split(":", 1)[1][:12]: int(layer["size"]) for layer in json.loads(manifest.raw)["layers"]}
        status: dict[str, str] = {}
        t0 = time.monotonic()
        for event in self.client.api.pull(f"{reg.host}/{repo}", tag=tag, auth_config=reg.auth, stream=True, decode=True):
            if "error" in event:
                raise SystemExit(f"pull {repo}:{tag}: {event['error']}")
            if event.get("id") in sizes and event.get("status") in ("Pull complete", "Already exists"):
                status[event["id"]] = event["status"]
        pulled = [d for d, s in status.items() if s == "Pull complete"]
        return {"seconds": round(time.monotonic() - t0, 1), "pulled_bytes": sum(sizes[d] for d in pulled),
                "pulled_layers": len(pulled), "present_layers": sum(s == "Already exists" for s in status.values()),
                "image_bytes": sum(sizes.values())}


# -- one layout -------------------------------------------------------------------------------


def run_layout(layout: str, src: Path, engine: Engine, bases: dict[str, str], run: str, work: Path, keep: bool) -> dict[str, Any]:
    folder = work / layout
    folder.mkdir()
    clones = {os_key: f"imagesmith-bench/{layout}-{os_key}:{run}" for os_key in bases}
    for os_key, ref in bases.items():
        clone_base(engine, ref, clones[os_key])
    repository = f"imagesmith-bench/{layout}-{run}"
    path = layout_matrix(src, folder, layout, clones, repository)
    print(f"[{layout}] cold build of {src.name} ...", flush=True)
    cold_s, report = cold_build(path, engine, folder / "build")
    print(f"[{layout}] cold build: {cold_s:.1f} s; the sibling image ...", flush=True)
    _, sibling = cold_build(layout_matrix(src, folder, layout, clones, repository, sibling=True), engine, folder / "sibling")
    targets = [(r.target, r.image_id or "") for r in report.results]
    cuda_bookworm = next(t for t, _ in targets if "cu" in t and "debian12-base" in t)
    result: dict[str, Any] = {
        "cold_seconds": round(cold_s, 1), "built": sum(r.status == "built" for r in report.results), "targets": len(targets),
        "sizes_bytes": {r.target: r.size_bytes for r in report.results},
        "cuda_layers": report.to_json()["cuda_layers"], "build_report": report.to_json()}
    result["cleanup"] = [f"{repository}:{t}" for t, _ in targets] + [clones[k] for k in clones]
    result["cache_tags"] = [f"imagesmith-cache:{r.context_hash.split(':', 1)[1]}" for rep in (report, sibling)
                            for r in rep.results if r.context_hash]
    result["sibling_image"] = sibling.results[0].image_id
    with LocalRegistry(folder / "registry") as reg:
        push_s, pushes = push_all(engine, reg, "bench/cells", targets)
        result["registry_bytes"], result["registry_blobs"] = reg.stored_bytes()
        result["push_seconds"], result["pushes"] = round(push_s, 1), pushes
        _, sib_push = push_all(engine, reg, "bench/cells", [("sibling", sibling.results[0].image_id or "")])
        result["pushes"]["sibling"] = sib_push["sibling"]
        if not keep:  # disk: the second engine's copies replace the first's
            cleanup_layout(engine, result)
        with SecondEngine(folder / "engine") as second:
            result["pull_first"] = second.pull(reg, "bench/cells", cuda_bookworm)
            result["pull_sibling"] = second.pull(reg, "bench/cells", "sibling")
    shutil.rmtree(folder / "registry", ignore_errors=True)
    return result


def cleanup_layout(engine: Engine, result: dict[str, Any]) -> None:
    """Every image the layout made, by ID (a forced removal drops all its tags: the repository's,
    the cache index's and the checkout's owner tags), children before parents, CUDA images last."""
    ids = [result.get("sibling_image") or ""]
    ids += [t["image_id"] or "" for t in reversed(result["build_report"]["targets"])]
    ids += [c["image_id"] for c in result.get("cuda_layers", []) if c.get("image_id")]
    buildbench.cleanup(engine, [i for i in dict.fromkeys(ids) if i] + result["cleanup"] + result["cache_tags"])


# -- the production estimate ----------------------------------------------------------------------


def estimate(shared: dict[str, Any]) -> dict[str, Any]:
    """matrix.yaml's registry bytes, both ways. CUDA wheel sets: the knowledge base's wheel
    bytes times the blob/wheel ratio measured here; every other layer: as measured here for the
    same kind of target (a CUDA base's own layers, each child layer kind). OS bases are left out
    (tens of MB, the same both ways)."""
    kb = compat.load()
    local = plan.expand(matrix.load(ROOT / "examples" / "local.yaml", allowed_roots=buildbench.LOCAL_ROOTS), DATE)
    cuda = shared["cuda_layers"][0]
    base = next(t for t in shared["pushes"] if "cu" in t and t.endswith("debian12-base"))
    layers = shared["pushes"][base]["layers"]
    blob = next(layer["size"] for layer in layers if layer["diff_id"] == cuda["diff_id"])
    ratio = blob / next(t.cuda_set.wheel_bytes for t in local.targets if t.cuda_set)
    cut = [layer["diff_id"] for layer in layers].index(cuda["diff_id"]) + 1  # after the OS base and the CUDA layer
    own = sum(layer["size"] for layer in layers[cut:])
    children = {t.rsplit("-", 1)[1]: push["pushed_bytes"] for t, push in shared["pushes"].items()
                if "cu" in t and t != "sibling" and not t.endswith("base")}
    prod = plan.expand(matrix.load(ROOT / "matrix.yaml", allowed_roots=buildbench.LOCAL_ROOTS), DATE)
    est = footprint.estimate(prod, kb)
    cells = [t for t in prod.targets if t.parent is None and t.versions.cuda != "cpu"]
    unknown = [t for t in cells if not footprint.variant_wheels(t, kb)]
    fill = est.today_bytes / max(1, len(cells) - len(unknown)) * len(unknown)  # unrecorded sets: the mean, per cell
    kids = sum(children.get(t.layer, 0) for t in prod.targets if t.parent)
    cuda_today, cuda_shared = (est.today_bytes + fill) * ratio, (est.shared_bytes + fill) * ratio
    return {"cells": len(cells), "sets_shared": est.sets, "unrecorded": list(est.unknown), "blob_over_wheels": round(ratio, 3),
            "own_bytes_per_cuda_base": own, "child_bytes": children, "children": sum(1 for t in prod.targets if t.parent),
            "cuda_today_bytes": int(cuda_today), "cuda_shared_bytes": int(cuda_shared),
            "today_bytes": int(cuda_today + own * len(cells) + kids), "shared_bytes": int(cuda_shared + own * len(cells) + kids)}


# -- report -------------------------------------------------------------------------------------


def figures(results: dict[str, dict[str, Any]], naive: int) -> list[tuple[str, str, str, str, str]]:
    t, s = results["today"], results["shared"]
    second = lambda r: next(v for k, v in r["pushes"].items() if "py3.13" in k and k.endswith("base"))  # noqa: E731
    base = lambda r: next(v for k, v in r["sizes_bytes"].items() if "cu" in k and k.endswith("debian12-base"))  # noqa: E731
    rows = [
        ("registry bytes after the release of examples/local.yaml", gb(t["registry_bytes"]), gb(s["registry_bytes"]),
         f"{s['registry_bytes'] / t['registry_bytes']:.2f}x", "<= 0.6x"),
        ("bytes pushed for the second CUDA cell (py3.13 trixie)", gb(second(t)["pushed_bytes"]), gb(second(s)["pushed_bytes"]),
         f"{second(s)['pushed_bytes'] / second(t)['pushed_bytes']:.2f}x", "<= 1.5 GB"),
        ("bytes pulled for a sibling cell, same torch/CUDA and OS", gb(t["pull_sibling"]["pulled_bytes"]),
         gb(s["pull_sibling"]["pulled_bytes"]), f"{s['pull_sibling']['pulled_bytes'] / t['pull_sibling']['pulled_bytes']:.2f}x",
         "<= 1.5 GB"),
        ("cold build of examples/local.yaml, seconds", f"{t['cold_seconds']:.0f}", f"{s['cold_seconds']:.0f}",
         f"{s['cold_seconds'] / t['cold_seconds']:.2f}x", "<= 0.7x"),
        ("CUDA base (py3.11 bookworm) vs naive single-stage image", f"{gb(base(t))} ({base(t) / naive:.2f}x)",
         f"{gb(base(s))} ({base(s) / naive:.2f}x)", f"naive {gb(naive)}", "<= 0.9x naive"),
        ("push of the whole release, seconds", f"{t['push_seconds']:.0f}", f"{s['push_seconds']:.0f}",
         f"{s['push_seconds'] / t['push_seconds']:.2f}x", ""),
    ]
    return rows


def print_table(rows: list[tuple[str, ...]], est: dict[str, Any]) -> None:
    print(f"\n{'figure':58} {'today':>18} {'shared layer':>18} {'ratio':>12}  goal")
    for r in rows:
        print(f"{r[0]:58} {r[1]:>18} {r[2]:>18} {r[3]:>12}  {r[4]}")
    print(f"\nmatrix.yaml ({est['cells']} CUDA cells, {est['sets_shared']} shared sets): registry about "
          f"{est['today_bytes'] / 1e9:.1f} GB today, {est['shared_bytes'] / 1e9:.1f} GB with the shared layer "
          f"(CUDA wheels {est['cuda_today_bytes'] / 1e9:.1f} -> {est['cuda_shared_bytes'] / 1e9:.1f} GB)")


def write_partial(path: Path, matrix_path: Path, results: dict[str, dict[str, Any]]) -> None:
    drop = ("build_report", "cleanup", "cache_tags")
    layouts = {name: {k: v for k, v in r.items() if k not in drop} for name, r in results.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": "imagesmith.bench-cuda-layer/1", "matrix": str(matrix_path), "partial": True,
                                "layouts": layouts}, indent=2) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--matrix", default="examples/local.yaml", type=Path)
    ap.add_argument("--json", default="bench/results/cuda-layer-local.json", type=Path)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    engine, run = Engine(), uuid.uuid4().hex[:6]
    bases = {"debian12": bootstrap.bootstrap(engine, "debian12", f"imagesmith-bench/debian:bookworm-{run}")[0],
             "debian13": bootstrap.bootstrap(engine, "debian13", f"imagesmith-bench/debian:trixie-{run}")[0]}
    results: dict[str, dict[str, Any]] = {}
    naive_tag = f"imagesmith-bench/naive:{run}"
    with tempfile.TemporaryDirectory(prefix="imagesmith-bench-") as tmp:
        try:
            for layout in LAYOUTS:
                results[layout] = run_layout(layout, args.matrix.resolve(), engine, bases, run, Path(tmp), args.keep)
                write_partial(args.json, args.matrix, results)  # a stopped run keeps what it measured
            torch = "2.14.1"
            _, naive = buildbench.naive_build(engine, bases["debian12"], f"torch=={torch}", naive_tag,
                                              Path("/etc/ssl/certs/ca-certificates.crt"))
        finally:
            if not args.keep:
                mine = [t for img in engine.client.images.list() for t in img.tags if t.startswith("imagesmith-bench/") and run in t]
                buildbench.cleanup(engine, [naive_tag, *mine, *bases.values()])
    est = estimate(results["shared"])
    rows = figures(results, naive)
    print_table(rows, est)
    for r in results.values():
        r.pop("build_report", None)
        r.pop("cleanup", None)
        r.pop("cache_tags", None)
    out = {"schema": "imagesmith.bench-cuda-layer/1", "matrix": str(args.matrix), "figures": [list(r) for r in rows],
           "naive_bytes": naive, "layouts": results, "estimate_matrix_yaml": est}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
