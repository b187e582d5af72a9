"""The GPU-count rule (verify/imagesmith_payload/gpumode.py): what was asked x what is visible."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "verify"))

from imagesmith_payload.gpumode import decide, requested_count

WHY = "CUDA_VISIBLE_DEVICES='' hides every GPU"
CPU_BUILD = "torch 2.13.0+cpu is a CPU-only build"


@pytest.mark.parametrize("gpus, count", [("all", None), ("none", None), ("auto", None), ("0", 1), ("0,1", 2),
                                         ("GPU-3f1c,GPU-77aa,2", 3)])
def test_requested_count(gpus: str, count: Any) -> None:
    assert requested_count(gpus) == count


# asked, visible, CUDA build of torch, require_gpu, allow_cpu -> mode, status of gpu.devices, reason
@pytest.mark.parametrize("asked, visible, cuda, require, allow, mode, status, reason", [
    # a list asks for exactly those GPUs
    ("0", 1, True, False, False, "gpu", "pass", "GPU mode: 1 GPU (--gpus 0)"),
    ("0,1", 2, True, False, False, "gpu", "pass", "GPU mode: 2 GPUs (--gpus 0,1)"),
    ("0,1", 1, True, False, False, "gpu", "fail", "asked for 2 GPUs (--gpus 0,1), 1 visible"),
    ("0", 0, True, False, True, "cpu", "fail", f"asked for 1 GPU (--gpus 0), none visible: {WHY}"),
    ("0", 2, True, False, False, "gpu", "fail", "asked for 1 GPU (--gpus 0), 2 visible"),
    # all: every GPU, at least one
    ("all", 8, True, False, False, "gpu", "pass", "GPU mode: 8 GPUs (--gpus all)"),
    ("all", 0, True, False, False, "cpu", "fail",
     f"asked for all GPUs (--gpus all), none visible: {WHY}; a CUDA image is verified on a GPU: make one "
     "visible, or ask for CPU mode with --gpus none or --allow-cpu-verification (the image is then not "
     "GPU-verified)"),
    ("all", 0, True, False, True, "cpu", "skip",
     f"CPU mode: no GPU visible ({WHY}); CPU verification allowed (--allow-cpu-verification / "
     "verify.require_gpu: false): not GPU-verified"),
    ("all", 0, True, True, True, "cpu", "fail", f"asked for all GPUs (--gpus all), none visible: {WHY}; a CUDA "
     "image is verified on a GPU: make one visible, or ask for CPU mode with --gpus none or "
     "--allow-cpu-verification (the image is then not GPU-verified)"),
    ("all", 0, False, False, False, "cpu", "skip", f"CPU mode: {CPU_BUILD}: GPU checks skipped"),
    ("all", 0, False, True, False, "cpu", "fail", f"no GPU visible but a GPU is required: {CPU_BUILD}"),
    # none: CPU mode, the only way to ask for it
    ("none", 0, True, False, False, "cpu", "skip", "CPU mode, as asked (--gpus none): GPU checks skipped"),
    ("none", 0, True, True, False, "cpu", "fail",
     "a GPU is required (--require-gpu / verify.require_gpu) but --gpus none asks for CPU mode"),
    # auto: a bare payload run that asked for nothing
    ("auto", 1, True, False, False, "gpu", "pass", "GPU mode: 1 GPU (--gpus auto)"),
    ("auto", 0, True, False, False, "cpu", "skip", f"CPU mode: {WHY}: GPU checks skipped"),
    ("auto", 0, True, True, False, "cpu", "fail", f"no GPU visible but a GPU is required: {WHY}"),
])
def test_gpu_count_rule(asked: str, visible: int, cuda: bool, require: bool, allow: bool, mode: str, status: str,
                        reason: str) -> None:
    why = CPU_BUILD if not cuda else WHY
    got = decide(asked, visible, cuda, require, allow, "" if visible else why)
    assert (got.name, got.status, got.reason, got.gpus) == (mode, status, reason, visible)
