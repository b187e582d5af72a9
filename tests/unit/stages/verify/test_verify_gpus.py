"""Host side of the GPU rule (imagesmith/stages/verify/verify.py, pipeline.options_from): what the payload is told."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from imagesmith import pipeline
from imagesmith.model import compat, matrix
from imagesmith.stages.verify import onhost, verify
from tests.conftest import LOCAL_ROOTS, ROOT

CUDA = {"io.imagesmith.cuda": "13.0", "io.imagesmith.layer": "base"}
CPU = {"io.imagesmith.cuda": "cpu", "io.imagesmith.layer": "base"}


# (options.require_gpu, options.allow_cpu), labels -> (require_gpu, allow_cpu) sent to the payload
@pytest.mark.parametrize("require, allow, labels, sent", [
    (False, False, CUDA, (False, False)),  # imagesmith verify IMAGE: --gpus all must find a GPU, --gpus none is CPU mode
    (True, False, CUDA, (True, False)),  # --require-gpu
    (False, True, CUDA, (False, True)),  # --allow-cpu-verification
    (None, None, CUDA, (True, False)),  # a release, matrix default: a CUDA image needs a GPU
    (None, None, CPU, (False, True)),  # ... a CPU image does not
    (None, None, {}, (False, True)),  # an image without labels: as a CPU image (the payload sees torch's build)
    (False, None, CUDA, (False, True)),  # verify.require_gpu: false
    (True, None, CUDA, (True, False)),  # verify.require_gpu: true
    (True, True, CUDA, (False, True)),  # --allow-cpu-verification wins over the matrix
])
def test_gpu_policy(require: Any, allow: Any, labels: dict[str, Any], sent: tuple[Any, ...]) -> None:
    assert verify.gpu_policy(labels, verify.VerifyOptions(require_gpu=require, allow_cpu=allow)) == sent


def test_the_payload_is_told_what_was_asked() -> None:
    config = verify.payload_config(CUDA, verify.VerifyOptions(gpus="0,1"), compat.load())
    assert (config["gpus"], config["require_gpu"], config["allow_cpu"]) == ("0,1", False, False)
    assert {"release": "13.0.2", "cudart": "13.0.96", "driver": "580.95.05", "min_driver": "580.65.06"} in \
        config["driver"]["releases"]


@pytest.mark.parametrize("gpus, environ, env", [
    ("none", {}, {"CUDA_VISIBLE_DEVICES": ""}),
    ("none", {"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": ""}),
    ("0,1", {}, {"CUDA_VISIBLE_DEVICES": "0,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}),  # numbered as NVML numbers them
    ("0", {"CUDA_VISIBLE_DEVICES": ""}, {}),  # the environment hides the GPU: the payload sees none and fails
    ("all", {}, {}),
])
def test_local_gpu_env(gpus: str, environ: dict[str, Any], env: dict[str, Any]) -> None:
    assert onhost.local_gpu_env(gpus, environ) == env


def test_release_options_come_from_the_matrix_and_the_flag() -> None:
    m = matrix.load(ROOT / "examples" / "local.yaml", allowed_roots=LOCAL_ROOTS)
    plain, allowed = pipeline.options_from(m), pipeline.options_from(m, allow_cpu_verification=True)
    assert (plain.gpus, plain.require_gpu, plain.allow_cpu) == ("all", None, None)
    assert (allowed.require_gpu, allowed.allow_cpu) == (None, True)
    assert verify.gpu_policy(CUDA, plain) == (True, False) and verify.gpu_policy(CUDA, allowed) == (False, True)


def cli(*args: str, env: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "imagesmith.cli", "verify", "--local", *args], capture_output=True,
                          text=True, env=dict(os.environ, **(env or {})), timeout=120)


def test_local_gpus_0_with_the_gpu_hidden_fails_gpu_devices(tmp_path: Path) -> None:
    out = tmp_path / "v.json"
    proc = cli("--gpus", "0", "--only", "gpu.devices", "--json", str(out), env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 1 and proc.stderr.strip().endswith("error: verification failed: gpu.devices")
    report = json.loads(out.read_text())
    (devices,) = report["checks"]
    assert devices["status"] == "fail" and devices["detail"].startswith("asked for 1 GPU (--gpus 0), none visible: ")
    assert report["mode"]["requested"] == "0"
    assert proc.stdout.splitlines()[0].startswith("verify this host (quick), asked for 1 GPU (--gpus 0), none visible")


def test_local_gpus_none_is_cpu_mode_and_says_so(tmp_path: Path) -> None:
    import importlib.metadata

    try:  # the lock's CPU torch where `make install` put it (Python 3.11, Linux x86_64), else none
        torch_version: str | None = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = None
    proc = cli("--gpus", "none", "--only", "gpu.devices")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith("verify this host (quick), CPU mode, as asked (--gpus none): GPU checks "
                                                  f"skipped: torch {torch_version} cuda None")


@pytest.mark.parametrize("args, message", [
    (("--gpus", "0;1"), "Error: Invalid value for '--gpus': '0;1': write all, none, GPU indexes (0,1) or UUIDs (GPU-...)"),
    (("--require-gpu", "--allow-cpu-verification"),
     "error: --require-gpu and --allow-cpu-verification contradict each other: give one"),
    (("--gpu-runtime", "rocm"), "Error: Invalid value for '--gpu-runtime': 'rocm' is not one of 'auto', 'nvidia', 'cdi'."),
    (("--gpu-runtime", "cdi"), "error: --gpu-runtime cdi says how GPUs reach a container; --local starts no container: leave it out"),
])
def test_bad_gpu_flags_are_bad_usage_in_one_clear_line(args: tuple[Any, ...], message: str) -> None:
    proc = cli(*args)
    assert (proc.returncode, proc.stderr.strip().splitlines()[-1]) == (2, message)


def test_a_gpu_runtime_with_no_gpu_asked_is_bad_usage_before_any_engine_is_asked() -> None:
    proc = subprocess.run([sys.executable, "-m", "imagesmith.cli", "verify", "img:1", "--gpus", "none", "--gpu-runtime", "nvidia"],
                          capture_output=True, text=True, env=dict(os.environ, DOCKER_HOST="tcp://127.0.0.1:9"), timeout=120)
    assert (proc.returncode, proc.stderr.strip().splitlines()[-1]) == (
        2, "error: --gpu-runtime nvidia says how GPUs reach a container; --gpus none asks for no GPU: leave it out")
