"""Base images where no registry is reachable: debootstrap + docker import.

``imagesmith base bootstrap --os debian12`` makes a minimal Debian root file
system from Debian's mirror and imports it as an image. Builds then pin that
image by ID (the build report records which). ``--arch arm64`` makes the
arm64 base on an amd64 host: debootstrap's second stage runs under qemu
(binfmt_misc with Debian's ``qemu-user-static``), and the image is imported as
``linux/arm64`` so its config names the architecture its files are for.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Callable, Mapping

from imagesmith.edges.protocols import EngineProtocol
from imagesmith.errors import UserError
from imagesmith.model import compat
from imagesmith.model.platform import UNAME
from imagesmith.model.ref import ImageRef

DEFAULT_MIRROR = "http://deb.debian.org/debian"
SECURITY_MIRROR = "http://deb.debian.org/debian-security"
Runner = Callable[[list[str]], "subprocess.CompletedProcess[str]"]
# What a minbase tree holds that no image should: caches, logs, machine identity.
SCRUB = ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*", "var/log/*", "var/cache/ldconfig/*",
         "etc/machine-id", "var/lib/dbus/machine-id", "root/.bash_history")


ARCHES = UNAME  # Debian/OCI architecture -> the kernel's (uname -m, binfmt_misc's qemu-<name>)
BINFMT = Path("/proc/sys/fs/binfmt_misc")


def default_tag(os_key: str, kb: compat.KnowledgeBase, arch: str | None = None) -> str:
    codename = kb.os[os_key].codename
    return f"imagesmith/debian:{codename}" if arch in (None, host_arch()) else f"imagesmith/debian:{codename}-{arch}"


def host_arch() -> str:
    """This host's architecture in Debian/OCI words (amd64, arm64)."""
    machine = os.uname().machine
    return next((a for a, m in ARCHES.items() if m == machine), machine)


def check_runs(arch: str, binfmt: Path = BINFMT) -> None:
    """``arch`` binaries run here: natively, or through a binfmt_misc handler (qemu-user-static); else a UserError
    saying what to install."""
    if arch not in ARCHES:
        raise UserError(f"--arch {arch!r}: imagesmith knows {', '.join(ARCHES)}")
    if arch == host_arch():
        return
    handler = binfmt / f"qemu-{ARCHES[arch]}"
    try:
        enabled = handler.read_text().splitlines()[0].strip() == "enabled"
    except OSError:
        enabled = False
    if not enabled:
        raise UserError(f"{arch} programs cannot run on this {host_arch()} host: no enabled binfmt_misc handler "
                        f"{handler}; apt-get install -y qemu-user-static binfmt-support (then update-binfmts --enable "
                        f"qemu-{ARCHES[arch]}), or build on a native {arch} runner")


def debian_suite(os_key: str, kb: compat.KnowledgeBase) -> str:
    info = kb.os.get(os_key)
    if info is None or info.family != "debian":
        debian = [k for k, o in kb.os.items() if o.family == "debian"]
        raise UserError(f"base bootstrap makes Debian bases only; {os_key!r} is not one of {', '.join(debian)}"
                        " (Ubuntu bases come from a registry: docker pull ubuntu:24.04)")
    return info.codename


def sources_list(suite: str, mirror: str) -> str:
    return (f"deb {mirror} {suite} main\n"
            f"deb {mirror} {suite}-updates main\n"
            f"deb {SECURITY_MIRROR} {suite}-security main\n")


def _run(cmd: list[str]) -> "subprocess.CompletedProcess[str]":
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def debootstrap(suite: str, root: Path, mirror: str, runner: Runner = _run, arch: str | None = None) -> None:
    if shutil.which("debootstrap") is None:
        raise UserError("debootstrap is not installed: apt-get install -y debootstrap")
    if os.geteuid() != 0:
        raise UserError("debootstrap needs root: run imagesmith base bootstrap as root (or with sudo)")
    proc = runner(["debootstrap", "--variant=minbase", *([f"--arch={arch}"] if arch else []), suite, str(root), mirror])
    if proc.returncode != 0:
        last = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
        raise UserError(f"debootstrap {suite} from {mirror} failed (exit {proc.returncode}):\n{last}")


def scrub(root: Path, suite: str, mirror: str) -> None:
    for pattern in SCRUB:
        for path in root.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
    (root / "etc/apt/sources.list").write_text(sources_list(suite, mirror))
    (root / "etc/machine-id").write_text("")


def pack(root: Path, tar_path: Path, mtime: int) -> None:
    """A tarball with sorted entries, numeric owners and clamped times."""
    def normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime = min(info.mtime, mtime)
        info.uname = info.gname = ""
        return info

    paths = []
    for folder, dirs, files in os.walk(root):  # symlinks (merged /usr) stay links
        paths += [Path(folder, name) for name in dirs + files]
    with tarfile.open(tar_path, "w") as tar:
        for path in sorted(paths):
            tar.add(path, arcname=str(path.relative_to(root)), recursive=False, filter=normalise)


def bootstrap(engine: EngineProtocol, os_key: str, tag: str | None = None, mirror: str = DEFAULT_MIRROR,
              runner: Runner = _run, kb: compat.KnowledgeBase | None = None, arch: str | None = None) -> tuple[str, str]:
    """Make the base for ``os_key`` (of ``arch``, default this host's); return (reference, image ID)."""
    kb = kb or compat.load()
    suite = debian_suite(os_key, kb)
    foreign = arch if arch is not None and arch != host_arch() else None
    if arch is not None:
        check_runs(arch)
    ref = tag or default_tag(os_key, kb, arch)
    parsed = ImageRef.maybe(ref)
    if parsed is None or not parsed.tag or parsed.digest:
        raise UserError(f"--tag {ref!r} needs the form repository:tag")
    repository, version = parsed.name, parsed.tag
    with tempfile.TemporaryDirectory(prefix="imagesmith-rootfs-") as tmp:
        root, tar_path = Path(tmp, "rootfs"), Path(tmp, "rootfs.tar")
        debootstrap(suite, root, mirror, runner, foreign)
        scrub(root, suite, mirror)
        pack(root, tar_path, int(dt.datetime.now(dt.timezone.utc).timestamp()))
        created = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        labels = {"io.imagesmith.bootstrap.suite": suite, "io.imagesmith.bootstrap.mirror": mirror,
                  "org.opencontainers.image.created": created}
        if foreign is None:
            changes = ['CMD ["bash"]', "ENV LANG=C.UTF-8", "LABEL " + " ".join(f"{k}={v}" for k, v in labels.items())]
            return ref, engine.import_rootfs(tar_path, repository, version, changes)
        # docker import cannot name another architecture (its --platform is ignored without experimental
        # features): load a one-layer docker-archive whose config names it instead
        image = Path(tmp, "image.tar")
        docker_archive(tar_path, image, ref, foreign, labels, created, f"debootstrap --arch={foreign} {suite}")
        with image.open("rb") as data:
            engine.load(iter(lambda: data.read(1 << 20), b""))
        info = engine.image(ref)
        if info is None or info.architecture != foreign:
            raise UserError(f"docker load of the {foreign} base did not leave {ref} as a linux/{foreign} image")
        return ref, info.id


def docker_archive(rootfs: Path, out: Path, ref: str, arch: str, labels: Mapping[str, str], created: str,
                   how: str) -> None:
    """``out``: a docker-archive (the ``docker save`` layout) of one image tagged ``ref``: ``rootfs`` as its only
    layer, a config naming ``linux/arch``, ``bash`` as its command, ``LANG=C.UTF-8`` and ``labels``."""
    digest = hashlib.sha256()
    with rootfs.open("rb") as data:
        for chunk in iter(lambda: data.read(1 << 20), b""):
            digest.update(chunk)
    layer = digest.hexdigest()
    config = json.dumps({
        "architecture": arch, "os": "linux", "created": created,
        "config": {"Cmd": ["bash"], "Env": ["LANG=C.UTF-8"], "Labels": dict(labels)},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer}"]},
        "history": [{"created": created, "created_by": f"imagesmith base bootstrap ({how})"}],
    }, sort_keys=True).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [ref], "Layers": [f"{layer}/layer.tar"]}]).encode()
    with tarfile.open(out, "w") as tar:
        tar.add(rootfs, arcname=f"{layer}/layer.tar", recursive=False)
        for name, body in ((config_name, config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
