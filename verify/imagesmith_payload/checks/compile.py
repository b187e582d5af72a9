"""torch.compile of a small model, forward and backward, against eager."""

from __future__ import annotations

import copy
import os
import shutil
import sysconfig
import tempfile
from typing import Any, List, Tuple

from ..context import Context
from ..judge import judge_at_most
from ..registry import check
from ..results import Result, bounded, failed
from ._common import fresh_seed, precision, randn, rel_err

TOLERANCE = 1e-4


def toolchain_problems(device_type: str) -> List[str]:
    """What inductor needs to build kernels: a C (and for CPU, C++) compiler, Python.h."""
    problems = []
    if not (os.environ.get("CC") or any(shutil.which(c) for c in ("cc", "gcc", "clang"))):
        problems.append("no C compiler (cc/gcc/clang) on PATH: install gcc or set CC")
    if device_type == "cpu" and not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        problems.append("no C++ compiler (g++/clang++) on PATH: install g++")
    include = sysconfig.get_paths().get("include", "")
    if not os.path.exists(os.path.join(include, "Python.h")):
        problems.append(f"no Python.h in {include}: install the python3-dev package")
    return problems


def fresh_caches(ctx: Context) -> None:
    """Once per run: empty inductor/triton caches, so the toolchain really is used."""
    if "compile_cache" not in ctx.cache:
        root = tempfile.mkdtemp(prefix="imagesmith-compile-")
        ctx.cache["compile_cache"] = root
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(root, "inductor")
        os.environ["TRITON_CACHE_DIR"] = os.path.join(root, "triton")


def model_and_input(torch: Any, device: Any, seed: int) -> Tuple[Any, Any]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.LayerNorm(512),
                                torch.nn.GELU(), torch.nn.Linear(512, 64)).to(device)
    return model, randn(torch, (128, 256), device, seed)


def forward_backward(model: Any, x: Any) -> Tuple[Any, List[Any]]:
    out = model(x)
    (out.square().mean()).backward()
    return out, [p.grad for p in model.parameters()]


def compiled_run(torch: Any, model: Any, x: Any) -> Tuple[Any, List[Any]]:
    dynamo = torch._dynamo
    saved = dynamo.config.suppress_errors
    dynamo.config.suppress_errors = False  # a failed compile must not fall back to eager
    try:
        dynamo.reset()
        return forward_backward(torch.compile(model, fullgraph=True), x)
    finally:
        dynamo.config.suppress_errors = saved


@check("compile.model", "torch.compile forward+backward matches eager", tier="standard", unit="rel. error",
       timeout_s=600.0)
def compile_model(ctx: Context) -> Result:
    torch, seed, device = ctx.torch, fresh_seed(), ctx.device
    fresh_caches(ctx)
    model, x = model_and_input(torch, device, seed)
    twin = copy.deepcopy(model)
    with precision(torch, tf32=False):
        ref_out, ref_grads = forward_backward(model, x)
        try:
            out, grads = compiled_run(torch, twin, x)
        except Exception as exc:
            causes = toolchain_problems(device.type)
            hint = f"; likely cause: {'; '.join(causes)}" if causes else ""
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return failed(f"torch.compile failed on {device.type}: {type(exc).__name__}: "
                          f"{first[:300]}{hint}")
    errors = [rel_err(torch, out, ref_out)] + [rel_err(torch, g, r) for g, r in zip(grads, ref_grads)]
    err = max(errors)
    return bounded(err, TOLERANCE, judge_at_most(err, TOLERANCE),
                   f"compiled vs eager on {device.type} (output and {len(grads)} grads)",
                   data={"seed": seed})
