"""CUDA libraries present and loadable (ctypes, torch not needed): CPU mode too."""

from __future__ import annotations

import os

from ..context import Context
from ..libs import load, torch_build
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
