"""Versions: what is installed equals what the image declares."""

from __future__ import annotations

import os
import platform
from typing import Any, Dict, List, Optional

from .. import envsearch
from ..context import Context
from ..environment import os_name, package_version, torch_cudnn, torch_nccl
from ..judge import PASS, WARN, version_matches
from ..libs import load, torch_build
from ..registry import check
from ..results import Result, failed, passed, skipped

CPU = "cpu"  # expected.cuda for a CPU-only build (the io.imagesmith.cuda=cpu label, --expect cuda=cpu)


def compare(name: str, expected: Optional[str], actual: Optional[str], missing: str = "") -> Result:
    """Prefix match on dotted components; nothing expected -> skip with the value."""
    if expected is None:
        return skipped(f"{name} {actual or 'not found'}; no expectation given", actual)
    if actual is None:
        return failed(f"{name} expected {expected}, {missing or 'not found'}")
    if version_matches(expected, actual):
        return passed(f"{name} {actual} matches expected {expected}", actual)
    return failed(f"{name} {actual} installed, image declares {expected}", actual)


@check("versions.torch", "torch importable, version as declared", needs="nothing")
def torch_version(ctx: Context) -> Result:
    if not ctx.try_torch():
        build = torch_build()
        where = f"torch {build.version} at {build.path}" if build.path else "no torch package"
        found = elsewhere(ctx) if not build.path else []
        detail = f"torch is not importable ({where}): {ctx.torch_error}"
        if found:
            detail += "; " + "; ".join(envsearch.where(f) for f in found)
        return failed(detail, data={"elsewhere": found} if found else None)
    actual = ctx.torch.__version__
    if ctx.config.expected.torch is None:
        result = passed(f"torch {actual} imports; no version expected", actual)
    else:
        result = compare("torch", ctx.config.expected.torch, actual)
    return with_import_warnings(result, ctx.torch_warnings)


def elsewhere(ctx: Context) -> List[Dict[str, Any]]:
    """The environments holding torch that this python3 does not see, and what puts each on PATH."""
    image = ctx.config.image
    env = dict(os.environ) | (dict(image.env) if image is not None else {})
    entrypoint = list(image.entrypoint) if image is not None else []
    launcher = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "login.sh")
    return envsearch.search(env, entrypoint, os.environ.get("HOME", ""), launcher)


def with_import_warnings(result: Result, caught: List[str]) -> Result:
    """`import torch` warned (e.g. 'Failed to initialize NumPy'): a pass becomes a warn."""
    if not caught:
        return result
    out = dict(result, detail=f"{result['detail']}; import torch warned: {' | '.join(caught)}",
               data={"import_warnings": caught})
    if out["status"] == PASS:
        out["status"] = WARN
    return out


@check("versions.cuda", "torch.version.cuda as declared")
def cuda_version(ctx: Context) -> Result:
    actual = ctx.torch.version.cuda
    if ctx.config.expected.cuda == CPU:
        if actual:
            return failed(f"torch {ctx.torch.__version__} is built for CUDA {actual}, image declares a CPU-only build", actual)
        return passed(f"torch {ctx.torch.__version__} is a CPU-only build, as declared (cuda=cpu)", CPU)
    return compare("CUDA (torch.version.cuda)", ctx.config.expected.cuda, actual,
                   missing=f"but torch {ctx.torch.__version__} is a CPU-only build")


@check("versions.cudnn", "cuDNN as declared")
def cudnn_version(ctx: Context) -> Result:
    actual = torch_cudnn(ctx) or (_lib_version("cudnn") if ctx.torch.version.cuda else None)
    return compare("cuDNN", ctx.config.expected.cudnn, actual,
                   missing="torch.backends.cudnn reports no cuDNN")


@check("versions.nccl", "NCCL as declared")
def nccl_version(ctx: Context) -> Result:
    try:
        actual = torch_nccl(ctx)
    except Exception:
        actual = _lib_version("nccl")
    return compare("NCCL", ctx.config.expected.nccl, actual, missing="torch has no NCCL")


@check("versions.python", "Python as declared", needs="nothing")
def python_version(ctx: Context) -> Result:
    return compare("Python", ctx.config.expected.python, platform.python_version())


@check("versions.os", "OS (/etc/os-release) as declared", needs="nothing")
def os_version(ctx: Context) -> Result:
    return compare("OS", ctx.config.expected.os, os_name(), missing="/etc/os-release unreadable")


@check("versions.packages", "the layer's Python packages as declared", needs="nothing")
def packages(ctx: Context) -> Result:
    expected = ctx.config.expected.packages
    if not expected:
        return skipped("no package versions expected")
    found = {name: package_version(name) for name in expected}
    bad = [f"{n} {found[n] or 'missing'} (expected {v})" for n, v in expected.items()
           if found[n] is None or not version_matches(v, found[n] or "")]
    data = {"found": found, "expected": dict(expected)}
    if bad:
        return failed("; ".join(bad), len(bad), data=data)
    return passed(", ".join(f"{n} {found[n]}" for n in expected), 0, data=data)


def _lib_version(key: str) -> Optional[str]:
    return load(key, torch_build()).version
