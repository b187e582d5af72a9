"""CUDA libraries present and loadable (ctypes, torch not needed): CPU mode too."""

from __future__ import annotations

import os

from ..context import Context
from ..libs import load, torch_build
from ..parsers import loaded_cuda_libraries
from ..registry import check
from ..results import Result, failed, passed, skipped, warned


def library_check(key: str, label: str) -> Result:
    build = torch_build()
    if build.path is None:
        return skipped("torch is not installed (see versions.torch)")
    if not build.cuda:
        return skipped(f"torch {build.version} is a CPU-only build; no {label} needed")
    found = load(key, build)
    if found.error:
        hint = f"torch {build.version} (CUDA {build.cuda}) needs {label}"
        return failed(f"{label} not loadable: {found.error}; {hint}",
                      data={"path": found.path})
    where = os.path.dirname(found.path or "")
    data = {"path": found.path, "siblings": found.siblings}
    if found.sibling_errors:
        return warned(f"{label} {found.version} loads from {where}, but some parts do not: "
                      f"{'; '.join(found.sibling_errors)}", found.version, data=data)
    return passed(f"{label} {found.version} loads from {where}", found.version, data=data)


@check("libs.cudart", "CUDA runtime library loadable", needs="nothing")
def cudart(ctx: Context) -> Result:
    return library_check("cudart", "CUDA runtime (libcudart)")


@check("libs.cublas", "cuBLAS library loadable", needs="nothing")
def cublas(ctx: Context) -> Result:
    return library_check("cublas", "cuBLAS (libcublas)")


@check("libs.cudnn", "cuDNN library loadable", needs="nothing")
def cudnn(ctx: Context) -> Result:
    return library_check("cudnn", "cuDNN (libcudnn)")


@check("libs.nccl", "NCCL library loadable", needs="nothing")
def nccl(ctx: Context) -> Result:
    return library_check("nccl", "NCCL (libnccl)")


@check("libs.origin", "torch loads cuDNN and NCCL from where the image says")
def origin(ctx: Context) -> Result:
    """After ``import torch`` (CPU mode too: libtorch_cuda links them), which
    files the process mapped; with ``expected.cuda_libs`` every CUDA library
    must come from under that folder (the shared CUDA layer)."""
    if not ctx.torch.version.cuda:
        return skipped(f"torch {ctx.torch.__version__} is a CPU-only build")
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
        libs = loaded_cuda_libraries(fh.read())
    data = {"libraries": libs, "expected": ctx.config.expected.cuda_libs}
    missing = [name for name in ("cudnn", "nccl") if name not in libs]
    if missing:
        return failed(f"torch {ctx.torch.__version__} is imported but {' and '.join(missing)} is not loaded", data=data)
    where = f"cuDNN from {os.path.dirname(libs['cudnn'])}, NCCL from {os.path.dirname(libs['nccl'])}"
    root = ctx.config.expected.cuda_libs
    if root is None:
        return passed(f"{where} ({len(libs)} CUDA libraries loaded); no location expected", data=data)
    outside = sorted(f"{name} ({path})" for name, path in libs.items() if not path.startswith(root.rstrip("/") + "/"))
    if outside:
        return failed(f"{len(outside)} of {len(libs)} CUDA libraries load from outside {root}: {', '.join(outside)}", data=data)
    return passed(f"all {len(libs)} CUDA libraries torch loaded come from {root}: {where}", data=data)
