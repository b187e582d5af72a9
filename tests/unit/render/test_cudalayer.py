"""The shared CUDA layer's determinism rules, on small wheels made here."""

from __future__ import annotations

import calendar
import csv
import hashlib
import io
import json
import os
import random
import tarfile
import zipfile
from pathlib import Path

import pytest

from imagesmith.render import cudalayer
from imagesmith.render.cudalayer import LayerError

WHEEL_TIME = (2025, 6, 1, 12, 0, 0)


def make_wheel(folder: Path, name: str, version: str, files: dict[str, bytes], executable: tuple[str, ...] = (),
               date_time: tuple[int, ...] = WHEEL_TIME, shuffle: int | None = None) -> Path:
    """A wheel with ``files`` plus METADATA/WHEEL/RECORD; ``shuffle`` reorders the zip members."""
    dist_info = f"{name}-{version}.dist-info"
    members = dict(files)
    members[f"{dist_info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    members[f"{dist_info}/WHEEL"] = b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-manylinux_2_27_x86_64\n"
    rows = [[n, "sha256=" + hashlib.sha256(d).hexdigest(), str(len(d))] for n, d in members.items()]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows + [[f"{dist_info}/RECORD", "", ""]])
    members[f"{dist_info}/RECORD"] = buf.getvalue().encode()
    order = list(members)
    if shuffle is not None:
        random.Random(shuffle).shuffle(order)
    path = folder / f"{name}-{version}-py3-none-manylinux_2_27_x86_64.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for member in order:
            info = zipfile.ZipInfo(member, date_time=date_time)  # type: ignore[arg-type]
            info.external_attr = (0o100755 if member in executable else 0o100644) << 16
            zf.writestr(info, members[member])
    return path


def cuda_wheels(folder: Path, shuffle: int | None = None) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [
        make_wheel(folder, "nvidia_cublas", "13.1.1.3", {"nvidia/cu13/lib/libcublas.so.13": b"\x7fELF cublas" * 50,
                                                         "nvidia/cu13/include/cublas.h": b"/* h */",
                                                         "nvidia/__pycache__/x.cpython-311.pyc": b"pyc"},
                   executable=("nvidia/cu13/lib/libcublas.so.13",), shuffle=shuffle),
        make_wheel(folder, "nvidia_cudnn_cu13", "9.24.0.43", {"nvidia/cudnn/lib/libcudnn.so.9": b"\x7fELF cudnn" * 80,
                                                              "nvidia/cudnn/__init__.py": b""},
                   date_time=(2025, 7, 1, 0, 0, 0), shuffle=shuffle),
    ]


def layer_bytes(wheels: list[Path], epoch: int | None = None) -> bytes:
    out = io.BytesIO()
    cudalayer.write_layer(cudalayer.layer_sources(wheels, epoch), out)
    return out.getvalue()


def members(data: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return tar.getmembers()


# -- byte-identical wherever the same set is installed --------------------------------------------


def test_same_wheels_give_the_same_bytes_whatever_the_order_host_or_umask(tmp_path: Path) -> None:
    first = layer_bytes(cuda_wheels(tmp_path / "a"))
    wheels = cuda_wheels(tmp_path / "b", shuffle=7)  # other zip member order, other folder
    for w in wheels:
        os.utime(w, (1, 1))  # the wheel files' own times play no part
    old = os.umask(0o077)
    try:
        second = layer_bytes(list(reversed(wheels)))
    finally:
        os.umask(old)
    assert first == second
    assert hashlib.sha256(first).hexdigest() == hashlib.sha256(second).hexdigest()


def test_another_wheel_version_gives_another_layer(tmp_path: Path) -> None:
    base = cuda_wheels(tmp_path / "a")
    other = [make_wheel(tmp_path / "a", "nvidia_cublas", "13.1.1.4", {"nvidia/cu13/lib/libcublas.so.13": b"\x7fELF v2"}), base[1]]
    assert layer_bytes(base) != layer_bytes(other)


def test_entries_are_sorted_owned_by_root_with_fixed_modes(tmp_path: Path) -> None:
    entries = members(layer_bytes(cuda_wheels(tmp_path)))
    names = [m.name for m in entries]
    assert names == sorted(names, key=lambda n: n.split("/"))
    assert names[:3] == ["opt", "opt/imagesmith", "opt/imagesmith/cuda"]
    assert all((m.uid, m.gid, m.uname, m.gname) == (0, 0, "", "") for m in entries)
    modes = {m.name: (m.type, m.mode) for m in entries}
    assert modes["opt/imagesmith/cuda/nvidia/cu13/lib"] == (tarfile.DIRTYPE, 0o755)
    assert modes["opt/imagesmith/cuda/nvidia/cu13/lib/libcublas.so.13"] == (tarfile.REGTYPE, 0o755)
    assert modes["opt/imagesmith/cuda/nvidia/cu13/include/cublas.h"] == (tarfile.REGTYPE, 0o644)


def test_no_bytecode_and_installer_recorded(tmp_path: Path) -> None:
    data = layer_bytes(cuda_wheels(tmp_path))
    names = [m.name for m in members(data)]
    assert not [n for n in names if n.endswith(".pyc") or "__pycache__" in n]
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        prefix = "opt/imagesmith/cuda/nvidia_cublas-13.1.1.3.dist-info/"
        installer = tar.extractfile(prefix + "INSTALLER").read()  # type: ignore[union-attr]
        record = tar.extractfile(prefix + "RECORD").read().decode()  # type: ignore[union-attr]
    assert installer == b"imagesmith\n"
    paths = [row[0] for row in csv.reader(io.StringIO(record))]
    assert "nvidia_cublas-13.1.1.3.dist-info/INSTALLER" in paths
    assert not [p for p in paths if p.endswith(".pyc")]
    assert paths[-1] == "nvidia_cublas-13.1.1.3.dist-info/RECORD"


# -- times ------------------------------------------------------------------------------------


def test_files_keep_their_wheel_times_and_directories_the_newest(tmp_path: Path) -> None:
    entries = {m.name: m for m in members(layer_bytes(cuda_wheels(tmp_path)))}
    june, july = calendar.timegm((2025, 6, 1, 12, 0, 0)), calendar.timegm((2025, 7, 1, 0, 0, 0))
    assert entries["opt/imagesmith/cuda/nvidia/cu13/lib/libcublas.so.13"].mtime == june
    assert entries["opt/imagesmith/cuda/nvidia/cudnn/lib/libcudnn.so.9"].mtime == july
    assert {m.mtime for m in entries.values() if m.isdir()} == {july}


def test_source_date_epoch_clamps_every_time(tmp_path: Path) -> None:
    epoch = calendar.timegm((2025, 6, 15, 0, 0, 0))
    entries = members(layer_bytes(cuda_wheels(tmp_path), epoch))
    assert max(m.mtime for m in entries) == epoch
    assert {m.mtime for m in entries if "cublas" in m.name and m.isfile()} == {calendar.timegm(WHEEL_TIME)}


def test_a_later_epoch_changes_nothing(tmp_path: Path) -> None:
    wheels = cuda_wheels(tmp_path)
    assert layer_bytes(wheels, calendar.timegm((2030, 1, 1, 0, 0, 0))) == layer_bytes(wheels, None)


@pytest.mark.parametrize("value, expected", [
    ("", None), ("  ", None), ("1700000000", 1700000000),
])
def test_source_date_epoch_values(value: str, expected: int | None) -> None:
    assert cudalayer.source_date_epoch({"SOURCE_DATE_EPOCH": value}) == expected


@pytest.mark.parametrize("value", ["yesterday", "-5", "1.5"])
def test_source_date_epoch_must_be_seconds(value: str) -> None:
    with pytest.raises(LayerError, match=r"SOURCE_DATE_EPOCH=.*expected seconds since 1970"):
        cudalayer.source_date_epoch({"SOURCE_DATE_EPOCH": value})


# -- what a wheel may put in the layer ----------------------------------------------------------


@pytest.mark.parametrize("member, message", [
    ("/etc/passwd", "x.whl: unsafe path '/etc/passwd' (absolute, outside the prefix, or empty)"),
    ("../../etc/passwd", "x.whl: unsafe path '../../etc/passwd' (absolute, outside the prefix, or empty)"),
    ("nvidia/../../escape", "x.whl: unsafe path 'nvidia/../../escape' (absolute, outside the prefix, or empty)"),
])
def test_unsafe_paths_are_refused(member: str, message: str) -> None:
    with pytest.raises(LayerError) as err:
        cudalayer.safe_path(member, "x.whl")
    assert str(err.value) == message


def test_library_data_installs_next_to_the_package_and_scripts_are_refused(tmp_path: Path) -> None:
    ok = make_wheel(tmp_path, "nvidia_x", "1.0", {"nvidia_x-1.0.data/platlib/nvidia/x/lib/libx.so": b"x"})
    assert next(s.path for s in cudalayer.wheel_sources(ok, None)) == "nvidia/x/lib/libx.so"
    bad = make_wheel(tmp_path, "nvidia_y", "1.0", {"nvidia_y-1.0.data/scripts/run": b"#!/bin/sh"})
    with pytest.raises(LayerError) as err:
        cudalayer.wheel_sources(bad, None)
    assert str(err.value) == (f"{bad.name}: 'nvidia_y-1.0.data/scripts/run' is not library code (nvidia_y-1.0.data/scripts); "
                              "the CUDA layer holds library wheels only")


def test_two_wheels_may_not_install_one_path(tmp_path: Path) -> None:
    a = make_wheel(tmp_path, "nvidia_a", "1.0", {"nvidia/cu13/lib/libsame.so": b"a"})
    b = make_wheel(tmp_path, "nvidia_b", "1.0", {"nvidia/cu13/lib/libsame.so": b"b"})
    with pytest.raises(LayerError) as err:
        cudalayer.layer_sources([a, b], None)
    assert str(err.value) == f"{b.name} and {a.name} both install nvidia/cu13/lib/libsame.so"


def test_a_file_two_wheels_install_with_the_same_bytes_is_held_once(tmp_path: Path) -> None:
    a = make_wheel(tmp_path, "nvidia_cublas_cu12", "12.8.4.1", {"nvidia/__init__.py": b"", "nvidia/cublas/lib/libcublas.so.12": b"a"})
    b = make_wheel(tmp_path, "nvidia_cuda_cupti_cu12", "12.8.90", {"nvidia/__init__.py": b"", "nvidia/cuda_cupti/lib/libcupti.so.12": b"c"})
    paths = [s.path for s in cudalayer.layer_sources([a, b], None)]
    assert paths.count("nvidia/__init__.py") == 1 and "nvidia/cuda_cupti/lib/libcupti.so.12" in paths


def test_predicted_size_is_what_is_written(tmp_path: Path) -> None:
    long = "nvidia/cu13/include/" + "deep/" * 30 + "header.h"  # > 100 characters: a PAX header
    wheels = cuda_wheels(tmp_path) + [make_wheel(tmp_path, "nvidia_long", "1.0", {long: b"h" * 777})]
    sources = cudalayer.layer_sources(wheels, None)
    out = io.BytesIO()
    info = cudalayer.write_layer(sources, out)
    assert cudalayer.tar_size(sources) == info.size == len(out.getvalue())
    assert info.diff_id == "sha256:" + hashlib.sha256(out.getvalue()).hexdigest()


# -- the image -----------------------------------------------------------------------------------


BASE = {"architecture": "amd64", "os": "linux", "created": "2026-11-30T10:28:19.25Z", "docker_version": "20.10",
        "container": "abc", "container_config": {"Cmd": ["/bin/sh"]}, "history": [{"created": "2026-11-30T10:28:19Z"}],
        "config": {"Env": ["LANG=C.UTF-8"], "Cmd": ["bash"], "Labels": {"base": "yes"}},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "1" * 64]}}


def test_image_config_adds_the_layer_and_nothing_of_the_build_host() -> None:
    raw = cudalayer.image_config(BASE, "sha256:" + "2" * 64, "2025-07-01T00:00:00Z", {"io.imagesmith.cuda.set": "s"}, "made")
    cfg = json.loads(raw)
    assert cfg["rootfs"]["diff_ids"] == ["sha256:" + "1" * 64, "sha256:" + "2" * 64]
    assert cfg["config"]["Labels"] == {"base": "yes", "io.imagesmith.cuda.set": "s"}
    assert cfg["config"]["Env"] == ["LANG=C.UTF-8"] and cfg["created"] == "2025-07-01T00:00:00Z"
    assert not {"container", "container_config", "docker_version"} & set(cfg)
    assert cfg["history"][-1] == {"created": "2025-07-01T00:00:00Z", "created_by": "made", "comment": "imagesmith"}
    again = cudalayer.image_config(json.loads(json.dumps(BASE)), "sha256:" + "2" * 64, "2025-07-01T00:00:00Z",
                                   {"io.imagesmith.cuda.set": "s"}, "made")
    assert cudalayer.image_id(raw) == cudalayer.image_id(again)


def test_archive_is_a_docker_load_archive_of_one_layer_for_every_base(tmp_path: Path) -> None:
    sources = cudalayer.layer_sources(cuda_wheels(tmp_path), None)
    other = json.loads(json.dumps(BASE)) | {"rootfs": {"type": "layers", "diff_ids": ["sha256:" + "3" * 64] * 2}}
    archive = cudalayer.Archive(sources, [cudalayer.ImageRequest(BASE, "r:a"), cudalayer.ImageRequest(other, "r:b")],
                                {"k": "v"}, "made")
    data = b"".join(archive.chunks())
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        layer = tar.extractfile("cuda/layer.tar").read()  # type: ignore[union-attr]
        configs = {m["RepoTags"][0]: json.loads(tar.extractfile(m["Config"]).read()) for m in manifest}  # type: ignore[union-attr]
    assert [m["Layers"] for m in manifest] == [["base-0/layer.tar", "cuda/layer.tar"],
                                               ["base-0/layer.tar", "base-1/layer.tar", "cuda/layer.tar"]]
    assert archive.layer is not None and archive.layer.diff_id == "sha256:" + hashlib.sha256(layer).hexdigest()
    assert layer == layer_bytes(cuda_wheels(tmp_path / "again"))
    assert {tag: c["rootfs"]["diff_ids"][-1] for tag, c in configs.items()} == {"r:a": archive.layer.diff_id, "r:b": archive.layer.diff_id}
    assert configs["r:a"]["created"] == "2025-07-01T00:00:00Z"  # the newest (clamped) file time
