"""A CDI spec applied to a real container by imagesmith's translation, through the code path verify takes
(stages.verify.gpus.plan -> stages.verify.gpus.apply -> Engine.run), on this host's Docker, which has no CDI of its own.

The spec (in tmp_path, never /etc/cdi) names a device node that is really /dev/null, a read-only file mount, an
environment entry, a create-symlinks hook and an update-ldcache hook over a folder holding a real ELF library
under another name. The container is the suite's smallest image (the run's Debian 12 base): seconds.
"""

from __future__ import annotations

import ctypes.util
import json
import shutil
import sysconfig
import uuid
from pathlib import Path

import pytest

from imagesmith.edges import elf
from imagesmith.edges.engine import Engine, RunSpec
from imagesmith.stages.verify import gpus

pytestmark = pytest.mark.integration
DRIVER = "/opt/imagesmith-driver/lib"
LIBRARY = "libvendor.so.580.159.04"
# what sh and coreutils in the image load: a SONAME link to any of these in DRIVER would replace them
IMAGE_NEEDS = ("libc.so", "libm.so", "ld-linux", "libselinux", "libpcre2", "libacl", "libattr", "libgmp", "libcrypto", "libz.so",
               "libtinfo", "libpthread", "libdl.so", "libcap")
SCRIPT = """
test -c /dev/imagesmith-gpu0 && echo node=char
echo probe > /dev/imagesmith-gpu0 && echo node=writable
echo "mounted=$(cat /etc/imagesmith-cdi.txt)"
if (echo x > /etc/imagesmith-cdi.txt) 2>/dev/null; then echo mount=writable; else echo mount=read-only; fi
echo "env=$IMAGESMITH_CDI"
echo "ld=$LD_LIBRARY_PATH"
echo "link=$(cat /usr/local/share/imagesmith/cdi-link)"
echo "soname=$(readlink "$DRIVER/$SONAME")"
test -f "$DRIVER/$SONAME" && echo soname=resolves
getent hosts localhost >/dev/null && echo localhost=resolves
"""


def a_library() -> tuple[Path, str]:
    """A real shared library of this host and its SONAME, one that nothing in the image loads."""
    names = [str(Path(sysconfig.get_config_var("LIBDIR") or "/", sysconfig.get_config_var("INSTSONAME") or "-"))]
    names += [f"/usr/lib/x86_64-linux-gnu/{ctypes.util.find_library(n)}" for n in ("expat", "yaml-0", "ffi", "bz2") if ctypes.util.find_library(n)]
    for name in names:
        soname = elf.soname(name)
        if soname and not soname.startswith(IMAGE_NEEDS):
            return Path(name), soname
    pytest.skip("no shared library with a SONAME the image does not need was found on this host")


def spec(folder: Path, library: Path) -> Path:
    driver = folder / "driver"
    driver.mkdir()
    (driver / "notes.txt").write_text("from the host\n")
    shutil.copyfile(library, driver / LIBRARY)  # the driver's libcuda.so.580.159.04 in miniature: its SONAME is not its name
    hook = {"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook", "env": ["NVIDIA_CTK_DEBUG=false"]}
    doc = {
        "cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
        "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/imagesmith-gpu0", "hostPath": "/dev/null"}]}}],
        "containerEdits": {
            "env": ["IMAGESMITH_CDI=applied"],
            "mounts": [{"hostPath": str(driver / "notes.txt"), "containerPath": "/etc/imagesmith-cdi.txt", "options": ["ro", "nosuid", "nodev", "bind"]},
                       {"hostPath": str(driver / LIBRARY), "containerPath": f"{DRIVER}/{LIBRARY}", "options": ["ro", "nosuid", "nodev", "bind"]}],
            "hooks": [hook | {"args": ["nvidia-cdi-hook", "create-symlinks", "--link", "/etc/imagesmith-cdi.txt::/usr/local/share/imagesmith/cdi-link"]},
                      hook | {"args": ["nvidia-cdi-hook", "update-ldcache", "--folder", DRIVER]}],
        },
    }
    cdi = folder / "cdi"
    cdi.mkdir()
    (cdi / "nvidia.json").write_text(json.dumps(doc))
    return cdi


def test_a_cdi_spec_is_applied_to_a_real_container_by_the_path_verify_takes(engine: Engine, debian_base: str, tmp_path: Path) -> None:
    library, soname = a_library()
    host = gpus.GpuHost(cdi_dirs=(str(spec(tmp_path, library)),), environ={})
    planned = gpus.plan(engine.info(), "cdi", "0", host)
    if planned.path.path != "cdi-translated":
        pytest.skip(f"this engine resolves CDI itself ({planned.path.why}): the translation is for engines without it")
    label = {"io.imagesmith.run": f"cdi-{uuid.uuid4().hex[:8]}"}
    base = RunSpec(image=debian_base, command=["sh", "-c", SCRIPT], environment={"DRIVER": DRIVER, "SONAME": soname}, labels=label, timeout_s=120)
    spec_run, notes = gpus.apply(base, planned.path, planned.registry, {}, host.soname)
    result = engine.run(spec_run)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [
        "node=char", "node=writable", "mounted=from the host", "mount=read-only", "env=applied", f"ld={DRIVER}",
        "link=from the host", f"soname={LIBRARY}", "soname=resolves",
        "localhost=resolves"]  # no network, but loopback and /etc/hosts: torchrun's rendezvous needs localhost
    assert notes == ("hook create-symlinks emulated: 1 symbolic link placed in the container before it starts",
                     f"hook update-ldcache emulated: {DRIVER} first on LD_LIBRARY_PATH, 1 link by SONAME ({soname} -> {LIBRARY})",
                     "mount options nodev, nosuid not applied: the Docker API's bind mounts take read-only or read-write only")
    assert engine.containers_with_label("io.imagesmith.run", label["io.imagesmith.run"]) == []


def test_the_host_watch_tells_the_containers_processes_by_their_cgroup(engine: Engine, debian_base: str) -> None:
    """What verify's GPU watch does with a container: the engine says its ID once it exists (RunSpec.on_created),
    and a process is the run's when its cgroup names that ID; this test's own process is not."""
    import os

    import docker

    from imagesmith.edges.gpuwatch import in_container

    told: list[str] = []
    label = {"io.imagesmith.run": f"watch-{uuid.uuid4().hex[:8]}"}
    spec_run = RunSpec(image=debian_base, command=["sleep", "30"], labels=label, timeout_s=60, on_created=told.append)
    with engine.started(spec_run):
        assert len(told) == 1 and len(told[0]) == 64
        top = docker.from_env().api.top(told[0])
        pids = [int(row[top["Titles"].index("PID")]) for row in top["Processes"]]
        owner = in_container(told[0])
        assert pids and all(owner(pid) for pid in pids)
        assert not owner(os.getpid()) and not in_container("0" * 64)(pids[0])
