"""bootstrap.py: which Debian suite an OS key means, the sources.list, scrubbing a
minbase tree, a reproducible tarball, and the whole bootstrap through its
``runner`` and ``engine`` seams (real debootstrap + docker import: `make base`)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from imagesmith.errors import UserError
from imagesmith.model import compat
from imagesmith.stages.tools import bootstrap
from tests.doubles import EngineBase

KB = compat.load()
MIRROR = "http://mirror.example/debian"


@pytest.mark.parametrize("os_key, suite", [("debian11", "bullseye"), ("debian12", "bookworm"), ("debian13", "trixie")])
def test_debian_suite_and_default_tag(os_key: str, suite: str) -> None:
    assert bootstrap.debian_suite(os_key, KB) == suite
    assert bootstrap.default_tag(os_key, KB) == f"imagesmith/debian:{suite}"


@pytest.mark.parametrize("os_key", ["ubuntu24.04", "debian99", ""])
def test_only_debian_bases_are_bootstrapped(os_key: str) -> None:
    with pytest.raises(UserError) as err:
        bootstrap.debian_suite(os_key, KB)
    assert str(err.value) == (f"base bootstrap makes Debian bases only; {os_key!r} is not one of debian11, debian12, debian13"
                              " (Ubuntu bases come from a registry: docker pull ubuntu:24.04)")


def test_sources_list_names_the_suite_its_updates_and_security() -> None:
    assert bootstrap.sources_list("bookworm", MIRROR) == (
        f"deb {MIRROR} bookworm main\ndeb {MIRROR} bookworm-updates main\n"
        "deb http://deb.debian.org/debian-security bookworm-security main\n")


def minbase(root: Path) -> None:
    for rel in ("var/cache/apt/archives/x.deb", "var/lib/apt/lists/deb_dists_InRelease", "var/log/dpkg.log",
                "var/log/apt/history.log", "etc/machine-id", "root/.bash_history", "usr/bin/bash", "etc/apt/sources.list"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x")
    (root / "var/cache/apt/archives/partial").mkdir()
    os.symlink("usr/bin", root / "bin")


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir() or p.is_symlink()}


def test_scrub_leaves_no_cache_log_or_identity(tmp_path: Path) -> None:
    minbase(tmp_path)
    bootstrap.scrub(tmp_path, "trixie", MIRROR)
    assert files(tmp_path) == {"bin", "usr/bin/bash", "etc/apt/sources.list", "etc/machine-id"}
    assert (tmp_path / "etc/machine-id").read_text() == ""
    assert (tmp_path / "etc/apt/sources.list").read_text() == bootstrap.sources_list("trixie", MIRROR)


def test_pack_sorts_entries_clamps_times_and_keeps_links(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    minbase(root)
    os.utime(root / "usr/bin/bash", (2_000_000_000, 2_000_000_000))
    tar_path = tmp_path / "rootfs.tar"
    bootstrap.pack(root, tar_path, 1_700_000_000)
    with tarfile.open(tar_path) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names) and "usr/bin/bash" in names
    assert all(m.mtime <= 1_700_000_000 and m.uname == m.gname == "" for m in members)
    link = next(m for m in members if m.name == "bin")
    assert link.issym() and link.linkname == "usr/bin"
    again = tmp_path / "again.tar"
    bootstrap.pack(root, again, 1_700_000_000)
    assert again.read_bytes() == tar_path.read_bytes()


@dataclass
class ImportDouble(EngineBase):
    """engine.import_rootfs as bootstrap calls it."""

    calls: list[tuple[list[str], str, str, list[str]]] = field(default_factory=list)

    def import_rootfs(self, tar_path: Path, repository: str, tag: str, changes: list[str]) -> str:
        with tarfile.open(tar_path) as tar:
            self.calls.append((tar.getnames(), repository, tag, changes))
        return "sha256:imported"


@dataclass
class LoadDouble(EngineBase):
    """engine.load and engine.image as the foreign-architecture bootstrap calls them: what the archive holds."""

    loaded: dict[str, bytes] = field(default_factory=dict)

    def load(self, chunks: Any) -> list[str]:
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            for member in tar.getmembers():
                data = tar.extractfile(member)
                self.loaded[member.name] = data.read() if data else b""
        return [json.loads(self.loaded["manifest.json"])[0]["RepoTags"][0]]

    def image(self, ref: str) -> Any:
        config = json.loads(next(v for k, v in self.loaded.items() if k.endswith(".json") and k != "manifest.json"))
        return SimpleNamespace(id="sha256:loaded", architecture=config["architecture"])


seen: list[list[str]] = []


def fake_debootstrap(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    """What debootstrap leaves: a minbase tree at the root it is given (argv: ... SUITE ROOT MIRROR)."""
    seen.append(cmd)
    root = Path(cmd[-2])
    root.mkdir(parents=True)
    minbase(root)
    return subprocess.CompletedProcess(cmd, 0, "I: Base system installed successfully.\n", "")


needs_root_and_debootstrap = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("debootstrap") is None,
                                                reason="bootstrap checks for root and debootstrap first")


@needs_root_and_debootstrap
def test_bootstrap_imports_a_scrubbed_tree_under_the_default_tag() -> None:
    engine = ImportDouble()
    ref, iid = bootstrap.bootstrap(engine, "debian12", mirror=MIRROR, runner=fake_debootstrap, kb=KB)
    assert (ref, iid) == ("imagesmith/debian:bookworm", "sha256:imported")
    ((names, repository, tag, changes),) = engine.calls
    assert (repository, tag) == ("imagesmith/debian", "bookworm")
    assert "var/log/dpkg.log" not in names and "etc/apt/sources.list" in names
    assert changes[:2] == ['CMD ["bash"]', "ENV LANG=C.UTF-8"]
    assert changes[2].startswith(f"LABEL io.imagesmith.bootstrap.suite=bookworm io.imagesmith.bootstrap.mirror={MIRROR} "
                                 "org.opencontainers.image.created=")


@needs_root_and_debootstrap
def test_a_failed_debootstrap_shows_its_last_lines() -> None:
    def fails(cmd: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(cmd, 1, "".join(f"I: step {i}\n" for i in range(9)), "E: Couldn't download\n")

    with pytest.raises(UserError) as err:
        bootstrap.bootstrap(ImportDouble(), "debian13", mirror=MIRROR, runner=fails, kb=KB)
    assert str(err.value) == (f"debootstrap trixie from {MIRROR} failed (exit 1):\n"
                              "I: step 5\nI: step 6\nI: step 7\nI: step 8\nE: Couldn't download")


def test_a_tag_without_a_repository_is_refused_before_any_work() -> None:
    def never(cmd: list[str]) -> subprocess.CompletedProcess[str]:
        raise AssertionError("debootstrap ran")

    with pytest.raises(UserError, match=r"^--tag 'bookworm' needs the form repository:tag$"):
        bootstrap.bootstrap(ImportDouble(), "debian12", tag="bookworm", runner=never, kb=KB)


def handler(folder: Path, arch: str, state: str = "enabled") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"qemu-{arch}").write_text(f"{state}\ninterpreter /usr/libexec/qemu-binfmt/{arch}-binfmt-P\nflags: PF\n")
    return folder


@pytest.mark.parametrize("arch, binfmt, why", [
    ("arm64", None, "arm64 programs cannot run on this amd64 host: no enabled binfmt_misc handler {dir}/qemu-aarch64; "
                    "apt-get install -y qemu-user-static binfmt-support (then update-binfmts --enable qemu-aarch64), or "
                    "build on a native arm64 runner"),
    ("arm64", "disabled", "arm64 programs cannot run on this amd64 host: no enabled binfmt_misc handler"),
    ("arm64", "enabled", None),
    ("amd64", None, None),  # this host's own
    ("riscv64", None, "--arch 'riscv64': imagesmith knows amd64, arm64"),
])
def test_another_architecture_runs_only_through_an_enabled_qemu_handler(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arch: str, binfmt: str | None, why: str | None) -> None:
    monkeypatch.setattr(bootstrap, "host_arch", lambda: "amd64")
    folder = handler(tmp_path / "binfmt", "aarch64", binfmt) if binfmt else tmp_path / "binfmt"
    if why is None:
        bootstrap.check_runs(arch, folder)
        return
    with pytest.raises(UserError) as err:
        bootstrap.check_runs(arch, folder)
    assert str(err.value).startswith(why.replace("{dir}", str(folder)))


def test_the_default_tag_names_a_foreign_architecture(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bootstrap, "host_arch", lambda: "amd64")
    assert bootstrap.default_tag("debian12", KB, "arm64") == "imagesmith/debian:bookworm-arm64"
    assert bootstrap.default_tag("debian12", KB, "amd64") == bootstrap.default_tag("debian12", KB) == "imagesmith/debian:bookworm"


@needs_root_and_debootstrap
def test_an_arm64_base_is_debootstrapped_for_arm64_and_loaded_as_linux_arm64(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bootstrap, "host_arch", lambda: "amd64")
    monkeypatch.setattr(bootstrap, "check_runs", lambda arch: None)  # the handler itself: the test above
    engine, seen[:] = LoadDouble(), []
    ref, iid = bootstrap.bootstrap(engine, "debian12", mirror=MIRROR, runner=fake_debootstrap, kb=KB, arch="arm64")
    assert (ref, iid) == ("imagesmith/debian:bookworm-arm64", "sha256:loaded")
    assert seen[0][:3] == ["debootstrap", "--variant=minbase", "--arch=arm64"] and seen[0][3] == "bookworm"
    (manifest,) = json.loads(engine.loaded["manifest.json"])
    config = json.loads(engine.loaded[manifest["Config"]])
    assert (config["architecture"], config["os"], config["config"]["Cmd"], config["config"]["Env"]) == (
        "arm64", "linux", ["bash"], ["LANG=C.UTF-8"])
    assert config["config"]["Labels"]["io.imagesmith.bootstrap.suite"] == "bookworm" and manifest["RepoTags"] == [ref]
    layer = engine.loaded[manifest["Layers"][0]]  # the scrubbed tree, named by its digest
    assert config["rootfs"]["diff_ids"] == [f"sha256:{hashlib.sha256(layer).hexdigest()}"]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        assert "etc/apt/sources.list" in tar.getnames() and "var/log/dpkg.log" not in tar.getnames()


@needs_root_and_debootstrap
def test_this_hosts_architecture_is_imported_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bootstrap, "host_arch", lambda: "amd64")
    engine, seen[:] = ImportDouble(), []
    bootstrap.bootstrap(engine, "debian12", mirror=MIRROR, runner=fake_debootstrap, kb=KB, arch="amd64")
    assert len(engine.calls) == 1 and not any(a.startswith("--arch") for a in seen[0])
