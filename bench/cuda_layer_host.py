"""Host-mode proof of the shared CUDA layer, for a GPU host without Docker.

    python3 bench/cuda_layer_host.py [--tier quick] [--out bench/results/h200-cuda-layer.json] [--keep] [--cpu]

1. Takes this Python's own CUDA wheels: the installed nvidia-* distributions
   (and metapackages such as cuda-toolkit) whose WHEEL tags are py3-none, i.e.
   the set imagesmith puts in the shared layer.
2. Lays them out under <tmp>/opt/imagesmith/cuda exactly as the image layer does
   (imagesmith.render.cudalayer.tar_entries: same paths, modes and clamped times,
   INSTALLER and RECORD as in the layer; no .pyc).
3. Makes a venv that sees every other package of this Python (symlinks; torch's
   own libraries and extension copied, so that no RPATH can reach the original
   nvidia/ folder), but not the CUDA wheels, plus imagesmith-cuda.pth naming the
   new prefix: the originals are hidden, as in an image.
4. Runs the payload (verify/run.py) on the GPU with --expect
   cuda_libs=<prefix>: versions, library loads, kernels, NCCL, and libs.origin,
   which fails if any CUDA library torch loaded comes from elsewhere.

Standard library + imagesmith.render.cudalayer (run from the repository root, no
install). Exit status: the payload's. Takes about a minute (copying ~4 GB and
the quick tier).
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imagesmith.render import cudalayer  # noqa: E402


def is_cuda_wheel(dist: md.Distribution) -> bool:
    name = (dist.metadata["Name"] or "").lower()
    if not (name.startswith("nvidia-") or name == "cuda-toolkit"):
        return False
    tags = [line.split(":", 1)[1].strip() for line in (dist.read_text("WHEEL") or "").splitlines() if line.startswith("Tag:")]
    return bool(tags) and all(t.split("-")[1] == "none" and t.split("-")[0] in ("py2", "py3", "py2.py3") for t in tags)


def cuda_dists() -> list[md.Distribution]:
    seen, out = set(), []
    for dist in md.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name not in seen and is_cuda_wheel(dist):
            seen.add(name)
            out.append(dist)
    return out


def installed_sources(dist: md.Distribution, epoch: int | None) -> list[cudalayer.Source]:
    """The files of an installed distribution as layer sources (INSTALLER rewritten, no bytecode)."""
    out = []
    for f in dist.files or ():
        rel = cudalayer.safe_path(str(f), dist.metadata["Name"])
        if cudalayer.skipped(rel) or rel.endswith((".dist-info/INSTALLER", ".dist-info/REQUESTED", ".dist-info/direct_url.json")):
            continue
        path = Path(str(f.locate()))
        if not path.is_file():
            continue
        st = path.stat()
        out.append(cudalayer.Source(rel, st.st_size, cudalayer.clamp(int(st.st_mtime), epoch), bool(st.st_mode & 0o111), str(path)))
    info_dir = next((s.path.split("/", 1)[0] for s in out if ".dist-info/" in s.path), None)
    if info_dir:
        out.append(cudalayer.Source(f"{info_dir}/INSTALLER", len(cudalayer.INSTALLER), 0, False, data=cudalayer.INSTALLER))
    return out


def lay_out(sources: list[cudalayer.Source], root: Path) -> None:
    """Create every entry of the layer under ``root`` with its mode and time."""
    entries = cudalayer.tar_entries(sources)
    for info, src in entries:
        dest = root / info.name
        if src is None:
            dest.mkdir(parents=True, exist_ok=True)
        elif src.data is not None:
            dest.write_bytes(src.data)
        else:
            shutil.copyfile(src.origin, dest)
        if src is not None:
            os.chmod(dest, info.mode)
            os.utime(dest, (info.mtime, info.mtime))
    for info, src in reversed(entries):
        if src is None:
            os.chmod(root / info.name, info.mode)
            os.utime(root / info.name, (info.mtime, info.mtime))


def site_dirs() -> list[Path]:
    paths = [Path(p) for p in sys.path if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]
    return list(dict.fromkeys(paths))


def shadow_venv(venv: Path, hidden: set[str], prefix: str) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    for folder in site_dirs():
        for entry in sorted(folder.iterdir()):
            target = site / entry.name
            if entry.name in hidden or target.exists() or target.is_symlink():
                continue
            if entry.name == "torch":
                copy_torch(entry, target)
            else:
                target.symlink_to(entry)
    pth = site / cudalayer.PTH_NAME  # never linked (hidden_names): writing it cannot reach the original
    pth.write_text(cudalayer.pth_line(prefix))
    return venv / "bin" / "python"


def copy_torch(src: Path, dest: Path) -> None:
    """torch with real copies of lib/ and the extension modules (their RPATH $ORIGIN
    must not lead back to the original site-packages), the rest linked."""
    dest.mkdir()
    for entry in src.iterdir():
        if entry.name == "lib":
            shutil.copytree(entry, dest / "lib", symlinks=True)
        elif entry.suffix == ".so":
            shutil.copy2(entry, dest / entry.name)
        else:
            (dest / entry.name).symlink_to(entry)


def hidden_names(dists: list[md.Distribution]) -> set[str]:
    """Top-level entries of site-packages that belong to the CUDA wheels."""
    names = {cudalayer.PTH_NAME}  # an image's own .pth would lead back to its CUDA layer
    for dist in dists:
        for f in dist.files or ():
            names.add(str(f).split("/", 1)[0])
    return names


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tier", default="quick")
    ap.add_argument("--out", default="bench/results/h200-cuda-layer.json")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    ap.add_argument("--cpu", action="store_true", help="a dry run without a GPU (no --require-gpu)")
    args = ap.parse_args()
    dists = cuda_dists()
    if not dists:
        print("no CUDA wheels (nvidia-*) installed for this Python", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="imagesmith-cuda-layer-"))
    try:
        prefix = tmp / cudalayer.PREFIX.lstrip("/")
        sources = sorted((s for d in dists for s in installed_sources(d, cudalayer.source_date_epoch())), key=lambda s: s.path.split("/"))
        lay_out(sources, tmp)
        python = shadow_venv(tmp / "venv", hidden_names(dists), str(prefix))
        print(f"{len(dists)} CUDA wheels ({sum(s.size for s in sources) / 1e9:.2f} GB) laid out at {prefix}; "
              f"originals hidden from {python}", flush=True)
        cmd = [str(python), str(ROOT / "verify" / "run.py"), "--tier", args.tier, "--expect", f"cuda_libs={prefix}",
               "--out", args.out] + ([] if args.cpu else ["--require-gpu"])
        return subprocess.run(cmd, cwd=ROOT).returncode
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
