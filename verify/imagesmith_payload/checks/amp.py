"""Mixed precision training steps: autocast bf16, fp16 with GradScaler."""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from ..context import Context
from ..judge import loss_fell
from ..registry import check
from ..results import Result, failed, passed
from ._common import fresh_seed, randn

STEPS = 40


def _problem(torch: Any, device: Any, seed: int) -> Tuple[Any, Any, Any]:
    """A learnable regression: a random teacher MLP's outputs."""
    torch.manual_seed(seed)
    x = randn(torch, (2048, 256), device, seed)
    teacher = torch.nn.Sequential(torch.nn.Linear(256, 64), torch.nn.Tanh(),
                                  torch.nn.Linear(64, 1)).to(device)
    with torch.no_grad():
        y = teacher(x)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                                torch.nn.Linear(512, 512), torch.nn.GELU(),
                                torch.nn.Linear(512, 1)).to(device)
    return model, x, y


def train(torch: Any, device: Any, dtype: Any, scaler: Optional[Any], seed: int) -> Tuple[List[float], Any]:
    model, x, y = _problem(torch, device, seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses, out_dtype = [], None
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=dtype):
            pred = model(x)
            out_dtype = pred.dtype
            loss = torch.nn.functional.mse_loss(pred.float(), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        losses.append(float(loss.detach()))
    return losses, out_dtype


def amp_check(ctx: Context, dtype_name: str, use_scaler: bool) -> Result:
    torch, seed = ctx.torch, fresh_seed()
    dtype = getattr(torch, dtype_name)
    scaler = _grad_scaler(torch) if use_scaler else None
    losses, out_dtype = train(torch, ctx.device, dtype, scaler, seed)
    ok, detail = loss_fell(losses)
    data = {"losses": [round(v, 6) for v in losses], "seed": seed}
    if out_dtype != dtype:
        return failed(f"autocast produced {out_dtype}, not {dtype}", losses[-1], data=data)
    if scaler is not None:
        data["final_scale"] = float(scaler.get_scale())
    return (passed if ok else failed)(f"{dtype_name} autocast{' + GradScaler' if scaler else ''}: "
                                      f"{detail}", round(losses[-1], 6), data=data)


def _grad_scaler(torch: Any) -> Any:
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        return amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()


@check("amp.bf16", "autocast bf16 training steps: finite, loss falls", needs="gpu", worker="amp")
def bf16(ctx: Context) -> Result:
    return amp_check(ctx, "bfloat16", use_scaler=False)


@check("amp.fp16", "autocast fp16 + GradScaler training steps: finite, loss falls", needs="gpu",
       worker="amp")
def fp16(ctx: Context) -> Result:
    return amp_check(ctx, "float16", use_scaler=True)
