"""CUDA library checks against a fake CUDA build of torch (no GPU, no real torch needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

VERIFY = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "verify"))


@pytest.fixture
def fake_cuda_torch(tmp_path):
    """site/torch: version.py says CUDA 12.8; importing it fails as without cuDNN."""
    torch = tmp_path / "site" / "torch"
    (torch / "lib").mkdir(parents=True)
    (torch / "version.py").write_text("__version__ = '2.9.1+cu128'\ncuda: Optional[str] = '12.8'\n")
    (torch / "__init__.py").write_text(
        "raise ImportError('libcudnn.so.9: cannot open shared object file: No such file or directory')\n")
    (torch / "lib" / "libcudart.so.12").write_bytes(b"not an ELF file")
    return tmp_path / "site"


def run(site, tmp_path, only: str) -> dict:
    out = tmp_path / "r.json"
    env = dict(os.environ, PYTHONPATH=str(site), LD_LIBRARY_PATH="")
    subprocess.run([sys.executable, os.path.join(VERIFY, "run.py"), "--only", only, "--out", str(out)],
                   env=env, capture_output=True, timeout=120)
    return {c["id"]: c for c in json.loads(out.read_text())["checks"]}


def test_missing_cudnn_fails_naming_the_library(fake_cuda_torch, tmp_path) -> None:
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


def test_a_broken_library_file_fails_with_the_loader_error(fake_cuda_torch, tmp_path) -> None:
    cudart = run(fake_cuda_torch, tmp_path, "libs.cudart")["libs.cudart"]
    assert cudart["status"] == "fail"
    assert cudart["detail"].startswith("CUDA runtime (libcudart) not loadable: OSError: ")
    assert cudart["data"]["path"] == f"{fake_cuda_torch}/torch/lib/libcudart.so.12"
