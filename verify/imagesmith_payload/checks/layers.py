"""Layer checks: cv (torchvision ops, image decode) and nlp (tokenizer, tiny transformer).

A declared layer (config `layers`) must import and work; an undeclared one is
checked when its packages are installed and skipped otherwise.
"""

from __future__ import annotations

import importlib
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..context import Context
from ..environment import package_version
from ..judge import judge_at_most, loss_fell
from ..registry import check
from ..results import Result, bounded, failed, passed, skipped
from ._common import fresh_seed, rel_err

LAYER_MODULES = {"cv": ("torchvision",), "nlp": ("tokenizers", "transformers")}
SENTENCES = ["the quick brown fox jumps over the lazy dog",
             "a GPU image must be verified before it is tagged",
             "tokenizers are trained in memory, no hub download",
             "small models run forward and backward on random weights"]


def load_layer(ctx: Context, layer: str) -> Tuple[List[Any], Optional[Result]]:
    """(modules, None) when usable; else ([], a skip or fail result)."""
    declared = layer in ctx.config.layers
    modules = []
    for name in LAYER_MODULES[layer]:
        try:
            modules.append(importlib.import_module(name))
        except ModuleNotFoundError as exc:
            if not declared and exc.name == name:
                return [], skipped(f"layer {layer} not declared and {name} not installed")
            return [], failed(f"layer {layer}: {name} not importable: {exc}")
        except Exception as exc:  # broken install: wrong torch ABI, missing .so ...
            return [], failed(f"layer {layer}: import {name} failed: {type(exc).__name__}: {exc}")
    return modules, None


def _versions(names: Sequence[str]) -> str:
    return ", ".join(f"{n} {package_version(n) or '?'}" for n in names)


# ------------------------------------------------------------------------- cv
@check("layers.cv.import", "cv layer: torchvision imports with its C++ ops")
def cv_import(ctx: Context) -> Result:
    modules, problem = load_layer(ctx, "cv")
    if problem:
        return problem
    torch = ctx.torch
    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0]])
    keep = modules[0].ops.nms(boxes, torch.tensor([0.9, 0.8]), 0.5).tolist()
    if keep != [0]:
        return failed(f"torchvision.ops.nms kept {keep} of two overlapping boxes, expected [0]")
    return passed(_versions(["torchvision"]), modules[0].__version__)


def nms_reference(boxes: Sequence[Sequence[float]], scores: Sequence[float],
                  iou_threshold: float) -> List[int]:
    """Plain greedy NMS in float64 (the CPU-mode reference)."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    keep: List[int] = []
    for i in order:
        if all(_iou(boxes[i], boxes[j]) <= iou_threshold for j in keep):
            keep.append(i)
    return keep


def _iou(a: Sequence[float], b: Sequence[float]) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def random_boxes(torch: Any, n: int, seed: int) -> Tuple[Any, Any]:
    gen = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=gen, dtype=torch.float64) * 100
    wh = torch.rand(n, 2, generator=gen, dtype=torch.float64) * 30 + 1
    return torch.cat([xy, xy + wh], dim=1), torch.rand(n, generator=gen, dtype=torch.float64)


@check("layers.cv.ops", "cv layer: nms and roi_align on the device vs reference",
       tier="standard", unit="rel. error")
def cv_ops(ctx: Context) -> Result:
    modules, problem = load_layer(ctx, "cv")
    if problem:
        return problem
    torch, ops, seed, dev = ctx.torch, modules[0].ops, fresh_seed(), ctx.device
    boxes, scores = random_boxes(torch, 300, seed)
    keep = ops.nms(boxes.float().to(dev), scores.float().to(dev), 0.5).cpu().tolist()
    want = nms_reference(boxes.float().double().tolist(), scores.float().double().tolist(), 0.5)
    if keep != want:
        return failed(f"nms on {dev.type} kept {len(keep)} boxes, reference {len(want)}; "
                      f"first difference at rank {_first_diff(keep, want)}")
    err = _roi_align_error(torch, ops, dev, seed)
    return bounded(err, 1e-4, judge_at_most(err, 1e-4),
                   f"nms matches ({len(keep)} kept); roi_align on {dev.type} vs float64 CPU",
                   data={"seed": seed})


def _first_diff(a: Sequence[int], b: Sequence[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _roi_align_error(torch: Any, ops: Any, dev: Any, seed: int) -> float:
    gen = torch.Generator().manual_seed(seed + 1)
    feats = torch.randn(2, 8, 64, 64, generator=gen, dtype=torch.float64)
    boxes, _ = random_boxes(torch, 40, seed + 2)
    rois = torch.cat([torch.randint(0, 2, (40, 1), generator=gen).double(), boxes * 0.6], dim=1)
    out = ops.roi_align(feats.float().to(dev), rois.float().to(dev), (7, 7), 0.5, 2, True)
    ref = ops.roi_align(feats.float().double(), rois.float().double(), (7, 7), 0.5, 2, True)
    return rel_err(torch, out, ref)


def pattern_image(torch: Any, seed: int) -> Any:
    """A smooth colour pattern plus a little noise (JPEG-friendly, never constant)."""
    y, x = torch.meshgrid(torch.arange(192.0), torch.arange(256.0), indexing="ij")
    gen = torch.Generator().manual_seed(seed)
    chans = [128 + 90 * torch.sin(x / (11 + 4 * c) + y / (17 + 3 * c) + c) for c in range(3)]
    img = torch.stack(chans) + torch.randn(3, 192, 256, generator=gen) * 3
    return img.clamp(0, 255).round().to(torch.uint8)


def psnr(torch: Any, a: Any, b: Any) -> float:
    mse = float(((a.double() - b.double()) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


@check("layers.cv.decode", "cv layer: JPEG encode/decode round trip (and GPU decode)",
       tier="standard", unit="dB")
def cv_decode(ctx: Context) -> Result:
    modules, problem = load_layer(ctx, "cv")
    if problem:
        return problem
    torch, io = ctx.torch, modules[0].io
    img = pattern_image(torch, fresh_seed())
    data = io.encode_jpeg(img, quality=95)
    decoded = io.decode_jpeg(data)
    quality: Dict[str, Optional[float]] = {"cpu_psnr_db": round(psnr(torch, img, decoded), 2)}
    if ctx.gpu_count:  # nvJPEG upsamples chroma differently: judge it against the original
        on_gpu = io.decode_jpeg(data, device="cuda").cpu()
        quality["gpu_psnr_db"] = round(psnr(torch, img, on_gpu), 2)
        quality["gpu_vs_cpu_max_abs"] = int((on_gpu.int() - decoded.int()).abs().max())
    quality.update(_cv2_roundtrip(torch, img))
    return _judge_decode(quality)


def _cv2_roundtrip(torch: Any, img: Any) -> Dict[str, Optional[float]]:
    try:
        cv2 = importlib.import_module("cv2")
    except ImportError:
        return {}
    hwc = img.permute(1, 2, 0).contiguous().numpy()
    ok, buf = cv2.imencode(".jpg", hwc, [int(cv2.IMWRITE_JPEG_QUALITY), 95])
    back = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED) if ok else None
    if back is None:
        return {"cv2_psnr_db": None}
    return {"cv2_psnr_db": round(psnr(torch, img, torch.from_numpy(back).permute(2, 0, 1)), 2)}


def _judge_decode(q: Dict[str, Optional[float]]) -> Result:
    worst = min(v for k, v in q.items() if k.endswith("psnr_db") and v is not None)
    problems = [k for k, v in q.items() if k.endswith("psnr_db") and (v is None or v < 30)]
    text = ", ".join(f"{k} {v}" for k, v in q.items())
    if problems:
        return failed(f"JPEG round trip off: {', '.join(problems)} ({text})", worst, data=q)
    return passed(f"JPEG q95 round trip: {text}", worst, data=q)


# ------------------------------------------------------------------------ nlp
@check("layers.nlp.import", "nlp layer: tokenizers and transformers import", worker="imports")
def nlp_import(ctx: Context) -> Result:
    modules, problem = load_layer(ctx, "nlp")
    if problem:
        return problem
    return passed(_versions(["tokenizers", "transformers"]), modules[1].__version__)


def train_tokenizer(tokenizers: Any, sentences: Sequence[str]) -> Any:
    """A byte-level BPE trained in memory (exact round trips, no hub)."""
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=400, special_tokens=["[PAD]", "[MASK]"], show_progress=False,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(sentences), trainer=trainer)
    return tok


@check("layers.nlp.tokenizer", "nlp layer: a tokenizer trained in memory round-trips",
       tier="standard", unit="tokens")
def nlp_tokenizer(ctx: Context) -> Result:
    modules, problem = load_layer(ctx, "nlp")
    if problem:
        return problem
    tok = train_tokenizer(modules[0], SENTENCES)
    probes = SENTENCES[:2] + ["unseen words: déjà vu, 42 GPUs!"]
    encoded = [tok.encode(s).ids for s in probes]
    back = [tok.decode(ids) for ids in encoded]
    wrong = [p for p, b in zip(probes, back) if p != b]
    if wrong:
        return failed(f"decode(encode(s)) != s for {wrong[0]!r}")
    n = sum(map(len, encoded))
    return passed(f"BPE vocab {tok.get_vocab_size()}, {len(probes)} sentences round-trip "
                  f"({n} tokens)", n)


@check("layers.nlp.model", "nlp layer: tiny random BERT forward/backward trains",
       tier="standard", unit="loss")
def nlp_model(ctx: Context) -> Result:
    modules, problem = load_layer(ctx, "nlp")
    if problem:
        return problem
    torch, transformers, seed = ctx.torch, modules[1], fresh_seed()
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(vocab_size=400, hidden_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=128,
                                  max_position_embeddings=64)
    model = transformers.BertForMaskedLM(cfg).to(ctx.device)
    ids = torch.randint(2, 400, (8, 32), generator=torch.Generator().manual_seed(seed))
    losses = _train_mlm(torch, model, ids.to(ctx.device))
    fell, how = loss_fell(losses, factor=0.8)
    return (passed if fell else failed)(f"BERT-tiny on {ctx.device.type}: {how}",
                                        round(losses[-1], 4), data={"losses": losses})


def _train_mlm(torch: Any, model: Any, ids: Any, steps: int = 15) -> List[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        if not all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None):
            raise FloatingPointError("non-finite gradient in BERT-tiny backward")
        opt.step()
        losses.append(round(float(loss.detach()), 5))
    return losses
