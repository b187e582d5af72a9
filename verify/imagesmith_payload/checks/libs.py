"""CUDA libraries present and loadable (ctypes, torch not needed): CPU mode too.

libs.cudart/cublas/cudnn/nccl find and load each library torch needs and read
its version; libs.integrity checks every shared library of every nvidia-* wheel
against that wheel's RECORD (present, same sha256) and loads it; libs.origin says which
folder torch mapped cuDNN and NCCL from (the shared CUDA layer, when the image has one).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List

from ..context import Context
from ..libs import (
    RecordedLibrary,
    cuda_distributions,
    hash_problems,
    load,
    load_problems,
    needs_driver,
    outside_dependency,
    recorded_libraries,
    torch_build,
)
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


@check("libs.integrity", "every shared library of the nvidia-* wheels present, as installed, loadable",
       needs="nothing", timeout_s=600.0, worker="integrity")
def integrity(ctx: Context) -> Result:
    per_dist = {d: recorded_libraries(d) for d in cuda_distributions()}
    dists = [d for d, libs in per_dist.items() if libs]  # nvidia-ml-py has none
    if not dists:
        build = torch_build()
        why = ("torch is not installed" if build.path is None else
               f"torch {build.version} is a CPU-only build" if not build.cuda else
               f"torch {build.version} takes its CUDA libraries from elsewhere")
        return skipped(f"no nvidia-* wheels installed ({why}): no RECORD to check against")
    libs = [lib for d in dists for lib in per_dist[d]]
    problems = hash_problems(libs)
    load_errors = load_problems([lib.path for lib in libs if lib.path not in problems])
    names = [os.path.basename(lib.path) for lib in libs]
    driver_only = sorted(p for p, e in load_errors.items() if needs_driver(e))
    plugins = {p: dep for p, e in load_errors.items() if (dep := outside_dependency(e, names))}
    problems.update({p: f"does not load: {e}" for p, e in load_errors.items()
                     if p not in driver_only and p not in plugins})
    return integrity_result(dists, libs, problems, driver_only, plugins)


def integrity_result(dists: List[Any], libs: List[RecordedLibrary], problems: Dict[str, str],
                     driver_only: List[str], plugins: Dict[str, str]) -> Result:
    data = {"distributions": len(dists), "libraries": len(libs),
            "problems": {os.path.basename(p): e for p, e in sorted(problems.items())},
            "need_driver": [os.path.basename(p) for p in driver_only],
            "need_outside_libraries": {os.path.basename(p): d for p, d in sorted(plugins.items())}}
    if problems:
        return failed(f"{len(problems)} of {len(libs)} shared libraries of the nvidia-* wheels are missing, "
                      f"altered or do not load: {_broken(libs, problems)}; reinstall those wheels",
                      len(problems), data=data)
    return passed(f"{len(libs)} shared libraries of {len(dists)} nvidia-* wheels present, match their "
                  f"RECORD sha256 and load{_not_loaded(driver_only, plugins)}", 0, data=data)


def _broken(libs: List[RecordedLibrary], problems: Dict[str, str]) -> str:
    """'nvidia-cudnn-cu13 9.24.0.43: 1 broken (libcudnn_cnn.so.9 missing) | ...'"""
    by_dist: Dict[str, List[str]] = {}
    for lib in libs:
        if lib.path in problems:
            by_dist.setdefault(lib.dist, []).append(f"{os.path.basename(lib.path)} {problems[lib.path]}")
    return " | ".join(f"{dist}: {len(bad)} broken ({'; '.join(bad[:4])}{'; ...' if len(bad) > 4 else ''})"
                      for dist, bad in sorted(by_dist.items()))


def _not_loaded(driver_only: List[str], plugins: Dict[str, str]) -> str:
    note = (f" ({len(driver_only)} need the NVIDIA driver, not loaded here: "
            f"{', '.join(os.path.basename(p) for p in driver_only[:3])})" if driver_only else "")
    if plugins:
        deps = sorted(set(plugins.values()))
        note += (f" ({len(plugins)} optional plugins need libraries no nvidia-* wheel ships, not loaded: "
                 f"{', '.join(deps[:4])}{', ...' if len(deps) > 4 else ''})")
    return note
