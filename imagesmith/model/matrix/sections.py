"""The sections of matrix.yaml: one parser per key, from located YAML to the frozen records (pure).

Each parser takes the :class:`MatrixCtx` (the shared toolkit of :mod:`imagesmith.model.validation`
plus the knowledge base) and the raw value of its section; it returns records and reports every
problem where it was written (``file:line key.path``), with the fix. Cells are checked against
the knowledge base here too. The ``layers:`` section lives in :mod:`.layers`, ``sources:`` and ``base_images:`` in
:mod:`.sources`, and the context they share in :mod:`.context`.

A section whose keys are plain reads is a key table (:class:`~imagesmith.model.validation.Table`)
declared next to its parser: ``IMAGE``, ``TAGS``, ``VERIFY``, ``VULNERABILITIES`` and ``ALLOWANCE``,
``SOURCES`` and ``PROXY``, ``JUPYTER`` and ``SSHD`` list each key with its getter and default, in the
order the keys are read (which is the order of their messages); a check across keys is a ``Rule`` at
its place, and what is left to code is turning the values into records. The matrix itself (axes,
include/exclude: the cells), the layers (a layer's defaults follow its name; services is read twice),
base_images, thresholds, floating tags and credentials stay functions: their keys are the user's own,
or which keys are read depends on others.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import re
from functools import partial
from typing import Any, Mapping, Sequence

from imagesmith.model import compat, grammar, vulns
from imagesmith.model import platform as platforms
from imagesmith.model.located import KeyPath, printable
from imagesmith.model.matrix.context import (
    MatrixCtx,
    pairs,
)
from imagesmith.model.matrix.layers import read_layers
from imagesmith.model.matrix.records import (
    AXES,
    PLATFORM,
    TIERS,
    Cell,
    ImageSpec,
    Layer,
    Matrix,
    VerifyPolicy,
)
from imagesmith.model.matrix.sources import base_images_of, check_pypi_platform_wheels, check_torch_index, read_sources
from imagesmith.model.platform import Platform
from imagesmith.model.tags import DOCKER_TAG, TAG_FIELDS, FloatingTag, TagPolicy
from imagesmith.model.validation import Ctx, Key, Rule, Table, did_you_mean
from imagesmith.model.versions import matches

SCHEMA_VERSION = 1


TOP_KEYS = ("version", "image", "matrix", "base_images", "layers", "tags", "verify", "sources", "vulnerabilities")


def _image_name_length(ctx: MatrixCtx, v: dict[str, Any], p: KeyPath) -> None:
    repo, registry = v["repository"], v["registry"]
    if len(f"{registry}/{repo}" if registry else repo) > 255:
        ctx.error(p + ("repository",), "registry/repository is over 255 characters, the limit of an image name; shorten it")


IMAGE = Table("image", (  # -> ImageSpec
    Key("repository", Ctx.string, "imagesmith/pytorch", check=grammar.repository),
    Key("registry", partial(Ctx.optional, check=grammar.registry_host)),
    Rule(_image_name_length),
    Key("user", Ctx.text, ImageSpec.user, check=grammar.user_name),
    Key("uid", partial(Ctx.integer, lo=1, hi=65535), ImageSpec.uid),
    Key("labels", partial(pairs, key_check=grammar.label_key)),
))


def _image(ctx: MatrixCtx, raw: Any) -> ImageSpec:
    return ImageSpec(**IMAGE.read(ctx, raw, ("image",)))


def _axis(ctx: MatrixCtx, d: Mapping[str, Any], axis: str) -> list[tuple[str, KeyPath]]:
    path: KeyPath = ("matrix", axis)
    values = ctx.strings(d.get(axis), path)
    return [(v, path + (i,)) for i, v in enumerate(values)]


def _cell_entries(ctx: MatrixCtx, raw: Any, key: str) -> list[tuple[dict[str, str], KeyPath]]:
    """The entries of include/exclude; one whose platform is not one imagesmith builds is reported and dropped."""
    path: KeyPath = ("matrix", key)
    out = []
    for i, item in enumerate(ctx.entries(raw, path, "cells")):
        entry = {k: str(v) for k, v in ctx.mapping(item, path + (i,), (*AXES, "cudnn", PLATFORM)).items()}
        why = platforms.problem(entry[PLATFORM]) if PLATFORM in entry else None
        if why:
            ctx.error(path + (i, PLATFORM), why)
            continue
        out.append((entry, path + (i,)))
    return out


def _platform_axis(ctx: MatrixCtx, raw: Any) -> list[tuple[Platform, KeyPath]]:
    """matrix.platform: a list or one string, each ``linux/amd64`` or ``linux/arm64``; absent: linux/amd64 alone."""
    path: KeyPath = ("matrix", PLATFORM)
    if raw is None:
        return [(platforms.DEFAULT, ("matrix",))]
    if raw == []:
        ctx.error(path, f"give at least one platform ({', '.join(platforms.NAMES)}), or leave platform out to build linux/amd64")
    out: list[tuple[Platform, KeyPath]] = []
    for i, value in enumerate(ctx.strings(raw, path)):
        where = path if isinstance(raw, str) else path + (i,)
        why = platforms.problem(value)
        if why:
            ctx.error(where, why)
        elif any(p == value for p, _ in out):
            ctx.warn(where, f"{value} is listed twice; it is built once")
        else:
            out.append((platforms.Platform(value), where))
    return out


def _expand(ctx: MatrixCtx, raw: Any) -> list[Cell]:
    """The cells of the matrix, with include/exclude applied as GitHub Actions does."""
    d = ctx.mapping(raw, ("matrix",), (*AXES, PLATFORM, "cudnn", "include", "exclude"))
    axes = {a: _axis(ctx, d, a) for a in AXES}
    plats = _platform_axis(ctx, d.get(PLATFORM))
    cudnn = ctx.string(d.get("cudnn"), ("matrix", "cudnn"))
    combos = [dict(zip((*AXES, PLATFORM), (v for v, _ in combo))) | {"_origin": combo}
              for combo in itertools.product(*(axes[a] for a in AXES), plats)]
    for entry, _ in _cell_entries(ctx, d.get("exclude"), "exclude"):
        combos = [c for c in combos if not all(c.get(k) == v for k, v in entry.items())]
    cells = _Cells([_product_cell(c, cudnn) for c in combos])
    for entry, path in _cell_entries(ctx, d.get("include"), "include"):
        _include(ctx, cells, entry, path, cudnn, plats)
    if not cells.cells:
        ctx.error(("matrix",), "the matrix has no cells; give each of torch, cuda, python, os at least one value, or list cells under include")
    return cells.cells


def _product_cell(combo: dict[str, Any], cudnn: str | None) -> Cell:
    origin = tuple(path for _, path in combo["_origin"])
    return Cell(combo["torch"], combo["cuda"], combo["python"], combo["os"], cudnn=cudnn, origin=origin,
                platform=combo[PLATFORM])


class _Cells:
    """Cells in order, indexed by their four axes (an include naming all four is a lookup, not a scan)."""

    def __init__(self, cells: list[Cell]) -> None:
        self.cells = cells
        self.index: dict[tuple[str, ...], list[int]] = {}
        for i, c in enumerate(cells):
            self.index.setdefault(_axes(c), []).append(i)

    def matching(self, given: Mapping[str, str]) -> list[int]:
        """Cells equal to ``given`` on the keys it names (axes and platform)."""
        if all(a in given for a in AXES):
            hits = self.index.get(tuple(given[a] for a in AXES), [])
            return [i for i in hits if given.get(PLATFORM, self.cells[i].platform) == self.cells[i].platform]
        return [i for i, c in enumerate(self.cells) if all(getattr(c, k) == v for k, v in given.items())]

    def add(self, cell: Cell) -> None:
        self.index.setdefault(_axes(cell), []).append(len(self.cells))
        self.cells.append(cell)


def _axes(cell: Cell) -> tuple[str, ...]:
    return (cell.torch, cell.cuda, cell.python, cell.os)


def _key(cell: Cell) -> tuple[str, ...]:
    """What makes a cell one image: its axes and its platform."""
    return (*_axes(cell), cell.platform.value)


def _include(ctx: MatrixCtx, cells: _Cells, entry: dict[str, str], path: KeyPath, cudnn: str | None,
             plats: Sequence[tuple[Platform, KeyPath]]) -> None:
    """An include matching cells (on the axes and platform it names) adds its other keys to them; one matching
    none adds a cell: for its platform, or for each platform of matrix.platform when it names none."""
    axes_given = {k: v for k, v in entry.items() if k in (*AXES, PLATFORM)}
    extra = {k: v for k, v in entry.items() if k not in axes_given}
    hits = cells.matching(axes_given)
    for i in hits if extra else ():
        cells.cells[i] = _with(cells.cells[i], extra)
    if hits:
        return
    missing = [a for a in AXES if a not in entry]
    if missing:
        ctx.error(path, f"this include matches no cell, so it adds one, but it lacks {', '.join(missing)}")
        return
    origin = tuple(path + (a,) for a in AXES)
    named = [(Platform(entry[PLATFORM]), path + (PLATFORM,))] if PLATFORM in entry else plats
    for plat, where in named:
        cells.add(Cell(entry["torch"], entry["cuda"], entry["python"], entry["os"], cudnn=entry.get("cudnn", cudnn),
                       origin=(*origin, where), platform=plat))


def _with(cell: Cell, extra: Mapping[str, str]) -> Cell:
    return dataclasses.replace(cell, cudnn=extra.get("cudnn", cell.cudnn))


# -- cell validation against the knowledge base -----------------------------


def _check_cell(ctx: MatrixCtx, cell: Cell, layers: Sequence[Layer], base_images: Mapping[str, str]) -> None:
    where = cell.where()
    release = ctx.kb.resolve_torch(cell.torch)
    if release is None:
        known = ", ".join(ctx.kb.torch_lines())
        ctx.error(where.get("torch", ("matrix",)), f"unknown torch {cell.torch}; known: {known}{did_you_mean(cell.torch, ctx.kb.torch_lines())}")
        return
    _check_cuda(ctx, cell, release, where)
    if release.variant_for(cell.cuda):
        ctx.variants.add(release.variant_for(cell.cuda).name)  # type: ignore[union-attr]
    _check_python(ctx, cell, release, where)
    _check_os(ctx, cell, where, layers, base_images)
    _check_platform(ctx, cell, release, where)


def _cuda_list(release: compat.TorchRelease) -> str:
    has = release.cuda_versions()
    return ", ".join(has) if has else "none"


def _check_cuda(ctx: MatrixCtx, cell: Cell, release: compat.TorchRelease, where: Mapping[str, KeyPath]) -> None:
    path = where.get("cuda", ("matrix",))
    variant = release.variant_for(cell.cuda)
    if variant is None and cell.cuda == "cpu":
        ctx.error(path, f"torch {release.line} has no CPU-only wheels")
    elif variant is None:
        ctx.error(path, f"torch {release.line} has no CUDA {cell.cuda} wheels; it has {_cuda_list(release)}")
    elif cell.cudnn and variant.cudnn and not matches(cell.cudnn, variant.cudnn):
        ctx.error(("matrix", "cudnn") if ("matrix", "cudnn") in ctx.lines else path,
                  f"torch {release.version} with CUDA {cell.cuda} bundles cuDNN {variant.cudnn}, not {cell.cudnn}; cuDNN is fixed by torch and CUDA: write {variant.cudnn.split('.')[0]} or drop cudnn")
    elif cell.cudnn and not variant.cudnn:
        ctx.error(("matrix", "cudnn"), f"torch {release.version} {cell.cuda} wheels bundle no cuDNN; drop cudnn for this cell")


def _check_python(ctx: MatrixCtx, cell: Cell, release: compat.TorchRelease, where: Mapping[str, KeyPath]) -> None:
    if cell.python not in release.python:
        ctx.error(where.get("python", ("matrix",)),
                  f"torch {release.line} has no wheels for Python {cell.python}; it has {', '.join(release.python)}")


def _check_os(ctx: MatrixCtx, cell: Cell, where: Mapping[str, KeyPath], layers: Sequence[Layer], base_images: Mapping[str, str]) -> None:
    path = where.get("os", ("matrix",))
    info = ctx.kb.os.get(cell.os)
    if info is None:
        ctx.error(path, f"unknown os {cell.os!r}; known: {', '.join(ctx.kb.os)}{did_you_mean(cell.os, ctx.kb.os)}")
        return
    base_from = layers[0].base_from if layers else "os"
    if base_from == "os":
        return
    if cell.cuda == "cpu":
        ctx.error(("layers", "base", "from"), f"{base_from} needs a CUDA cell, but cell {cell.label()} is cpu; use from: os")
        return
    cuda = ctx.kb.cuda.get(cell.cuda)
    if cuda and cell.os not in cuda.image_os:
        ctx.error(path, f"nvidia/cuda publishes no CUDA {cell.cuda} images for {cell.os}; it has {', '.join(cuda.image_os)}")


def _check_platform(ctx: MatrixCtx, cell: Cell, release: compat.TorchRelease, where: Mapping[str, KeyPath]) -> None:
    """The cell's variant has wheels for its platform, and its OS's glibc runs them (their manylinux tag)."""
    variant = release.variant_for(cell.cuda)
    if variant is None or (cell.python not in release.python) or cell.os not in ctx.kb.os:
        return  # already reported
    wheels = ctx.kb.wheels_for(release, variant.name, cell.platform)
    os_info = ctx.kb.os[cell.os]
    if wheels is None or not wheels.available:
        why = f" ({wheels.note})" if wheels is not None and wheels.note else ""
        ctx.error(where.get(PLATFORM, ("matrix",)), f"torch {cell.torch} {variant.name} has no {cell.platform} wheels here{why}; "
                  + _nearest(ctx.kb, cell, release, variant.name))
    elif not wheels.runs_on(os_info.glibc):
        newer = [k for k, o in ctx.kb.os.items() if wheels.runs_on(o.glibc)]
        ctx.error(where.get("os", ("matrix",)),
                  f"{cell.os} has glibc {os_info.glibc}, but the {cell.platform} wheels of torch {cell.torch} {variant.name} are "
                  f"{wheels.manylinux} (glibc {wheels.glibc} or newer); use an OS with a newer glibc: {', '.join(newer) or 'none known'}")


def _nearest(kb: compat.KnowledgeBase, cell: Cell, release: compat.TorchRelease, variant: str) -> str:
    found = kb.nearest(release, variant, cell.platform, cell.python, kb.os[cell.os].glibc)
    if not found:
        return f"no torch release of the knowledge base has {cell.platform} wheels for Python {cell.python}"
    return f"nearest cells with {cell.platform} wheels: " + ", ".join(f"torch {line} {v}" for line, v in found)


# -- tags, verify, vulnerabilities (layers: layers.py; sources and base images: sources.py) ----


def _floating(ctx: MatrixCtx, raw: Any, path: KeyPath) -> tuple[FloatingTag, ...]:
    out = []
    for i, item in enumerate(ctx.entries(raw, path, "tags")):
        entry = {"tag": item} if isinstance(item, str) else ctx.mapping(item, path + (i,), ("tag", "when"))
        template = ctx.string(entry.get("tag"), path + (i, "tag"), "") or ""
        _check_template(ctx, template, path + (i,))
        when = ctx.mapping(entry.get("when"), path + (i, "when"), AXES + ("layer",))
        out.append(FloatingTag(template, tuple(sorted((k, str(v)) for k, v in when.items()))))
    return tuple(out)


def _check_template(ctx: MatrixCtx, template: str, path: KeyPath) -> None:
    fields = re.findall(r"{([^{}]*)}", template)
    for name in fields:
        if name not in TAG_FIELDS:
            ctx.error(path, f"unknown tag field {{{name}}}{did_you_mean(name, TAG_FIELDS)}; fields: {', '.join(TAG_FIELDS)}")
    sample = re.sub(r"{[^{}]*}", "x", template)
    if not template or not DOCKER_TAG.match(sample):
        ctx.error(path, f"{template!r} cannot make a Docker tag ([A-Za-z0-9_.-], not starting with . or -, at most 128 characters)")


def _tag_template(ctx: MatrixCtx, raw: Any, path: KeyPath, default: str) -> str:
    template = ctx.text(raw, path, default)
    _check_template(ctx, template, path)
    return template


TAGS = Table("tags", (  # -> TagPolicy
    Key("immutable", _tag_template, TagPolicy.immutable),
    Key("floating", _floating),
    Key("prerelease", Ctx.boolean, TagPolicy.prerelease),
))


def _tags(ctx: MatrixCtx, raw: Any) -> TagPolicy:
    return TagPolicy(**TAGS.read(ctx, raw, ("tags",)))


def _gpus(ctx: MatrixCtx, raw: Any, path: KeyPath) -> str:
    value = (ctx.string(raw, path, "all") or "all").replace(" ", "")
    if not grammar.GPU_LIST.match(value):
        ctx.error(path, f"{value!r} is not all, none or a list of GPU indexes/UUIDs such as 0,1")
        return "all"
    return value


THRESHOLD_KEYS = ("baseline", "fail_fraction", "warn_fraction")


def _threshold(ctx: MatrixCtx, raw: Any, path: KeyPath) -> dict[str, float]:
    # the keys the payload reads (verify/imagesmith_payload/config.py THRESHOLD_KEYS): a key it would refuse is refused here
    d = ctx.mapping(raw, path, THRESHOLD_KEYS)
    out = {}
    for key, value in d.items():
        try:
            out[key] = float(value)
        except (TypeError, ValueError):
            ctx.error(path + (key,), f"expected a number, got {value!r}")
    return out


VERIFY = Table("verify", (  # -> VerifyPolicy; each threshold's keys are read after the table
    Key("thresholds", Ctx.open_mapping),
    Key("tier", partial(Ctx.choice, choices=TIERS), VerifyPolicy.tier),
    Key("gpus", _gpus),
    Key("require_gpu", Ctx.boolean, True, optional=True),  # absent: None (true for CUDA cells, false for CPU ones)
    Key("shm_size", Ctx.text, VerifyPolicy.shm_size),
    Key("memory", Ctx.string),
    Key("timeout", partial(Ctx.integer, lo=10, hi=86400), VerifyPolicy.timeout_s),
))


def _verify(ctx: MatrixCtx, raw: Any) -> VerifyPolicy:
    p: KeyPath = ("verify",)
    v = VERIFY.read(ctx, raw, p)
    return VerifyPolicy(
        tier=v["tier"], gpus=v["gpus"], require_gpu=v["require_gpu"], shm_size=v["shm_size"], memory=v["memory"],
        timeout_s=v["timeout"], thresholds={k: _threshold(ctx, t, p + ("thresholds", k)) for k, t in v["thresholds"].items()},
    )


ADVISORY_ID = re.compile(r"[A-Za-z][A-Za-z0-9]*(-[A-Za-z0-9.:_]+)+")


def _date(ctx: MatrixCtx, raw: Any, path: KeyPath) -> dt.date | None:
    if raw is None:
        ctx.error(path, "an allowance needs expires: a date (YYYY-MM-DD) when it is looked at again")
        return None
    if isinstance(raw, dt.date) and not isinstance(raw, dt.datetime):
        return raw
    try:
        return dt.date.fromisoformat(str(raw))
    except ValueError:
        ctx.error(path, f"{printable(str(raw))} is not a date; write YYYY-MM-DD")
        return None


ALLOWANCE = Table("allowance", (  # -> vulns.Allowance, once id and reason are checked
    Key("id", Ctx.string),
    Key("reason", Ctx.string),
    Key("expires", _date),  # its absence is _date's error, at the key
    Key("package", Ctx.string, optional=True),  # only this package: a PyPI name, or a Debian source package
    Key("versions", Ctx.string, optional=True),  # only these versions: "<2.6.0", ">=1.0, <2.6.0"
))
PACKAGE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._+-]{0,126}[A-Za-z0-9+])?")


def _allowances(ctx: MatrixCtx, raw: Any, path: KeyPath) -> tuple[vulns.Allowance, ...]:
    out = []
    for i, item in enumerate(ctx.entries(raw, path, "allowances ({id, reason, expires})")):
        v = ALLOWANCE.read(ctx, item, path + (i,))
        ident, reason, expires = v["id"] or "", (v["reason"] or "").strip(), v["expires"]
        if not ADVISORY_ID.fullmatch(ident) or len(ident) > 64:
            ctx.error(path + (i, "id"), f"{printable(ident)} is not an advisory id (GHSA-xxxx-xxxx-xxxx, CVE-2025-32434, PYSEC-2024-1, DSA-5514-1)")
        if not reason:
            ctx.error(path + (i, "reason"), "an allowance needs a reason: why this image may ship with the advisory")
        else:
            ctx.checked(reason, path + (i, "reason"), grammar.text)
        scope = _scope(ctx, v, path + (i,))
        if expires is not None and ident and reason and scope is not None:
            out.append(vulns.Allowance(ident, reason, expires, *scope))
    return tuple(out)


def _scope(ctx: MatrixCtx, v: Mapping[str, Any], path: KeyPath) -> tuple[str | None, str | None] | None:
    """An allowance's optional package and versions, checked; None when one of them is wrong."""
    package, versions, ok = v["package"], v["versions"], True
    if package is not None and not PACKAGE_NAME.fullmatch(package):
        ctx.error(path + ("package",), f"{printable(package)} is not a package name; write the PyPI name (torch) or the "
                                       f"Debian source package (zlib) the advisory names")
        ok = False
    why = vulns.versions_problem(versions) if versions is not None else None
    if why:
        ctx.error(path + ("versions",), why)
        ok = False
    return (package, versions.strip() if versions else None) if ok else None


VULNERABILITIES = Table("vulnerabilities", (  # -> vulns.Policy
    Key("threshold", partial(Ctx.choice, choices=vulns.THRESHOLDS), vulns.Policy.threshold),
    Key("allow", _allowances),
    Key("max_age_days", partial(Ctx.integer, lo=1, hi=3650), 0, optional=True),  # absent: None, no age limit
    Key("max_age", partial(Ctx.duration, lo=3600, hi=3650 * 86400), vulns.DEFAULT_MAX_AGE),  # a snapshot's newest record
    Key("stale", partial(Ctx.choice, choices=vulns.STALE), vulns.Policy.stale),
))


def _vulnerabilities(ctx: MatrixCtx, raw: Any) -> vulns.Policy:
    return vulns.Policy(**VULNERABILITIES.read(ctx, raw, ("vulnerabilities",)))


# -- the whole document ---------------------------------------------------------


def build(ctx: MatrixCtx, d: Mapping[str, Any]) -> Matrix:
    """The records of a matrix from its top-level mapping; problems are left in ``ctx``."""
    layers = read_layers(ctx, d.get("layers"))
    base_images = base_images_of(ctx, d.get("base_images"))
    cells = _unique(ctx, _expand(ctx, d.get("matrix")))
    for cell in cells:
        _check_cell(ctx, cell, layers, base_images)
    sources = read_sources(ctx, d.get("sources"))
    check_torch_index(ctx, sources)
    check_pypi_platform_wheels(ctx, cells, sources)
    return Matrix(
        file=ctx.file,
        image=_image(ctx, d.get("image")),
        cells=tuple(cells),
        layers=layers,
        base_images=base_images,
        tags=_tags(ctx, d.get("tags")),
        verify=_verify(ctx, d.get("verify")),
        sources=sources,
        vulnerabilities=_vulnerabilities(ctx, d.get("vulnerabilities")),
        warnings=tuple(ctx.warnings()),
        lines=ctx.lines,
        roots=ctx.roots,
    )


def _unique(ctx: MatrixCtx, cells: Sequence[Cell]) -> list[Cell]:
    seen: dict[tuple[str, ...], Cell] = {}
    for cell in cells:
        key = _key(cell)
        if key in seen:
            ctx.warn(("matrix", "include"), f"cell {cell.label()} is listed twice; it is built once")
        seen.setdefault(key, cell)
    return list(seen.values())
