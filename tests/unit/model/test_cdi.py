"""CDI specs (imagesmith/model/cdi.py, read by imagesmith/stages/verify/gpus.py): the shape nvidia-ctk writes, read from
YAML and JSON through the strict loader; hostile specs refused with the file, the key path and why; device names
resolved to merged edits; edits translated for an engine without CDI (the SONAME link from a real ELF file)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagesmith.edges import elf
from imagesmith.errors import UserError
from imagesmith.model import cdi, schemas
from imagesmith.model.cdi import BindMount, ContainerEdits, DeviceMapping, DeviceNode, Hook, Mount, Symlink
from imagesmith.model.loader import LoadError, check_schema
from imagesmith.stages.verify import gpus
from tests.conftest import ROOT

NVIDIA = ROOT / "tests" / "fixtures" / "cdi" / "nvidia.yaml"
FIX = "correct the spec, or write NVIDIA's again: sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
LIB = "/usr/lib/x86_64-linux-gnu"
UUID0, UUID1 = "GPU-4f1c2a9e-0b6d-4c1e-9a7b-2d3e4f5a6b7c", "GPU-8e2d3b1a-7c6f-4a5e-8b9c-0d1e2f3a4b5c"
SPEC_NODES = ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl")


def sonames(path: str) -> str | None:
    """The SONAMEs of the fixture's libraries (the real reader is tested on a real file below)."""
    return {f"{LIB}/libcuda.so.580.159.04": "libcuda.so.1", f"{LIB}/libnvidia-ml.so.580.159.04": "libnvidia-ml.so.1",
            f"{LIB}/libnvidia-ptxjitcompiler.so.580.159.04": "libnvidia-ptxjitcompiler.so.1"}.get(path)


# -- the shape nvidia-ctk writes -------------------------------------------------------------------------------


def test_the_spec_nvidia_ctk_writes_is_read_from_yaml_and_from_json(tmp_path: Path) -> None:
    spec = gpus.read_spec(NVIDIA, priority=1)
    assert (spec.file, spec.cdi_version, spec.kind, spec.priority) == (str(NVIDIA), "0.5.0", "nvidia.com/gpu", 1)
    assert [d.name for d in spec.devices] == ["0", UUID0, "1", UUID1, "all"]
    assert [n.path for n in spec.edits.device_nodes] == list(SPEC_NODES)
    assert spec.edits.env == ("NVIDIA_VISIBLE_DEVICES=void",)
    assert [m.container_path for m in spec.edits.mounts][:2] == ["/run/nvidia-persistenced/socket", "/usr/bin/nvidia-smi"]
    assert spec.edits.mounts[0].options == ("ro", "nosuid", "nodev", "bind", "noexec")
    assert [h.args[1] for h in spec.edits.hooks] == ["create-symlinks", "enable-cuda-compat", "update-ldcache"]
    assert spec.edits.hooks[0] == Hook("createContainer", "/usr/bin/nvidia-cdi-hook", (
        "nvidia-cdi-hook", "create-symlinks", "--link", f"libcuda.so.1::{LIB}/libcuda.so",
        "--link", f"libnvidia-ml.so.1::{LIB}/libnvidia-ml.so"), ("NVIDIA_CTK_DEBUG=false",))
    assert spec.devices[0].edits.device_nodes == (DeviceNode("/dev/nvidia0", "/dev/nvidia0"), DeviceNode("/dev/dri/card1", "/dev/dri/card1"))
    as_json = tmp_path / "nvidia.json"
    as_json.write_text(json.dumps(yaml.safe_load(NVIDIA.read_text())))
    assert gpus.read_spec(as_json, priority=1) == dataclasses.replace(spec, file=str(as_json))


def test_numbers_in_yaml_are_numbers(tmp_path: Path) -> None:
    (tmp_path / "n.yaml").write_text("cdiVersion: 0.6.0\nkind: example.com/dev\ndevices:\n- name: a\n  containerEdits:\n"
                                     "    deviceNodes: [{path: /dev/x, major: 195, minor: 0, fileMode: 438, uid: 0, gid: 44}]\n"
                                     "    hooks: [{hookName: prestart, path: /bin/true, timeout: 5}]\n    additionalGids: [44]\n")
    device = gpus.read_spec(tmp_path / "n.yaml").devices[0]
    assert device.edits.device_nodes[0].set_by_spec == ("major", "minor", "fileMode", "uid", "gid")
    assert device.edits.hooks[0].timeout == 5 and device.edits.other == ("additionalGids",)


# -- hostile specs: exit 1, the file, the key path, why -------------------------------------------------------------


def valid() -> dict[str, Any]:
    return {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
            "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}],
            "containerEdits": {"env": ["A=1"], "mounts": [{"hostPath": "/usr/bin/nvidia-smi", "containerPath": "/usr/bin/nvidia-smi"}],
                               "hooks": [{"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook"}]}}


def changed(path: str, value: Any) -> dict[str, Any]:
    """valid() with the value at a dotted ``path`` (list indexes as numbers) set, or removed when ``value`` is ...."""
    doc = valid()
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node: Any = doc
    for key in parents:
        node = node[key]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return doc


D0 = "devices[0].containerEdits"
HOSTILE_DOCS = [
    ("kind", ..., "(top): 'kind' is missing"),
    ("devices", ..., "(top): 'devices' is missing"),
    ("devices", [], "devices: [] should be non-empty"),
    ("devices.0.containerEdits", ..., "devices[0]: 'containerEdits' is missing"),
    ("containerEdits.mounts.0.containerPath", ..., "containerEdits.mounts[0]: 'containerPath' is missing"),
    ("kind", "nvidia.com", "kind: 'nvidia.com' is not of the form vendor/class (e.g. nvidia.com/gpu)"),
    ("kind", "nvidia.com/gpu/x", "kind: 'nvidia.com/gpu/x' is not of the form vendor/class (e.g. nvidia.com/gpu)"),
    ("cdiVersion", "latest", "cdiVersion: 'latest' is not a version (MAJOR.MINOR.PATCH, e.g. 0.5.0)"),
    ("devices.0.name", "gpu 0", "devices[0].name: 'gpu 0' is not a device name (letters, digits, '_', '-', '.', ':'; "
                                "first and last a letter or digit)"),
    ("devices", [{"name": "0", "containerEdits": {}}, {"name": "1", "containerEdits": {}}, {"name": "0", "containerEdits": {}}],
     "devices[2].name: device '0' is defined twice (also devices[0])"),
    ("devices.0.containerEdits.deviceNodes.0.path", "/etc/shadow",
     f"{D0}.deviceNodes[0].path: '/etc/shadow' is not a device node: it must be an absolute path under /dev"),
    ("devices.0.containerEdits.deviceNodes.0.path", "dev/nvidia0",
     f"{D0}.deviceNodes[0].path: 'dev/nvidia0' is not a device node: it must be an absolute path under /dev"),
    ("devices.0.containerEdits.deviceNodes.0.path", "/dev/../etc/shadow",
     f"{D0}.deviceNodes[0].path: '/dev/../etc/shadow' is not a device node: it must be an absolute path under /dev"),
    ("devices.0.containerEdits.deviceNodes.0.path", "/dev",
     f"{D0}.deviceNodes[0].path: '/dev' is not a device node: it must be an absolute path under /dev"),
    ("devices.0.containerEdits.deviceNodes.0", {"path": "/dev/nvidia0", "hostPath": "/etc/passwd"},
     f"{D0}.deviceNodes[0].hostPath: '/etc/passwd' is not a device node: it must be an absolute path under /dev"),
    ("devices.0.containerEdits.deviceNodes.0", {"path": "/dev/x", "type": "q"}, f"{D0}.deviceNodes[0].type: 'q' is not a device type (b, c, u or p)"),
    ("devices.0.containerEdits.deviceNodes.0", {"path": "/dev/x", "permissions": "rwx"},
     f"{D0}.deviceNodes[0].permissions: 'rwx' is not cgroup permissions (r, w and m, or none)"),
    ("devices.0.containerEdits.deviceNodes.0", {"path": "/dev/x", "major": "195"}, f"{D0}.deviceNodes[0].major: expected integer, got '195'"),
    ("devices.0.containerEdits.deviceNodes.0", {"path": "/dev/x", "uid": -1}, f"{D0}.deviceNodes[0].uid: '-1' is out of range (minimum 0)"),
    ("containerEdits.mounts.0.hostPath", "usr/bin/nvidia-smi", "containerEdits.mounts[0].hostPath: 'usr/bin/nvidia-smi' is not an absolute path"),
    ("containerEdits.mounts.0.containerPath", "bin/x", "containerEdits.mounts[0].containerPath: 'bin/x' is not an absolute path"),
    *[("containerEdits.mounts.0.containerPath", target, f"containerEdits.mounts[0].containerPath: {target!r} would mount over the "
       f"container's own {where}: a mount may not target /, /proc, /sys or /dev")
      for target, where in (("/", "/"), ("/proc", "/proc"), ("/sys/", "/sys"), ("/dev", "/dev"), ("//usr/../dev/.", "/dev"))],
    ("containerEdits.mounts.0.options", "ro", "containerEdits.mounts[0].options: expected array, got 'ro'"),
    ("containerEdits.env.0", "NOEQUALS", "containerEdits.env[0]: 'NOEQUALS' is not NAME=VALUE (NAME: letters, digits and '_', not first a digit)"),
    ("containerEdits.env.0", "=1", "containerEdits.env[0]: '=1' is not NAME=VALUE (NAME: letters, digits and '_', not first a digit)"),
    ("containerEdits.env.0", "1A=b", "containerEdits.env[0]: '1A=b' is not NAME=VALUE (NAME: letters, digits and '_', not first a digit)"),
    ("containerEdits.env", "A=1", "containerEdits.env: expected array, got 'A=1'"),
    ("containerEdits.hooks.0.hookName", "preStart", "containerEdits.hooks[0].hookName: 'preStart' is not a hook name (one of "
                                                    "prestart, createRuntime, createContainer, startContainer, poststart, poststop)"),
    ("containerEdits.hooks.0.path", "nvidia-cdi-hook", "containerEdits.hooks[0].path: 'nvidia-cdi-hook' is not an absolute path"),
    ("containerEdits.hooks.0.timeout", 0, "containerEdits.hooks[0].timeout: '0' is out of range (minimum 1)"),
    ("containerEdits.hooks.0.env", ["X"], "containerEdits.hooks[0].env[0]: 'X' is not NAME=VALUE (NAME: letters, digits and '_', "
                                          "not first a digit)"),
]


@pytest.mark.parametrize("path, value, message", HOSTILE_DOCS, ids=[f"{p}={v!r}"[:60] for p, v, _ in HOSTILE_DOCS])
def test_a_hostile_json_spec_is_refused_with_the_file_and_key_path(tmp_path: Path, path: str, value: Any, message: str) -> None:
    (tmp_path / "nvidia.json").write_text(json.dumps(changed(path, value)))
    with pytest.raises(LoadError) as err:
        gpus.read_specs([str(tmp_path)])
    assert (err.value.exit_code, str(err.value)) == (1, f"{tmp_path / 'nvidia.json'}: {message}; {FIX}")


YAML_TOP = "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: '0'\n  containerEdits:\n"
HOSTILE_YAML = [
    ("    deviceNodes:\n    - path: /etc/shadow\n",
     "{f}:7: devices[0].containerEdits.deviceNodes[0].path: '/etc/shadow' is not a device node: it must be an absolute path under /dev; " + FIX),
    ("    deviceNodes:\n    - path: /dev/x\n      major: abc\n",
     "{f}:8: devices[0].containerEdits.deviceNodes[0].major: expected integer, got 'abc'; " + FIX),
    ("    deviceNodes:\n    - path: /dev/x\n      major: .nan\n",
     "{f}:8: devices[0].containerEdits.deviceNodes[0].major: expected integer, got '.nan'; " + FIX),
    ("    mounts:\n    - {hostPath: /x, containerPath: /proc}\n",
     "{f}:7: devices[0].containerEdits.mounts[0].containerPath: '/proc' would mount over the container's own /proc: a mount may "
     "not target /, /proc, /sys or /dev; " + FIX),
    ("    env: [A=1]\n    env: [B=2]\n",
     "{f}:7 devices[0].containerEdits.env: duplicate key (first at line 6); keep one: YAML would silently use the last"),
    ("    env: !!python/object:os.system [x]\n", "{f}:6 devices[0].containerEdits.env: the tag '!!python/object:os.system' is not "
                                                "allowed; write plain YAML (strings, numbers, true/false, lists, mappings)"),
]


@pytest.mark.parametrize("edits, message", HOSTILE_YAML, ids=[m.split(": ")[1][:50] for _, m in HOSTILE_YAML])
def test_a_hostile_yaml_spec_is_refused_at_its_line(tmp_path: Path, edits: str, message: str) -> None:
    (tmp_path / "nvidia.yaml").write_text(YAML_TOP + edits)
    with pytest.raises(UserError) as err:
        gpus.read_specs([str(tmp_path)])
    assert (err.value.exit_code, str(err.value)) == (1, message.format(f=tmp_path / "nvidia.yaml"))


def test_hostile_files_are_refused_without_reading_them_whole(tmp_path: Path) -> None:
    folder, outside = tmp_path / "cdi", tmp_path / "elsewhere.json"
    folder.mkdir()
    outside.write_text(json.dumps(valid()))
    cases: dict[str, tuple[Any, str]] = {
        "huge.json": (lambda p: os.truncate(p.write_bytes(b"{") and p, 5 << 20),
                      "is 5,242,880 bytes, over the 4,194,304-byte limit for this kind of file; it is not a file imagesmith wrote; write it again"),
        "fifo.yaml": (os.mkfifo, "is not a regular file (a folder, FIFO, socket or device); give the file itself"),
        "out.json": (lambda p: p.symlink_to(outside), f"is a symbolic link to {str(outside)!r}, outside {folder}; copy the file "
                                                      "itself into the folder instead of linking to it"),
        "zero.yml": (lambda p: p.symlink_to("/dev/zero"), f"is a symbolic link to '/dev/zero', outside {folder}; copy the file "
                                                           "itself into the folder instead of linking to it"),
        "deep.json": (lambda p: p.write_text("[" * 100 + "]" * 100), f"{'[0]' * 64}: nested deeper than 64 levels; {FIX}"),
        "nan.json": (lambda p: p.write_text('{"cdiVersion": NaN}'), f"NaN is not JSON (NaN and Infinity are not numbers JSON allows); {FIX}"),
        "list.json": (lambda p: p.write_text("[]"), f"(top): expected object, got a list; {FIX}"),
        "bom.json": (lambda p: p.write_bytes(b"\xef\xbb\xbf{}"), "starts with a UTF-8 byte-order mark; save it as UTF-8 without a BOM"),
    }
    for name, (make, why) in cases.items():
        path = folder / name
        make(path)
        with pytest.raises(LoadError) as err:
            gpus.read_specs([str(folder)])
        where = f"{path}:1:16" if name == "nan.json" else str(path)
        assert str(err.value) == f"{where}: {why}", name
        path.unlink()


def test_deep_yaml_is_refused_at_its_line(tmp_path: Path) -> None:
    (tmp_path / "deep.yaml").write_text("a: " + "[" * 100 + "]" * 100 + "\n")
    with pytest.raises(UserError, match=r"deep\.yaml:1.*nest"):
        gpus.read_specs([str(tmp_path)])


def test_a_mount_of_another_type_names_its_source_not_a_path(tmp_path: Path) -> None:
    doc = changed("containerEdits.mounts", [{"hostPath": "tmpfs", "containerPath": "/run/vendor", "type": "tmpfs"}])
    (tmp_path / "nvidia.json").write_text(json.dumps(doc))
    (mount,) = gpus.read_spec(tmp_path / "nvidia.json").edits.mounts
    assert (mount.host_path, mount.bind) == ("tmpfs", False)
    doc["containerEdits"]["mounts"][0]["options"] = ["bind"]  # the option makes it a bind mount: its source is a path again
    (tmp_path / "nvidia.json").write_text(json.dumps(doc))
    with pytest.raises(LoadError, match=r"containerEdits.mounts\[0\].hostPath: 'tmpfs' is not an absolute path"):
        gpus.read_spec(tmp_path / "nvidia.json")


def test_only_spec_files_of_the_folder_itself_are_read(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.json").write_text("not even json")
    (tmp_path / "dir.json").mkdir()  # a folder with a spec's name is no spec
    (tmp_path / "README.txt").write_text("not a spec")
    (tmp_path / "b.yml").write_text(yaml.safe_dump(changed("kind", "example.com/b")))
    (tmp_path / "a.json").write_text(json.dumps(valid()))
    assert [s.file for s in gpus.read_specs([str(tmp_path), str(tmp_path / "absent")]).specs] == [
        str(tmp_path / "a.json"), str(tmp_path / "b.yml")]
    for i in range(gpus.MAX_SPEC_FILES):
        (tmp_path / f"more-{i:03}.json").write_text("{}")
    with pytest.raises(LoadError, match=rf"^{tmp_path}: holds 258 spec files, over the 256 imagesmith reads; keep the CDI specs"):
        gpus.read_specs([str(tmp_path)])


def test_the_spec_schema_is_a_valid_draft_2020_12_schema() -> None:
    check_schema(valid(), schemas.CDI_SPEC, "x.json")
    with pytest.raises(LoadError, match=r"^x.json: devices\[0\].name: expected string, got '0'$"):
        check_schema(changed("devices.0.name", 0), schemas.CDI_SPEC, "x.json")


# -- resolving names --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gpus_flag, names", [
    ("all", ("nvidia.com/gpu=all",)),
    ("none", ()),
    ("0,1", ("nvidia.com/gpu=0", "nvidia.com/gpu=1")),
    (UUID0, (f"nvidia.com/gpu={UUID0}",)),
    ("MIG-1a2b", ("nvidia.com/gpu=MIG-1a2b",)),
])
def test_gpus_flag_as_cdi_names(gpus_flag: str, names: tuple[str, ...]) -> None:
    assert cdi.qualified_names(gpus_flag) == names


def nodes(*names: str) -> list[str]:
    return [n.path for n in cdi.Registry((gpus.read_spec(NVIDIA),)).resolve(names).edits.device_nodes]


@pytest.mark.parametrize("names, expected", [
    (("nvidia.com/gpu=0",), [*SPEC_NODES, "/dev/nvidia0", "/dev/dri/card1"]),
    (("nvidia.com/gpu=all",), [*SPEC_NODES, "/dev/nvidia0", "/dev/nvidia1", "/dev/dri/card1"]),
    ((f"nvidia.com/gpu={UUID1}",), [*SPEC_NODES, "/dev/nvidia1"]),
    (("nvidia.com/gpu=0", "nvidia.com/gpu=1"), [*SPEC_NODES, "/dev/nvidia0", "/dev/dri/card1", "/dev/nvidia1"]),  # the spec's own once
])
def test_names_resolve_to_the_specs_edits_then_the_devices(names: tuple[str, ...], expected: list[str]) -> None:
    assert nodes(*names) == expected


def test_an_unknown_name_lists_what_the_specs_offer() -> None:
    with pytest.raises(UserError) as err:
        nodes("nvidia.com/gpu=7")
    assert str(err.value) == (f"no CDI spec offers nvidia.com/gpu=7; the specs offer nvidia.com/gpu=0, nvidia.com/gpu=1, "
                              f"nvidia.com/gpu={UUID0}, nvidia.com/gpu={UUID1}, nvidia.com/gpu=all")
    assert cdi.Registry().unknown("nvidia.com/gpu=0") == "no CDI spec offers nvidia.com/gpu=0: the specs read offer no device"


def test_a_later_folder_wins_and_two_files_of_one_folder_cancel_a_device(tmp_path: Path) -> None:
    etc, run = tmp_path / "etc", tmp_path / "run"
    etc.mkdir()
    run.mkdir()
    (etc / "nvidia.json").write_text(json.dumps(valid()))
    (run / "nvidia.json").write_text(json.dumps(changed("devices.0.containerEdits.deviceNodes.0.path", "/dev/nvidia9")))
    registry = gpus.read_specs([str(etc), str(run)])
    assert [n.path for n in registry.resolve(["nvidia.com/gpu=0"]).edits.device_nodes] == ["/dev/nvidia9"]
    assert registry.resolve(["nvidia.com/gpu=0"]).files == (str(run / "nvidia.json"),)
    (run / "again.yaml").write_text(yaml.safe_dump(valid()))
    registry = gpus.read_specs([str(etc), str(run)])
    assert registry.offered() == ()
    with pytest.raises(UserError) as err:
        registry.resolve(["nvidia.com/gpu=0"])
    assert str(err.value) == (f"CDI device nvidia.com/gpu=0 is defined by both {run / 'again.yaml'} and {run / 'nvidia.json'}, "
                              "files of one folder: CDI uses neither; remove one of them")


# -- translation for an engine without CDI ---------------------------------------------------------------------------


def test_the_nvidia_spec_translated() -> None:
    edits = cdi.Registry((gpus.read_spec(NVIDIA),)).resolve(["nvidia.com/gpu=0"]).edits
    done = cdi.translate(edits, {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64", "PATH": "/usr/bin"}, sonames)
    assert done.devices == tuple(DeviceMapping(p, p) for p in (*SPEC_NODES, "/dev/nvidia0", "/dev/dri/card1"))
    assert done.devices[0].docker() == "/dev/nvidia-uvm:/dev/nvidia-uvm:rwm"
    assert [(m.source == m.target, m.target, m.read_only) for m in done.mounts] == [
        (True, "/run/nvidia-persistenced/socket", True), (True, "/usr/bin/nvidia-smi", True),
        (True, f"{LIB}/libcuda.so.580.159.04", True), (True, f"{LIB}/libnvidia-ml.so.580.159.04", True),
        (True, f"{LIB}/libnvidia-ptxjitcompiler.so.580.159.04", True), (True, "/lib/firmware/nvidia/580.159.04/gsp_ga10x.bin", True)]
    assert done.links == (
        Symlink(f"{LIB}/libcuda.so", "libcuda.so.1"), Symlink(f"{LIB}/libnvidia-ml.so", "libnvidia-ml.so.1"),
        Symlink(f"{LIB}/libcuda.so.1", "libcuda.so.580.159.04"), Symlink(f"{LIB}/libnvidia-ml.so.1", "libnvidia-ml.so.580.159.04"),
        Symlink(f"{LIB}/libnvidia-ptxjitcompiler.so.1", "libnvidia-ptxjitcompiler.so.580.159.04"))
    assert done.environment == {"NVIDIA_VISIBLE_DEVICES": "void", "LD_LIBRARY_PATH": f"{LIB}:/usr/local/nvidia/lib64"}
    assert done.notes == (
        "hook create-symlinks emulated: 2 symbolic links placed in the container before it starts",
        "hook not applied (the Docker API runs no hooks): createContainer nvidia-cdi-hook enable-cuda-compat "
        "--host-driver-version=580.159.04",
        "hook not applied (the Docker API runs no hooks): createContainer nvidia-cdi-hook chmod --mode 755 --path /dev/dri",
        "create-symlinks links under /dev, /proc or /sys not made: the engine mounts those at start "
        "(/dev/dri/by-path/pci-0000:19:00.0-card)",
        f"hook update-ldcache emulated: {LIB} first on LD_LIBRARY_PATH, 3 links by SONAME (libcuda.so.1 -> "
        "libcuda.so.580.159.04, libnvidia-ml.so.1 -> libnvidia-ml.so.580.159.04, libnvidia-ptxjitcompiler.so.1 -> "
        "libnvidia-ptxjitcompiler.so.580.159.04)",
        "mount options nodev, noexec, nosuid not applied: the Docker API's bind mounts take read-only or read-write only")


def hook(*args: str, path: str = "/usr/bin/nvidia-cdi-hook") -> Hook:
    return Hook("createContainer", path, args)


@pytest.mark.parametrize("edits, image_env, expected", [
    (ContainerEdits(mounts=(Mount("/a", "/b", ("rw", "bind")), Mount("/c", "/d"), Mount("none", "/t", ("size=1m",), "tmpfs"))), {},
     cdi.Translated(mounts=(BindMount("/a", "/b", read_only=False), BindMount("/c", "/d")),
                    notes=("mount of /t (type tmpfs) not applied: only bind mounts are translated",))),
    (ContainerEdits(device_nodes=(DeviceNode("/dev/a", "/dev/b", "rw"), DeviceNode("/dev/n", "/dev/n", "none"),
                                  DeviceNode("/dev/m", "/dev/m", "rwm", ("major", "minor")))), {},
     cdi.Translated(devices=(DeviceMapping("/dev/b", "/dev/a", "rw"), DeviceMapping("/dev/m", "/dev/m")),
                    notes=("device node /dev/n not given: its permissions are none",
                           "device node /dev/m: major, minor not applied (the engine copies the host's node as it is)"))),
    (ContainerEdits(env=("A=1", "A=2", "B=x=y")), {"A": "image"}, cdi.Translated(environment={"A": "2", "B": "x=y"})),
    (ContainerEdits(hooks=(hook("nvidia-cdi-hook", "update-ldcache", "--folder=/opt/lib", "-folder", "/usr/lib64", "--folder", "lib"),)),
     {"LD_LIBRARY_PATH": "/image/lib::"},
     cdi.Translated(environment={"LD_LIBRARY_PATH": "/opt/lib:/usr/lib64:/image/lib"},
                    notes=("update-ldcache folder 'lib' not used: not an absolute path",
                           "hook update-ldcache emulated: /opt/lib, /usr/lib64 first on LD_LIBRARY_PATH, no library there to "
                           "link by SONAME"))),
    (ContainerEdits(env=("LD_LIBRARY_PATH=/spec/lib",), hooks=(hook("nvidia-ctk", "hook", "update-ldcache", "--folder", "/l",
                                                                   path="/usr/bin/nvidia-ctk"),)),
     {"LD_LIBRARY_PATH": "/image/lib"},
     cdi.Translated(environment={"LD_LIBRARY_PATH": "/l:/spec/lib"},
                    notes=("hook update-ldcache emulated: /l first on LD_LIBRARY_PATH, no library there to link by SONAME",))),
    (ContainerEdits(hooks=(hook("nvidia-ctk", "hook", "create-symlinks", "--link", "a::/x/y", path="/usr/bin/nvidia-ctk"),
                           hook("nvidia-cdi-hook", "create-symlinks", "--link=b::/x/y", "--link", "nocolons", "--link", "c::rel",
                                "--link", "d::/proc/x"),
                           hook("/opt/vendor/hook", path="/opt/vendor/hook"))), {},
     cdi.Translated(links=(Symlink("/x/y", "a"),), notes=(
         "hook create-symlinks emulated: 1 symbolic link placed in the container before it starts",
         "create-symlinks link 'nocolons' not made: not TARGET::/ABSOLUTE/LINK",
         "create-symlinks link 'c::rel' not made: not TARGET::/ABSOLUTE/LINK",
         "hook not applied (the Docker API runs no hooks): createContainer /opt/vendor/hook",
         "create-symlinks links under /dev, /proc or /sys not made: the engine mounts those at start (/proc/x)"))),
    (ContainerEdits(other=("additionalGids", "intelRdt")), {},
     cdi.Translated(notes=("containerEdits.additionalGids not applied: the Docker API has no field for it here",
                           "containerEdits.intelRdt not applied: the Docker API has no field for it here"))),
], ids=["mounts", "device-nodes", "env", "update-ldcache", "ldcache-after-spec-env", "create-symlinks", "other-edits"])
def test_translation(edits: ContainerEdits, image_env: dict[str, str], expected: cdi.Translated) -> None:
    assert cdi.translate(edits, image_env, lambda path: None) == expected


def shared_library() -> Path:
    """A real ELF shared library of this machine with a SONAME: this Python's libpython, else libc."""
    libdir, name = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
    found = Path(libdir or "/", name or "-")
    return found if found.is_file() and sysconfig.get_config_var("Py_ENABLE_SHARED") else Path("/lib/x86_64-linux-gnu/libc.so.6")


def test_the_soname_link_comes_from_the_real_elf_file(tmp_path: Path) -> None:
    lib = shared_library()
    copied = tmp_path / "libvendor.so.580.159.04"
    shutil.copyfile(lib, copied)  # another name, as the driver's libcuda.so.580.159.04 (SONAME libcuda.so.1)
    expected = elf.soname(str(lib))
    assert expected and expected.startswith("lib") and ".so." in expected and expected != copied.name
    assert elf.soname(str(copied)) == expected
    edits = ContainerEdits(mounts=(Mount(str(copied), f"{LIB}/libvendor.so.580.159.04"),),
                           hooks=(hook("nvidia-cdi-hook", "update-ldcache", "--folder", LIB),))
    done = cdi.translate(edits, {}, elf.soname)
    assert done.links == (Symlink(f"{LIB}/{expected}", "libvendor.so.580.159.04"),)
    assert done.notes[0] == (f"hook update-ldcache emulated: {LIB} first on LD_LIBRARY_PATH, 1 link by SONAME "
                             f"({expected} -> libvendor.so.580.159.04)")


def test_no_soname_where_there_is_no_elf_library(tmp_path: Path) -> None:
    (tmp_path / "text.so.1").write_text("not ELF")
    (tmp_path / "broken.so.1").write_bytes(b"\x7fELF" + b"\x02\x01\x01" + b"\0" * 9)  # an ELF header and nothing after it
    os.mkfifo(tmp_path / "fifo.so.1")
    truncated = tmp_path / "truncated.so.1"
    truncated.write_bytes(shared_library().read_bytes()[:4096])
    for name in ("text.so.1", "broken.so.1", "fifo.so.1", "missing.so.1", "truncated.so.1"):
        assert elf.soname(str(tmp_path / name)) is None, name
    assert elf.soname(sys.executable if Path(sys.executable).is_file() else "/bin/sh") is None  # an executable has no SONAME


def test_a_soname_already_there_or_not_a_file_name_makes_no_link() -> None:
    mounts = (Mount("/h/libcuda.so.5", f"{LIB}/libcuda.so.5"), Mount("/h/libcuda.so.1", f"{LIB}/libcuda.so.1"),
              Mount("/h/libodd.so.2", f"{LIB}/libodd.so.2"), Mount("/h/libsame.so.3", f"{LIB}/libsame.so.3"),
              Mount("/h/notalib.bin", f"{LIB}/notalib.bin"))
    names = {"/h/libcuda.so.5": "libcuda.so.1", "/h/libodd.so.2": "../../etc/passwd", "/h/libsame.so.3": "libsame.so.3",
             "/h/notalib.bin": "libx.so.1"}
    edits = ContainerEdits(mounts=mounts, hooks=(hook("nvidia-cdi-hook", "update-ldcache", "--folder", LIB),))
    assert cdi.translate(edits, {}, names.get).links == ()


def test_edits_merge_in_order() -> None:
    a, b = ContainerEdits(env=("A=1",), other=("intelRdt",)), ContainerEdits(env=("B=2",), mounts=(Mount("/x", "/y"),))
    assert a.merged(b) == ContainerEdits(env=("A=1", "B=2"), mounts=(Mount("/x", "/y"),), other=("intelRdt",))
