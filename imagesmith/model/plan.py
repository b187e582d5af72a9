"""Matrix -> Plan: a DAG of build targets (cell x layer). Pure: no I/O here
except ``write``/``read`` of plan.json, and no docker."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from imagesmith.atomic import write_json
from imagesmith.errors import Problem, ValidationError
from imagesmith.model import compat, schemas, tags
from imagesmith.model.layout import CUDA_PREFIX
from imagesmith.model.matrix.records import BUILTIN_PARENTS, Cell, Layer, Matrix, base_image_for, sort_cells
from imagesmith.model.platform import DEFAULT as DEFAULT_PLATFORM
from imagesmith.model.platform import Platform, platform_tag
from imagesmith.model.versions import major

PLAN_SCHEMA = schemas.PLAN
PYTHON_BUILD_STANDALONE = "uv"  # how a Python the OS lacks is installed
# What makes two targets one image (the rest of Versions follows from torch and cuda): the targets one tag joins in an
# image index, one per platform, agree on these and on the layer.
IMAGE_FIELDS = ("torch", "torchvision", "torchaudio", "cuda", "cudnn", "nccl", "python", "os", "numpy")


@dataclass(frozen=True)
class Versions:
    """Everything a cell resolves to, from the knowledge base."""

    torch: str
    torchvision: str | None
    torchaudio: str | None
    cuda: str  # "12.8" or "cpu"
    variant: str  # "cu128" or "cpu"
    cudnn: str | None
    nccl: str | None
    python: str
    os: str
    arch: tuple[str, ...] = ()
    driver_min: str | None = None
    driver_toolkit: str | None = None
    numpy: str | None = None  # pinned in the base layer (the knowledge base's numpy table)

    @property
    def accel(self) -> str:
        if self.cuda == "cpu":
            return "cpu"
        return f"cuda{self.cuda}" + (f"-cudnn{major(self.cudnn)}" if self.cudnn else "")


@dataclass(frozen=True)
class PipSources:
    torch_index_url: str
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()

    def extras(self) -> tuple[str, ...]:
        """Indexes after the torch index (PyPI unless another is set), without repeats."""
        urls = [self.index_url or "https://pypi.org/simple", *self.extra_index_urls]
        return tuple(dict.fromkeys(u for u in urls if u != self.torch_index_url))


@dataclass(frozen=True)
class CudaSet:
    """The CUDA wheels of a torch variant, as the one layer every cell needing
    them shares (``imagesmith.render.cudalayer``). ``id`` names the exact set: cells
    of two torch releases with the same pins share one layer too; cells of two
    platforms never do (the id and every cache key name the platform)."""

    id: str  # "<variant>-<12 hex of the pins' sha256>"; other platforms: "<variant>-arm64-<12 hex of pins + platform>"
    variant: str
    wheels: tuple[compat.Wheel, ...]
    prefix: str = CUDA_PREFIX
    platform: Platform = DEFAULT_PLATFORM  # the machine the wheels are for (their bytes: x86_64's, an estimate)

    @property
    def pins(self) -> tuple[str, ...]:
        return tuple(w.pin for w in self.wheels)

    @property
    def wheel_bytes(self) -> int:
        return sum(w.bytes for w in self.wheels)


@dataclass(frozen=True)
class Target:
    id: str
    cell: str
    layer: str
    parent: str | None
    versions: Versions
    base_image: str  # the FROM of the base layer (OS or nvidia/cuda image)
    python_source: str  # "distro" or "uv"
    packages: tuple[str, ...]
    apt: tuple[str, ...]
    pip: PipSources
    image: str  # local image name:tag this target is built as
    tag: str  # the immutable tag it would receive
    floating: tuple[str, ...] = ()
    template: str = ""
    depth: int = 0
    cuda_set: CudaSet | None = None  # base targets whose CUDA wheels live in the shared layer
    platform: Platform = DEFAULT_PLATFORM  # what it is built for (docker build --platform, the image index entry)

    def facts(self) -> dict[str, str]:
        return tags.facts(asdict(self.versions), self.layer, self.cell, self.versions.accel, self.platform)


@dataclass(frozen=True)
class IndexGroup:
    """One immutable tag and the target built for each platform under it: what publish writes as one OCI image
    index (a tag of a linux/amd64-only matrix has one target, and stays a plain image manifest)."""

    tag: str
    targets: tuple[Target, ...]  # one per platform, linux/amd64 first

    @property
    def platforms(self) -> tuple[Platform, ...]:
        return tuple(t.platform for t in self.targets)

    def target(self, platform: Platform) -> Target | None:
        return next((t for t in self.targets if t.platform is platform), None)


@dataclass(frozen=True)
class Plan:
    matrix: str
    date: str
    targets: tuple[Target, ...]
    warnings: tuple[str, ...] = field(default=())

    def by_id(self) -> dict[str, Target]:
        """Target id -> target (built once per plan: render asks for it per target)."""
        return self._index

    @functools.cached_property
    def _index(self) -> dict[str, Target]:
        return {t.id: t for t in self.targets}

    @functools.cached_property
    def _children(self) -> dict[str, list[Target]]:
        out: dict[str, list[Target]] = {}
        for t in self.targets:
            out.setdefault(t.parent or "", []).append(t)
        return out

    def index_groups(self) -> tuple[IndexGroup, ...]:
        """The targets grouped by immutable tag (in plan order), each group's targets one per platform."""
        groups: dict[str, list[Target]] = {}
        for t in self.targets:
            groups.setdefault(t.tag, []).append(t)
        order = list(Platform)
        return tuple(IndexGroup(tag, tuple(sorted(ts, key=lambda t: order.index(t.platform)))) for tag, ts in groups.items())

    def children(self, target_id: str) -> list[Target]:
        return list(self._children.get(target_id, ()))

    def ancestors(self, t: Target) -> list[Target]:
        """``t``'s parents, the base first."""
        index, chain = self._index, []
        while t.parent:
            t = index[t.parent]
            chain.append(t)
        return chain[::-1]

    def picked(self, only: tuple[str, ...] = (), layers: tuple[str, ...] = ()) -> set[str]:
        """Targets matching ``only`` and ``layers`` (without ancestors). An ``only`` value that is
        a target's whole id picks that target alone; otherwise it matches id substrings."""
        ids = {t.id for t in self.targets}
        exact = {o for o in only if o in ids}
        return {t.id for t in self.targets
                if (not only or t.id in exact or any(o in t.id for o in only if o not in exact))
                and (not layers or t.layer in layers)}

    def select(self, only: tuple[str, ...] = (), layers: tuple[str, ...] = ()) -> "Plan":
        """Targets matching ``only`` and ``layers`` (see :meth:`picked`), with their ancestors."""
        picked = self.picked(only, layers)
        wanted = set()
        index = self.by_id()
        for tid in picked:
            while tid:
                wanted.add(tid)
                tid = index[tid].parent or ""
        return Plan(self.matrix, self.date, tuple(t for t in self.targets if t.id in wanted), self.warnings)


# --------------------------------------------------------------------------


def resolve(cell: Cell, kb: compat.KnowledgeBase) -> Versions:
    """The versions a validated cell resolves to."""
    release = kb.resolve_torch(cell.torch)
    assert release is not None, "cells are validated before planning"
    variant = release.variant_for(cell.cuda)
    assert variant is not None
    cuda = kb.cuda.get(cell.cuda) if cell.cuda != "cpu" else None
    return Versions(
        torch=release.version,
        torchvision=release.torchvision,
        torchaudio=release.torchaudio,
        cuda=cell.cuda,
        variant=variant.name,
        cudnn=variant.cudnn,
        nccl=variant.nccl,
        python=cell.python,
        os=cell.os,
        arch=variant.arch,
        driver_min=cuda.min_driver if cuda else None,
        driver_toolkit=cuda.toolkit_driver if cuda else None,
        numpy=kb.numpy_for(release.version, cell.python),
    )


def default_template(layer: str) -> str:
    """The built-in layers have their own template; others use the generic child."""
    return f"{layer}.Dockerfile.j2" if layer in BUILTIN_PARENTS else "layer.Dockerfile.j2"


def cell_id(v: Versions, platform: Platform = DEFAULT_PLATFORM) -> str:
    """``2.9.1-cu128-py3.12-debian12``; for linux/arm64 ``2.9.1-cu128-py3.12-debian12-arm64`` (linux/amd64 ids stay
    as they were before platforms)."""
    return f"{v.torch}-{v.variant}-py{v.python}-{v.os}" + (f"-{platform.marker}" if platform.marker else "")


def base_image(matrix: Matrix, v: Versions, kb: compat.KnowledgeBase, platform: Platform = DEFAULT_PLATFORM) -> str:
    base_from = matrix.layer("base").base_from
    if base_from == "os":
        return base_image_for(matrix.base_images, v.os, platform.value) or kb.os[v.os].image
    cuda = kb.cuda[v.cuda]
    flavor = base_from.split("-", 1)[1]
    cudnn = f"{cuda.cudnn_tag}-" if cuda.cudnn_tag else ""
    return f"nvidia/cuda:{cuda.latest}-{cudnn}{flavor}-{v.os}"


def python_source(matrix: Matrix, v: Versions, kb: compat.KnowledgeBase) -> str:
    """The distro's python3 where it is the cell's Python, else a standalone build."""
    return "distro" if kb.os[v.os].python == v.python else PYTHON_BUILD_STANDALONE


def pip_sources(matrix: Matrix, v: Versions, kb: compat.KnowledgeBase) -> PipSources:
    s = matrix.sources
    release = kb.resolve_torch(v.torch)
    assert release is not None
    default = release.variants[v.variant].index
    torch_index = s.torch_index_url.replace("{variant}", v.variant) if s.torch_index_url else default
    return PipSources(torch_index, s.index_url, s.extra_index_urls, s.find_links, s.trusted_hosts)


def layer_packages(matrix: Matrix, layer: Layer, v: Versions) -> tuple[str, ...]:
    """The layer's pip specs with torch, torchvision, torchaudio and numpy pinned from the KB. The
    base layer (no parent) installs the KB's numpy beside torch, unless its packages name numpy
    (a bare ``numpy`` takes the KB's pin; ``numpy==X`` is the matrix's own choice)."""
    pins = {"torch": v.torch, "torchvision": v.torchvision, "torchaudio": v.torchaudio, "numpy": v.numpy}
    names_numpy = any(canonicalize_name(Requirement(spec).name) == "numpy" for spec in layer.packages)
    out = [f"numpy=={v.numpy}"] if layer.parent is None and v.numpy and not names_numpy else []
    for i, spec in enumerate(layer.packages):
        name = spec.strip().lower()
        if name in pins and pins[name] is None:
            raise ValidationError(problems=[matrix.problem(("layers", layer.name, "packages", i),
                                                           f"torch {v.torch} has no matching {name} release; drop {name} from this layer or limit it with when:")])
        out.append(f"{name}=={pins[name]}" if name in pins else spec.strip())
    if layer.jupyter.enabled:
        out.append(f"jupyterlab=={layer.jupyter.version}")
    return tuple(out)


def cuda_set(layer: Layer, v: Versions, kb: compat.KnowledgeBase, platform: Platform = DEFAULT_PLATFORM) -> CudaSet | None:
    """The shared CUDA layer of a base target: its variant's recorded wheel set,
    unless the cell is CPU-only, the matrix asks for ``cuda_libs: venv``, or the
    knowledge base records no set (see :func:`cuda_warnings`). A platform other
    than linux/amd64 has the same pins (compat.yaml, platforms:) under an id of its own."""
    if layer.name != "base" or v.cuda == "cpu" or layer.cuda_libs != "shared":
        return None
    release = kb.resolve_torch(v.torch)
    wheels = release.variants[v.variant].wheels if release and v.variant in release.variants else ()
    if not wheels:
        return None
    text = "\n".join([*sorted(w.pin for w in wheels), *(f"platform={p}" for p in platform.cache_parts)])
    name = "-".join([v.variant, *filter(None, [platform.marker]), hashlib.sha256(text.encode()).hexdigest()[:12]])
    return CudaSet(name, v.variant, tuple(sorted(wheels, key=lambda w: w.name)), platform=platform)


def cuda_image(t: Target, repository: str) -> str:
    """The local name of the image a shared-CUDA base target builds FROM (OS base + CUDA layer)."""
    assert t.cuda_set is not None
    return f"{repository}:cuda-{t.cuda_set.id}-{t.versions.os}"


def cuda_warnings(matrix: Matrix, targets: list[Target]) -> list[Problem]:
    """Shared-CUDA base targets whose torch variant has no recorded wheel set (they keep the wheels in the venv)."""
    shared = matrix.layer("base").cuda_libs == "shared"
    missing = sorted({f"{t.versions.torch} {t.versions.variant}" for t in targets
                      if shared and not t.parent and t.versions.cuda != "cpu" and t.cuda_set is None})
    return [dataclasses.replace(matrix.problem(("layers", "base", "cuda_libs"), (
            f"the knowledge base records no CUDA wheel set for torch {m}; its CUDA libraries stay in each cell's venv "
            "(record the set in compat.yaml, see bench/kb_cuda_wheels.py)")), severity="warning") for m in missing]


def _targets_for_cell(matrix: Matrix, cell: Cell, kb: compat.KnowledgeBase, date: str) -> Iterator[tuple[dict[str, Any], dict[str, str]]]:
    """(Target fields but floating, tag facts) for each layer built for ``cell``."""
    v = resolve(cell, kb)
    cid = cell_id(v, cell.platform)
    versions = {f.name: getattr(v, f.name) for f in dataclasses.fields(v)}
    shared = dict(cell=cid, versions=v, base_image=base_image(matrix, v, kb, cell.platform), python_source=python_source(matrix, v, kb),
                  pip=pip_sources(matrix, v, kb))
    depth: dict[str, int] = {}
    for layer in matrix.layers:
        if not layer.applies_to(cell) or (layer.parent and layer.parent not in depth):
            continue
        depth[layer.name] = 0 if layer.parent is None else depth[layer.parent] + 1
        tid = f"{cid}-{layer.name}"
        facts = tags.facts(versions, layer.name, cid, v.accel, cell.platform) | {"date": date}
        yield shared | dict(
            id=tid, layer=layer.name, parent=f"{cid}-{layer.parent}" if layer.parent else None,
            packages=layer_packages(matrix, layer, v), apt=layer.apt,
            image=f"{matrix.image.repository}:{tid}",
            tag=tags.render(matrix.tags.immutable, facts),
            template=layer.template or default_template(layer.name),
            depth=depth[layer.name],
            cuda_set=cuda_set(layer, v, kb, cell.platform),
            platform=cell.platform,
        ), facts


def expand(matrix: Matrix, date: str, kb: compat.KnowledgeBase | None = None) -> Plan:
    """Every target of ``matrix``, parents before children, deterministic."""
    kb = kb or compat.load()
    drafts = [d for cell in sort_cells(matrix.cells) for d in _targets_for_cell(matrix, cell, kb, date)]
    drafts.sort(key=lambda d: d[0]["depth"])  # stable: parents first, cell order kept
    _check_tags(matrix, [(d["id"], d["tag"], d["platform"]) for d, _ in drafts])
    items = [(d["id"], facts) for d, facts in drafts]
    _check_floating(matrix, items)
    floating = tags.plan_floating(matrix.tags, items)
    final = tuple(Target(**d, floating=floating.get(d["id"], ())) for d, _ in drafts)
    _check_indexes(matrix, Plan(str(matrix.file.name), date, final))
    warnings = list(matrix.warnings) + cuda_warnings(matrix, list(final))
    return Plan(str(matrix.file.name), date, final, tuple(str(w) for w in warnings))


def _check_tags(matrix: Matrix, targets: list[tuple[str, str, Platform]]) -> None:
    """Immutable tags (target id, tag, platform): one per target of a platform (the targets of one tag on several
    platforms make one image index), each a valid Docker tag once expanded."""
    seen: dict[tuple[str, Platform], str] = {}
    problems = []
    where: tuple[str, ...] = ("tags", "immutable")
    for tid, tag, platform in targets:
        if (tag, platform) in seen:
            problems.append(matrix.problem(where, f"tag {tag!r} is given to both {seen[tag, platform]} and {tid}; add fields such as {{cuda}}, {{python}}, {{os}}, {{layer}} to tags.immutable"))
        seen.setdefault((tag, platform), tid)
        problems += [matrix.problem(where, f"{tid}: {p}") for p in tags.tag_problems(tag)]
    if problems:
        raise ValidationError(problems=problems[:10])


def _check_indexes(matrix: Matrix, plan: Plan) -> None:
    """The targets one tag joins in an image index are one image built for each platform: same versions, same layer."""
    problems = []
    for group in plan.index_groups():
        first = group.targets[0]
        for other in group.targets[1:]:
            differ = [name for name in IMAGE_FIELDS if getattr(first.versions, name) != getattr(other.versions, name)]
            differ += ["layer"] if first.layer != other.layer else []
            if differ:
                problems.append(matrix.problem(("tags", "immutable"), (
                    f"tag {group.tag!r} would join {first.id} ({first.platform}) and {other.id} ({other.platform}) in one image index, "
                    f"but they differ in {', '.join(differ)}; add fields such as {{cuda}}, {{python}}, {{os}}, {{layer}} to tags.immutable "
                    "(or {arch} for a tag per platform)")))
    if problems:
        raise ValidationError(problems=problems[:10])


def _check_floating(matrix: Matrix, items: list[tuple[str, dict[str, str]]]) -> None:
    """Floating tags that several targets would claim, located at their entry in tags.floating."""
    problems = [matrix.problem(("tags", "floating", i), p)
                for i, ft in enumerate(matrix.tags.floating) for p in tags.ambiguities(ft, items)]
    for i, ft in enumerate(matrix.tags.floating):
        rendered = {tags.render(ft.template, f): ref for ref, f in items if tags.matches_when(ft.when, f)}
        problems += [matrix.problem(("tags", "floating", i), f"{ref}: {p}") for tag, ref in rendered.items() for p in tags.tag_problems(tag)]
    if problems:
        raise ValidationError(problems=problems[:10])


# -- plan.json -----------------------------------------------------------------


def to_json(plan: Plan) -> dict[str, Any]:
    return {"schema": PLAN_SCHEMA, "matrix": plan.matrix, "date": plan.date,
            "warnings": list(plan.warnings), "targets": [_target_json(t) for t in plan.targets], "tags": pushes(plan)}


def _target_json(t: Target) -> dict[str, Any]:
    """A target as plan.json holds it, its platform (and its CUDA set's) always said; readers take an absent one
    (a plan written before platforms were said) as linux/amd64."""
    d = asdict(t)
    for holder in (d, d.get("cuda_set") or {}):
        if "platform" in holder:
            holder["platform"] = str(holder["platform"])
    return d


def pushes(plan: Plan) -> list[dict[str, Any]]:
    """Every tag a release of ``plan`` pushes, as planned (publish renders them again from what it measured, and
    marks a CUDA image verified without a GPU ``-not-gpu-verified``, with no floating tag): ``image``, one
    target's own tag (``<tag>-<arch>`` when it is one platform of an image index); ``index``, the image index of a
    tag built for several platforms; ``floating``, a floating tag and the tag it copies (an index's, when it has one)."""
    out: list[dict[str, Any]] = []
    for group in plan.index_groups():
        several = len(group.targets) > 1
        for t in group.targets:
            out.append({"tag": platform_tag(group.tag, t.platform.value) if several else group.tag, "kind": "image",
                        "target": t.id, "platform": t.platform.value})
        if several:
            out.append({"tag": group.tag, "kind": "index", "targets": [t.id for t in group.targets],
                        "platforms": [t.platform.value for t in group.targets]})
        floating = sorted({f for t in group.targets for f in t.floating})
        out += [{"tag": f, "kind": "floating", "of": group.tag} for f in floating]
    return out


def write(plan: Plan, path: Path) -> None:
    write_json(path, to_json(plan))


def from_json(data: Mapping[str, Any]) -> Plan:
    if data.get("schema") != PLAN_SCHEMA:
        raise ValidationError(problems=[Problem(f"plan schema {data.get('schema')!r} is not {PLAN_SCHEMA}; re-run imagesmith plan")])
    targets = tuple(_target(t) for t in data["targets"])
    return Plan(data["matrix"], data["date"], targets, tuple(data.get("warnings", ())))


def target_from_json(d: Mapping[str, Any]) -> Target:
    """One target as ``to_json`` wrote it (KeyError/TypeError when it is not one)."""
    return _target(d)


def _target(d: Mapping[str, Any]) -> Target:
    v = dict(d["versions"])
    v["arch"] = tuple(v.get("arch", ()))
    pip = dict(d["pip"])
    for key in ("extra_index_urls", "find_links", "trusted_hosts"):
        pip[key] = tuple(pip[key])
    rest: dict[str, Any] = {k: tuple(d[k]) if isinstance(d[k], list) else d[k] for k in d if k not in ("versions", "pip", "cuda_set", "platform")}
    return Target(versions=Versions(**v), pip=PipSources(**pip), cuda_set=_cuda_set(d.get("cuda_set")),
                  platform=Platform(d.get("platform", DEFAULT_PLATFORM)), **rest)


def _cuda_set(d: Mapping[str, Any] | None) -> CudaSet | None:
    if not d:
        return None
    wheels = tuple(compat.Wheel(**w) for w in d["wheels"])
    return CudaSet(d["id"], d["variant"], wheels, d.get("prefix", CUDA_PREFIX), Platform(d.get("platform", DEFAULT_PLATFORM)))


def read(path: Path) -> Plan:
    """A plan.json, through the one loader (confined to its folder, bounded, strict JSON)."""
    from imagesmith.model import loader

    return from_json(loader.parse_json(loader.read_confined(path, cap=64 << 20), str(path)))

