"""What each target stores and shares: its CUDA layer (shared by every cell
needing the same wheel set) and its own bytes. Pure: estimates come from the
knowledge base's wheel sizes, measurements from a build report (:class:`~imagesmith.model.buildreport.BuildReport`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from imagesmith.model import compat
from imagesmith.model.buildreport import BuildReport
from imagesmith.model.plan import Plan, Target


@dataclass(frozen=True)
class LayerRow:
    target: str
    cuda: str  # the set's id, "venv" (the wheels inside the venv, one copy per cell) or "-" (CPU)
    cells: int  # cells holding this copy of the CUDA wheels
    cuda_bytes: int | None  # estimate: wheel bytes (about what the registry stores); measured: the layer's tar
    own_bytes: int | None  # measured: image size minus what it is built FROM
    measured: bool


@dataclass(frozen=True)
class Estimate:
    """The CUDA wheels a registry stores for a plan, today's way (every cell
    carries its own copy) and shared (one copy per set)."""

    cells: int
    sets: int
    today_bytes: int
    shared_bytes: int
    unknown: tuple[str, ...]  # "torch variant" without recorded wheels (counted in neither)


def variant_wheels(t: Target, kb: compat.KnowledgeBase) -> tuple[compat.Wheel, ...]:
    """The CUDA wheels a CUDA target's torch needs (empty for CPU or where none are recorded)."""
    if t.cuda_set is not None:
        return t.cuda_set.wheels
    release = kb.resolve_torch(t.versions.torch)
    variant = release.variants.get(t.versions.variant) if release else None
    return variant.wheels if variant and t.versions.cuda != "cpu" else ()


def estimate(plan: Plan, kb: compat.KnowledgeBase) -> Estimate:
    bases = [t for t in plan.targets if t.parent is None and t.versions.cuda != "cpu"]
    per_cell = {t.cell: sum(w.bytes for w in variant_wheels(t, kb)) for t in bases}
    sets = {tuple(w.pin for w in variant_wheels(t, kb)): per_cell[t.cell] for t in bases if t.cuda_set is not None}
    venv = sum(per_cell[t.cell] for t in bases if t.cuda_set is None)
    unknown = tuple(sorted({f"{t.versions.torch} {t.versions.variant}" for t in bases if not per_cell[t.cell]}))
    return Estimate(len(bases), len(sets), sum(per_cell.values()), sum(sets.values()) + venv, unknown)


def rows(plan: Plan, kb: compat.KnowledgeBase, report: BuildReport | None = None) -> list[LayerRow]:
    """One row per target; measured figures where ``report`` has them."""
    sizes = {r.target: r.size_bytes or None for r in report.results} if report else {}
    cuda = {(c.set, c.base_image): c for c in report.cuda_layers} if report else {}
    base_bytes = dict(report.base_image_bytes) if report else {}
    users: dict[str, set[str]] = {}
    for t in plan.targets:
        if t.cuda_set is not None:
            users.setdefault(t.cuda_set.id, set()).add(t.cell)
    out: list[LayerRow] = []
    index = plan.by_id()
    for t in plan.targets:
        measured = sizes.get(t.id)
        if t.parent is not None:  # a child layer: its base's CUDA layer, its own bytes
            root = _root(index, t)
            under, parent_row = sizes.get(t.parent), next(r for r in out if r.target == root.id)
            own = measured - under if measured and under else None
            out.append(LayerRow(t.id, parent_row.cuda, parent_row.cells, None, own, measured is not None))
            continue
        if t.cuda_set is not None:
            layer = cuda.get((t.cuda_set.id, t.base_image))
            under = layer.image_bytes if layer else None
            cuda_bytes = (layer.layer_bytes if layer else 0) or (None if measured else t.cuda_set.wheel_bytes)
            name, cells = t.cuda_set.id, len(users[t.cuda_set.id])
        else:
            under = base_bytes.get(t.base_image)
            wheels = variant_wheels(t, kb)
            cuda_bytes = sum(w.bytes for w in wheels) if wheels and not measured else None
            name = "-" if t.versions.cuda == "cpu" else "venv"
            cells = 1 if name == "venv" else 0
        own = measured - under if measured and under else None
        out.append(LayerRow(t.id, name, cells, cuda_bytes, own, measured is not None))
    return out


def _root(index: Mapping[str, Target], t: Target) -> Target:
    while t.parent:
        t = index[t.parent]
    return t
