"""GPU mode or CPU mode, and whether that is what was asked for (pure).

The rule (imagesmith always says what it asks for; see README "Verifying"):

* ``--gpus 0,1`` asks for exactly those GPUs: fewer (or more) visible fails.
* ``--gpus all`` asks for every GPU and at least one: none visible fails, unless
  CPU verification is allowed (``--allow-cpu-verification``, or
  ``verify.require_gpu: false``) or torch is a CPU-only build (nothing to ask a
  GPU for); then the run is in CPU mode and says so.
* ``--gpus none`` is the way to ask for CPU mode (GPUs are then ignored).
* A required GPU (``--require-gpu``) makes every CPU-mode run fail.
* ``auto`` (a bare payload run, nothing asked): the GPUs that are visible, else
  CPU mode, stated.

A CPU-mode run never makes a CUDA image GPU-verified.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

from .judge import FAIL, PASS, SKIP

ALL, NONE, AUTO = "all", "none", "auto"


def requested_count(gpus: str) -> Optional[int]:
    """How many GPUs an explicit list asks for; None for all / none / auto."""
    return None if gpus in (ALL, NONE, AUTO) else len([g for g in gpus.split(",") if g.strip()])


@dataclass(frozen=True)
class Mode:
    name: str  # "gpu" | "cpu"
    gpus: int  # GPUs the run used
    requested: str
    status: str  # gpu.devices: pass (as asked), skip (CPU mode, as asked or allowed), fail
    reason: str  # plain words, for the first line of every table

    def to_json(self) -> Dict[str, Any]:
        return {"mode": self.name, "gpus": self.gpus, "requested": self.requested,
                "status": self.status, "reason": self.reason}


def decide(requested: str, visible: int, cuda_build: bool, require_gpu: bool, allow_cpu: bool,
           why_none: str) -> Mode:
    """The mode of a run that asked for `requested` and sees `visible` GPUs."""
    if requested == NONE:
        return _cpu(requested, require_gpu, "CPU mode, as asked (--gpus none)",
                    "a GPU is required (--require-gpu / verify.require_gpu) but --gpus none asks for CPU mode")
    count = requested_count(requested)
    if count is not None and visible != count:
        seen = f"{visible} visible" if visible else f"none visible: {why_none}"
        return Mode("cpu" if not visible else "gpu", visible, requested, FAIL,
                    f"asked for {count} GPU{'s' if count > 1 else ''} (--gpus {requested}), {seen}")
    if visible:
        return Mode("gpu", visible, requested, PASS,
                    f"GPU mode: {visible} GPU{'s' if visible > 1 else ''} (--gpus {requested})")
    if not cuda_build or requested == AUTO:
        return _cpu(requested, require_gpu, f"CPU mode: {why_none}",
                    f"no GPU visible but a GPU is required: {why_none}")
    if allow_cpu and not require_gpu:
        return Mode("cpu", 0, requested, SKIP, f"CPU mode: no GPU visible ({why_none}); CPU verification "
                    "allowed (--allow-cpu-verification / verify.require_gpu: false): not GPU-verified")
    return Mode("cpu", 0, requested, FAIL,
                f"asked for all GPUs (--gpus all), none visible: {why_none}; a CUDA image is verified on "
                "a GPU: make one visible, or ask for CPU mode with --gpus none or "
                "--allow-cpu-verification (the image is then not GPU-verified)")


def _cpu(requested: str, require_gpu: bool, ok: str, required: str) -> Mode:
    if require_gpu:
        return Mode("cpu", 0, requested, FAIL, required)
    return Mode("cpu", 0, requested, SKIP, f"{ok}: GPU checks skipped")
