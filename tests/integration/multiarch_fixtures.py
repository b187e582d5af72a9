"""A small image with Debian's Python and no torch, for each platform: what the integration tier uses to exercise
the platform axis (issue 24) without an emulated debootstrap (minutes under QEMU).

``debootstrap --download-only`` fetches Debian 12's minbase with ``python3-minimal`` and its standard library for
the architecture; every package is unpacked with ``dpkg-deb -x`` (no maintainer script runs, so nothing needs
QEMU), the tree is merged into ``/usr`` as Debian 12 does, and loaded as a one-layer image whose config names the
architecture (``imagesmith.stages.tools.bootstrap.docker_archive``, the loader ``base bootstrap --arch`` uses).
"""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import pytest

from imagesmith.edges.engine import Engine
from imagesmith.stages.tools import bootstrap

PACKAGES = "python3-minimal,libpython3.11-stdlib"


def python_image(engine: Engine, arch: str, ref: str, work: Path) -> str:
    """``ref``: Debian 12 minbase + Python 3.11 for ``arch`` (amd64, arm64); its image ID."""
    cache, root = work / f"download-{arch}", work / f"root-{arch}"
    got = subprocess.run(["debootstrap", "--download-only", f"--arch={arch}", "--variant=minbase", f"--include={PACKAGES}",
                          "bookworm", str(cache), bootstrap.DEFAULT_MIRROR], capture_output=True, text=True, check=False)
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-2000:]
    root.mkdir()
    for deb in sorted((cache / "var/cache/apt/archives").glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    for top in ("bin", "sbin", "lib"):  # Debian 12 is merged-/usr: /bin, /sbin, /lib are links into /usr
        if (root / top).is_dir() and not (root / top).is_symlink():
            shutil.copytree(root / top, root / "usr" / top, symlinks=True, dirs_exist_ok=True)
            shutil.rmtree(root / top)
        (root / top).symlink_to(f"usr/{top}")
    tar, image = work / f"rootfs-{arch}.tar", work / f"image-{arch}.tar"
    created = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    bootstrap.pack(root, tar, int(dt.datetime.now(dt.timezone.utc).timestamp()))
    bootstrap.docker_archive(tar, image, ref, arch, {"com.example.imagesmith.test": "multiarch"}, created,
                             f"test image: bookworm minbase + {PACKAGES}, unpacked")
    with image.open("rb") as data:
        engine.load(iter(lambda: data.read(1 << 20), b""))
    info = engine.image(ref)
    assert info is not None and info.architecture == arch, f"{ref} loaded as {info.platform if info else 'nothing'}"
    shutil.rmtree(root)
    return info.id


@pytest.fixture(scope="session")
def python_images(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """``{"amd64": ref, "arm64": ref}``: the small Python image of each platform (made at once, side by side)."""
    if shutil.which("debootstrap") is None:
        pytest.fail("debootstrap is missing: run scripts/ensure-host.sh")
    bootstrap.check_runs("arm64")  # QEMU through binfmt_misc, or a UserError saying what to install
    work, run = tmp_path_factory.mktemp("multiarch"), uuid.uuid4().hex[:8]
    refs = {arch: f"imagesmith-test/python:bookworm-{arch}-{run}" for arch in ("amd64", "arm64")}
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda arch: python_image(engine, arch, refs[arch], work), refs))
    yield refs
    for ref in refs.values():
        engine.remove_image(ref, force=True)
