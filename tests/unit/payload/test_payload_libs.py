"""CUDA library checks against a fake CUDA build of torch (no GPU, no real torch needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

VERIFY = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "verify"))


@pytest.fixture
def fake_cuda_torch(tmp_path: Path) -> Path:
    """site/torch: version.py says CUDA 12.8; importing it fails as without cuDNN."""
    torch = tmp_path / "site" / "torch"
    (torch / "lib").mkdir(parents=True)
    (torch / "version.py").write_text("__version__ = '2.9.1+cu128'\ncuda: Optional[str] = '12.8'\n")
    (torch / "__init__.py").write_text(
        "raise ImportError('libcudnn.so.9: cannot open shared object file: No such file or directory')\n")
    (torch / "lib" / "libcudart.so.12").write_bytes(b"not an ELF file")
    return tmp_path / "site"


def run(site: Any, tmp_path: Path, only: str) -> dict[str, Any]:
    out = tmp_path / "r.json"
    env = dict(os.environ, PYTHONPATH=str(site), LD_LIBRARY_PATH="")
    subprocess.run([sys.executable, os.path.join(VERIFY, "run.py"), "--only", only, "--out", str(out)],
                   env=env, capture_output=True, timeout=120)
    return {c["id"]: c for c in json.loads(out.read_text())["checks"]}


def test_missing_cudnn_fails_naming_the_library(fake_cuda_torch: Any, tmp_path: Path) -> None:
    by_id = run(fake_cuda_torch, tmp_path, "libs.cudnn,versions.torch")
    cudnn = by_id["libs.cudnn"]
    assert cudnn["status"] == "fail"
    assert cudnn["detail"].startswith("cuDNN (libcudnn) not loadable: no libcudnn.so.[0-9]* or libcudnn-*.so* in ")
    assert cudnn["detail"].endswith("; torch 2.9.1+cu128 (CUDA 12.8) needs cuDNN (libcudnn)")
    torch = by_id["versions.torch"]
    assert torch["status"] == "fail"
    assert torch["detail"].startswith(f"torch is not importable (torch 2.9.1+cu128 at {fake_cuda_torch}/torch): ")
    assert torch["detail"].endswith("ImportError: libcudnn.so.9: cannot open shared object file: No such file or "
                                    "directory")


def test_a_broken_library_file_fails_with_the_loader_error(fake_cuda_torch: Any, tmp_path: Path) -> None:
    cudart = run(fake_cuda_torch, tmp_path, "libs.cudart")["libs.cudart"]
    assert cudart["status"] == "fail"
    assert cudart["detail"].startswith("CUDA runtime (libcudart) not loadable: OSError: ")
    assert cudart["data"]["path"] == f"{fake_cuda_torch}/torch/lib/libcudart.so.12"


# ------------------------------------------------------------------ libs.integrity
def record_line(site: Any, rel: str) -> str:
    import base64
    import hashlib

    data = (site / rel).read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{len(data)}\n"


@pytest.fixture
def fake_cudnn_wheel(tmp_path: Path) -> Path:
    """site/nvidia/cudnn/lib with three loadable libraries (copies of libz) and the
    dist-info of nvidia-cudnn-cu13 whose RECORD lists them; beside them a CUDA 13 torch whose import fails, so the
    payload never imports the CPU torch of the test's own venv (4 s each run, under coverage) for checks that do not
    need torch."""
    import shutil

    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "version.py").write_text("__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n")
    (site / "torch" / "__init__.py").write_text("raise ImportError('this test does not load torch')\n")
    lib = site / "nvidia" / "cudnn" / "lib"
    lib.mkdir(parents=True)
    names = ["libcudnn.so.9", "libcudnn_cnn.so.9", "libcudnn_graph.so.9"]
    for name in names:
        shutil.copy("/lib/x86_64-linux-gnu/libz.so.1", lib / name)
    (lib / "__init__.py").write_text("")
    info = site / "nvidia_cudnn_cu13-9.24.0.43.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-cudnn-cu13\nVersion: 9.24.0.43\n")
    rows = "".join(record_line(site, f"nvidia/cudnn/lib/{n}") for n in names + ["__init__.py"])
    (info / "RECORD").write_text(rows + "nvidia_cudnn_cu13-9.24.0.43.dist-info/RECORD,,\n")
    return site


def integrity(site: Any, tmp_path: Path) -> dict[str, Any]:
    return cast(dict[str, Any], run(site, tmp_path, "libs.integrity")["libs.integrity"])


def test_intact_wheel_libraries_pass(fake_cudnn_wheel: Any, tmp_path: Path) -> None:
    check = integrity(fake_cudnn_wheel, tmp_path)
    assert check["status"] == "pass", check
    assert check["detail"] == ("3 shared libraries of 1 nvidia-* wheels present, match their RECORD sha256 "
                               "and load")


def test_a_partly_removed_cudnn_fails(fake_cudnn_wheel: Any, tmp_path: Path) -> None:
    (fake_cudnn_wheel / "nvidia" / "cudnn" / "lib" / "libcudnn_cnn.so.9").unlink()
    check = integrity(fake_cudnn_wheel, tmp_path)
    assert check["status"] == "fail" and check["value"] == 1
    assert check["detail"] == ("1 of 3 shared libraries of the nvidia-* wheels are missing, altered or do not "
                               "load: nvidia-cudnn-cu13 9.24.0.43: 1 broken (libcudnn_cnn.so.9 missing); "
                               "reinstall those wheels")


def test_an_altered_library_fails_its_record_hash(fake_cudnn_wheel: Any, tmp_path: Path) -> None:
    with open(fake_cudnn_wheel / "nvidia" / "cudnn" / "lib" / "libcudnn_graph.so.9", "ab") as fh:
        fh.write(b"\0")
    check = integrity(fake_cudnn_wheel, tmp_path)
    assert check["status"] == "fail"
    assert "libcudnn_graph.so.9 sha256 differs from the wheel's RECORD" in check["detail"]


def test_a_library_that_does_not_load_fails_with_the_loader_error(fake_cudnn_wheel: Any, tmp_path: Path) -> None:
    target = fake_cudnn_wheel / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9"
    target.write_bytes(b"not an ELF file")
    info = fake_cudnn_wheel / "nvidia_cudnn_cu13-9.24.0.43.dist-info" / "RECORD"
    rows = [r for r in info.read_text().splitlines(keepends=True) if not r.startswith("nvidia/cudnn/lib/libcudnn.so.9")]
    info.write_text(record_line(fake_cudnn_wheel, "nvidia/cudnn/lib/libcudnn.so.9") + "".join(rows))
    check = integrity(fake_cudnn_wheel, tmp_path)
    assert check["status"] == "fail"
    assert "libcudnn.so.9 does not load: " in check["detail"] and "file too short" in check["detail"]


def linked_library(site: Any, tmp_path: Path, name: str, needs: str) -> None:
    """site/nvidia/cudnn/lib/<name>, linked against a library with soname `needs` (not shipped), added to RECORD."""
    import shutil

    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to make a linked library")
    build = tmp_path / "build"
    build.mkdir(exist_ok=True)
    (build / "stub.c").write_text("int dep(unsigned f) { return f; }\n")
    (build / "user.c").write_text("int dep(unsigned); int use(void) { return dep(0); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{needs}", "-o", str(build / needs), str(build / "stub.c")],
                   check=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(site / "nvidia" / "cudnn" / "lib" / name), str(build / "user.c"),
                    str(build / needs)], check=True)
    record = site / "nvidia_cudnn_cu13-9.24.0.43.dist-info" / "RECORD"
    record.write_text(record_line(site, f"nvidia/cudnn/lib/{name}") + record.read_text())


def test_a_library_that_needs_the_driver_is_noted_not_failed(fake_cudnn_wheel: Any, tmp_path: Path) -> None:
    linked_library(fake_cudnn_wheel, tmp_path, "libcudnn_adv.so.9", needs="libcuda.so.1")
    check = integrity(fake_cudnn_wheel, tmp_path)
    assert check["status"] == "pass", check
    assert check["detail"].endswith("and load (1 need the NVIDIA driver, not loaded here: libcudnn_adv.so.9)")


def test_a_plugin_that_needs_a_library_no_wheel_ships_is_noted_not_failed(fake_cudnn_wheel: Any, tmp_path: Path) -> None:
    """nvshmem's MPI/UCX bootstraps, cuFile's RDMA: optional, their libraries are not in the image."""
    linked_library(fake_cudnn_wheel, tmp_path, "nvshmem_bootstrap_mpi.so.3", needs="libmpi.so.40")
    check = integrity(fake_cudnn_wheel, tmp_path)
    assert check["status"] == "pass", check
    assert check["detail"].endswith("(1 optional plugins need libraries no nvidia-* wheel ships, not loaded: "
                                    "libmpi.so.40)")


def unresolved_library(site: Path, tmp_path: Path, name: str, symbol: str) -> None:
    """site/nvidia/cudnn/lib/<name> calling ``symbol``, defined nowhere (linked without its library), added to RECORD."""
    import shutil

    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to make a library")
    (tmp_path / "plugin.c").write_text(f"int {symbol}(void); int use(void) {{ return {symbol}(); }}\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(site / "nvidia" / "cudnn" / "lib" / name), str(tmp_path / "plugin.c")],
                   check=True)
    record = site / "nvidia_cudnn_cu13-9.24.0.43.dist-info" / "RECORD"
    record.write_text(record_line(site, f"nvidia/cudnn/lib/{name}") + record.read_text())


def test_a_plugin_expecting_its_launcher_to_have_loaded_pmix_is_noted_not_failed(fake_cudnn_wheel: Any, tmp_path: Path) -> None:
    """nvshmem_bootstrap_pmix.so.3 on an H200 host: 'undefined symbol: pmix_value_load' (no DT_NEEDED on libpmix)."""
    unresolved_library(fake_cudnn_wheel, tmp_path, "nvshmem_bootstrap_pmix.so.3", "pmix_value_load")
    check = integrity(fake_cudnn_wheel, tmp_path)
    assert check["status"] == "pass", check
    assert check["detail"].endswith("(1 optional plugins need libraries no nvidia-* wheel ships, not loaded: "
                                    "libpmix (pmix_value_load))")


def test_a_library_missing_one_of_its_own_symbols_fails(fake_cudnn_wheel: Any, tmp_path: Path) -> None:
    unresolved_library(fake_cudnn_wheel, tmp_path, "libcudnn_heuristic.so.9", "cudnnGetVersionInternal")
    check = integrity(fake_cudnn_wheel, tmp_path)
    assert check["status"] == "fail"
    assert "libcudnn_heuristic.so.9 does not load: " in check["detail"] and "undefined symbol: cudnnGetVersionInternal" in check["detail"]


def test_a_library_whose_wheel_dependency_is_gone_fails(fake_cudnn_wheel: Any, tmp_path: Path) -> None:
    """libcudnn_engines needs libcudnn_graph.so.9, a file of the wheel: deleting it breaks both."""
    linked_library(fake_cudnn_wheel, tmp_path, "libcudnn_engines.so.9", needs="libcudnn_graph.so.9")
    (fake_cudnn_wheel / "nvidia" / "cudnn" / "lib" / "libcudnn_graph.so.9").unlink()
    check = integrity(fake_cudnn_wheel, tmp_path)
    assert check["status"] == "fail" and check["value"] == 2
    assert "libcudnn_engines.so.9 does not load: libcudnn_graph.so.9: cannot open shared object file" in check["detail"]
    assert "libcudnn_graph.so.9 missing" in check["detail"]


def test_no_nvidia_wheels_skips(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    check = integrity(tmp_path / "empty", tmp_path)
    assert check["status"] == "skip" and check["detail"].startswith("no nvidia-* wheels installed (")


# ------------------------------------------------------------------ CUDA runtime version
def runtime_version(site: Any) -> object:
    code = "from imagesmith_payload.libs import cuda_runtime_version; print(repr(cuda_runtime_version()))"
    env = dict(os.environ, PYTHONPATH=f"{site}:{VERIFY}", LD_LIBRARY_PATH="")
    return eval(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                               check=True).stdout)


def test_cuda_runtime_version_from_the_wheel(tmp_path: Path) -> None:
    info = tmp_path / "nvidia_cuda_runtime_cu12-12.8.90.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-cuda-runtime-cu12\nVersion: 12.8.90\n")
    assert runtime_version(tmp_path) == ("12.8.90", "nvidia-cuda-runtime-cu12 wheel")


def test_cuda_runtime_version_from_the_library_file_name(fake_cuda_torch: Any) -> None:
    lib = fake_cuda_torch / "torch" / "lib"
    (lib / "libcudart.so.12").unlink()
    (lib / "libcudart.so.12.8.57").write_bytes(b"")
    (lib / "libcudart.so.12").symlink_to("libcudart.so.12.8.57")
    assert runtime_version(fake_cuda_torch) == ("12.8.57", "libcudart.so.12.8.57")
