"""The sections of matrix.yaml: one parser per key, from located YAML to the frozen records (pure).

Each parser takes the :class:`MatrixCtx` (the shared toolkit of :mod:`imagesmith.model.validation`
plus the knowledge base) and the raw value of its section; it returns records and reports every
problem where it was written (``file:line key.path``), with the fix. Cells are checked against
the knowledge base here too.

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
import graphlib
import itertools
import re
import urllib.parse
from functools import partial
from pathlib import Path
from typing import Any, Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement

from imagesmith.model import compat, grammar, vulns
from imagesmith.model import platform as platforms
from imagesmith.model.located import KeyPath, Lines, printable
from imagesmith.model.matrix.records import (
    AXES,
    BUILTIN_PARENTS,
    PLATFORM,
    TIERS,
    Cell,
    Credential,
    ImageSpec,
    Jupyter,
    Layer,
    Matrix,
    Sources,
    Sshd,
    VerifyPolicy,
)
from imagesmith.model.paths import PathProblem, Roots, confined
from imagesmith.model.platform import Platform
from imagesmith.model.ref import ImageRef
from imagesmith.model.tags import DOCKER_TAG, TAG_FIELDS, FloatingTag, TagPolicy
from imagesmith.model.validation import Ctx, Derived, Key, Rule, Table, checks, did_you_mean, kind
from imagesmith.model.versions import matches

SCHEMA_VERSION = 1
BASE_FROM = ("os", "cuda-runtime", "cuda-devel")
CUDA_LIBS = ("shared", "venv")  # base layer: torch's CUDA wheels in a layer shared across cells, or in each venv
NETWORK_MODES = ("default", "host", "none")
KB_PINNED = ("torch", "torchvision", "torchaudio", "numpy")
REQUIREMENTS_LIMIT = 1 << 20  # bytes of a requirements file
CA_LIMIT = 4 << 20  # bytes of a CA bundle
TEMPLATE_LIMIT = 256 << 10  # bytes of a user template


class MatrixCtx(Ctx):
    """The shared toolkit's context, plus the knowledge base every cell is checked against."""

    def __init__(self, file: Path, lines: Lines, kb: compat.KnowledgeBase, roots: Roots | None = None) -> None:
        super().__init__(file, lines, roots)
        self.kb = kb
        self.variants: set[str] = set()  # the torch wheel variants the cells need (sources.torch_index_url's check)


TOP_KEYS = ("version", "image", "matrix", "base_images", "layers", "tags", "verify", "sources", "vulnerabilities")


def _pairs(ctx: MatrixCtx, raw: Any, path: KeyPath, key_check: grammar.Check) -> tuple[tuple[str, str], ...]:
    """A mapping of the user's own keys (env names, label keys) to free text, both checked."""
    out = []
    for key, value in ctx.open_mapping(raw, path).items():
        ctx.checked(key, path + (key,), key_check)
        text = ctx.string(value, path + (key,), "")
        out.append((key, ctx.checked("" if text is None else text, path + (key,), grammar.text)))
    return tuple(sorted(out))


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
    Key("labels", partial(_pairs, key_check=grammar.label_key)),
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
    if raw is None:
        return []
    if not isinstance(raw, list):
        ctx.error(path, f"expected a list of cells, got {kind(raw)}")
        return []
    out = []
    for i, item in enumerate(raw):
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


# -- layers --------------------------------------------------------------------

LAYER_KEYS = ("parent", "packages", "apt", "requirements", "env", "from", "toolchain", "cuda_libs", "template", "services", "when")


def _layers(ctx: MatrixCtx, raw: Any) -> tuple[Layer, ...]:
    d = ctx.open_mapping(raw if raw is not None else {"base": {}}, ("layers",))
    layers = {name: _layer(ctx, name, spec) for name, spec in d.items()}
    if "base" not in layers:
        ctx.error(("layers",), "a matrix needs a layer named base (OS + Python + torch)")
        return tuple(layers.values())
    return _ordered(ctx, layers)


def _layer(ctx: MatrixCtx, name: str, raw: Any) -> Layer:
    p: KeyPath = ("layers", name)
    s = ctx.section(raw, p, LAYER_KEYS)
    if not re.fullmatch(r"[a-z][a-z0-9-]{0,30}", name):
        ctx.error(p, f"layer name {name!r} must be lowercase letters, digits and '-' (it goes into tags)")
    parent = s("parent", Ctx.string, BUILTIN_PARENTS.get(name, "base"))
    packages = s("packages", Ctx.strings)
    for i, spec in enumerate(packages):
        _check_package(ctx, spec, p + ("packages", i))
    req = s("requirements", Ctx.local_file, REQUIREMENTS_LIMIT)
    pins = _check_requirements(ctx, req[0].name, req[2], p + ("requirements",)) if req else ()
    template, template_path = s("template", _template)
    return Layer(
        name=name,
        parent=None if name == "base" else parent,
        packages=packages,
        apt=s("apt", Ctx.checked_strings, grammar.debian_package),
        requirements=req[0] if req else None,
        requirements_data=req[1] if req else b"",
        requirements_pins=pins,
        env=s("env", _pairs, grammar.env_name),
        base_from=s("from", Ctx.choice, BASE_FROM, "os"),
        toolchain=s("toolchain", Ctx.boolean, name == "base"),
        cuda_libs=s("cuda_libs", _cuda_libs, name),
        template=template,
        template_path=template_path,
        jupyter=s("services", _jupyter),
        sshd=s("services", _sshd),
        when=s("when", _layer_when),
    )


def _cuda_libs(ctx: MatrixCtx, raw: Any, path: KeyPath, name: str) -> str:
    if raw is not None and name != "base":
        ctx.error(path, "cuda_libs belongs to the base layer (where torch and its CUDA wheels are installed)")
    return str(ctx.choice(raw, path, CUDA_LIBS, "shared"))


def _layer_when(ctx: MatrixCtx, raw: Any, path: KeyPath) -> tuple[tuple[str, tuple[str, ...]], ...]:
    d = ctx.mapping(raw, path, (*AXES, PLATFORM))
    out = tuple((axis, ctx.strings(d[axis], path + (axis,))) for axis in AXES if axis in d)
    if PLATFORM in d:
        out += ((PLATFORM, ctx.checked_strings(d[PLATFORM], path + (PLATFORM,), platforms.problem)),)
    return out


def _template(ctx: MatrixCtx, raw: Any, path: KeyPath) -> tuple[str, Path | None]:
    """A layer's own template: one of ours by name, or a file of the user's in
    the matrix's folder (or an allowed root): trusted code, rendered sandboxed."""
    from imagesmith.resources import templates_dir

    name = ctx.string(raw, path, "") or ""
    if not name or is_shipped_template(name, templates_dir()):
        return name, None
    found = ctx.local_file(name, path, TEMPLATE_LIMIT)
    return name, found[0] if found else None


def is_shipped_template(name: str, folder: Path) -> bool:
    """``name`` is one of our templates (a plain relative name under templates/)."""
    parts = Path(name).parts
    try:
        return bool(parts) and ".." not in parts and not Path(name).is_absolute() and (folder / name).is_file()
    except (OSError, ValueError):  # a name too long to be one of ours
        return False


def _check_package(ctx: MatrixCtx, spec: str, path: KeyPath) -> None:
    why = grammar.pip_requirement(spec)
    if why:
        ctx.error(path, why)
        return
    name = spec.strip().lower()
    if name in KB_PINNED:
        return  # resolved from the knowledge base for each cell
    if not grammar.is_pinned(spec):
        name = re.split(r"[<>=!~\[; @]", spec.strip(), maxsplit=1)[0]
        ctx.warn(path, f"{spec!r} is not pinned; pin it ({name}==X.Y.Z) so that rebuilds install the same thing")


# pip options a requirements file may hold; those that change where packages
# come from, or name files the build context does not have, are refused.
REQ_OPTIONS_OK = ("--hash", "--pre", "--prefer-binary", "--only-binary", "--no-binary", "--require-hashes", "--config-settings")
REQ_OPTIONS_REFUSED = {
    "-i": "package sources", "--index-url": "package sources", "--extra-index-url": "package sources",
    "--no-index": "package sources", "-f": "package sources", "--find-links": "package sources",
    "--trusted-host": "package sources", "-r": "other files", "--requirement": "other files",
    "-c": "other files", "--constraint": "other files", "-e": "other files", "--editable": "other files",
}


def _requirement_lines(text: str) -> list[tuple[int, str]]:
    """(line number, logical line) with comments dropped and \\-continuations joined, as pip reads it."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for n, line in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", line)
        start = start or n
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        if (pending + line).strip():
            out.append((start, (pending + line).strip()))
        pending, start = "", 0
    return out


def _check_requirements(ctx: MatrixCtx, name: str, text: str, path: KeyPath) -> tuple[str, ...]:
    """Each line a requirement pip understands; warnings name the package, never quote the file."""
    pins = []
    for n, line in _requirement_lines(text):
        words = line.split()
        first = next((i for i, w in enumerate(words) if w.startswith("-")), len(words))
        refused = [_option_problem(w.split("=", 1)[0]) for w in words[first:] if w.startswith("-")]
        if any(refused):
            ctx.error(path, f"{name}:{n}: {next(r for r in refused if r)}")
        elif first:
            pins += _check_requirement(ctx, name, n, " ".join(words[:first]), path)
    return tuple(pins)


def _option_problem(option: str) -> str | None:
    if option in REQ_OPTIONS_REFUSED:
        return (f"{option} is not allowed here: the file is copied alone into the build context, "
                f"so {REQ_OPTIONS_REFUSED[option]} belong in the matrix (sources:, packages:, requirements:)")
    return None if option in REQ_OPTIONS_OK else f"a pip option that is not supported here (only {', '.join(REQ_OPTIONS_OK)})"


def _check_requirement(ctx: MatrixCtx, name: str, n: int, spec: str, path: KeyPath) -> list[str]:
    try:
        req = Requirement(spec)
    except InvalidRequirement:
        ctx.error(path, f"{name}:{n}: not a requirement pip understands (PEP 508); write name==version, one per line")
        return []
    if req.url:
        ctx.warn(path, f"{name}:{n}: {req.name} is installed from a URL, outside sources:; pin it ({req.name}==X.Y.Z) and serve it from an index or wheel folder")
        return []
    if not grammar.is_pinned(spec):
        ctx.warn(path, f"{name}:{n}: {req.name} is not pinned; pin it ({req.name}==X.Y.Z) so that rebuilds install the same thing")
        return []
    return [f"{req.name}{req.specifier}"]


ANY_GIVEN = Derived(lambda given, _: bool(given))  # a service is enabled when any of its keys is written

JUPYTER = Table("jupyter", (  # -> Jupyter; the grammar checks come where they always came, after enabled
    Key("bind", Ctx.text, Jupyter.bind),
    Key("version", Ctx.text, Jupyter.version),
    Key("enabled", Ctx.boolean, ANY_GIVEN),
    checks("bind", grammar.listen_address),
    Key("port", partial(Ctx.integer, lo=1, hi=65535), Jupyter.port),
    checks("version", grammar.python_version),
))
SSHD = Table("sshd", (  # -> Sshd
    Key("enabled", Ctx.boolean, ANY_GIVEN),
    Key("port", partial(Ctx.integer, lo=1024, hi=65535), Sshd.port),
))


def _jupyter(ctx: MatrixCtx, raw: Any, path: KeyPath) -> Jupyter:
    services = ctx.mapping(raw, path, ("jupyter", "sshd"))
    return Jupyter(**JUPYTER.read(ctx, services.get("jupyter"), path + ("jupyter",)))


def _sshd(ctx: MatrixCtx, raw: Any, path: KeyPath) -> Sshd:
    services = raw if isinstance(raw, dict) else {}
    return Sshd(**SSHD.read(ctx, services.get("sshd"), path + ("sshd",)))


def _ordered(ctx: MatrixCtx, layers: dict[str, Layer]) -> tuple[Layer, ...]:
    """Parents before children, each generation in the matrix's order (stdlib graphlib);
    unknown parents and cycles are errors (a cycle leaves no layer order: nothing to build)."""
    for layer in layers.values():
        if layer.parent is not None and layer.parent not in layers:
            ctx.error(("layers", layer.name, "parent"),
                      f"parent {layer.parent!r} is not a layer here; layers: {', '.join(layers)}{did_you_mean(layer.parent, layers)}")
    graph = graphlib.TopologicalSorter({name: layers.keys() & {layer.parent} for name, layer in layers.items()})
    try:
        graph.prepare()
    except graphlib.CycleError as exc:
        ctx.error(("layers",), f"layers form a cycle: {', '.join(sorted(set(exc.args[1])))}")
        return ()
    rank, order = {name: i for i, name in enumerate(layers)}, []
    while graph.is_active():
        generation = sorted(graph.get_ready(), key=rank.__getitem__)
        order += generation
        graph.done(*generation)
    return tuple(layers[name] for name in order)


# -- tags, verify, sources ---------------------------------------------------------


def _floating(ctx: MatrixCtx, raw: Any, path: KeyPath) -> tuple[FloatingTag, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        ctx.error(path, f"expected a list of tags, got {kind(raw)}")
        return ()
    out = []
    for i, item in enumerate(raw):
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


def _advisories(ctx: MatrixCtx, raw: Any, path: KeyPath) -> tuple[str, ...]:
    """OSV snapshots: an http(s) URL, or a zip or folder inside the roots (read when matched, not here)."""
    out = []
    for i, text in enumerate(ctx.strings(raw, path)):
        where = path + (i,)
        if text.startswith(("http://", "https://")):
            out.append(ctx.checked(text, where, grammar.url))
            continue
        try:
            found = confined(ctx.roots, text, kind="any")
        except PathProblem as exc:
            ctx.error(where, str(exc))
            continue
        out.append(str(found))
    return tuple(out)


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
    if raw is None:
        return ()
    if not isinstance(raw, list):
        ctx.error(path, f"expected a list of allowances ({{id, reason, expires}}), got {kind(raw)}")
        return ()
    out = []
    for i, item in enumerate(raw):
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


def _index(ctx: MatrixCtx, raw: Any, path: KeyPath) -> str | None:
    """An index or find-links URL; a local folder (/path or file:///path) stays inside the roots."""
    text = ctx.string(raw, path)
    if text is None:
        return None
    sample = text.replace("{variant}", "cpu") if path[-1] == "torch_index_url" else text
    if sample.startswith("/") and not grammar.URL_CHARS.fullmatch(sample):
        ctx.error(path, f"{printable(text)}: a folder path here may hold only letters, digits and - . _ ~ / "
                  "(it goes into a space-separated list); rename the folder")
    elif sample.startswith("/"):
        ctx.local_folder(sample, path)
    elif not ctx.checked(sample, path, grammar.url) or grammar.url(sample):
        pass
    elif sample.startswith("file://"):
        ctx.local_folder(urllib.parse.unquote(urllib.parse.urlsplit(sample).path), path)
    return text


def _indexes(ctx: MatrixCtx, raw: Any, path: KeyPath) -> tuple[str, ...]:
    values = ctx.strings(raw, path)
    return tuple(_index(ctx, v, path + (i,)) or v for i, v in enumerate(values))


def _ca_bundle(ctx: MatrixCtx, raw: Any, path: KeyPath) -> tuple[Path, bytes] | None:
    found = ctx.local_file(raw, path, CA_LIMIT)
    if found and "-----BEGIN CERTIFICATE-----" not in found[2]:
        ctx.error(path, f"{raw} holds no PEM certificate (-----BEGIN CERTIFICATE-----); give the CA bundle of your proxy")
        return None
    return (found[0], found[1]) if found else None


def _check_torch_index(ctx: MatrixCtx, sources: Sources) -> None:
    cuda_variants = sorted(v for v in ctx.variants if v != "cpu")
    url = sources.torch_index_url
    if url and "{variant}" not in url and len(cuda_variants) > 1:
        ctx.warn(("sources", "torch_index_url"), f"has no {{variant}} but the matrix needs {', '.join(cuda_variants)} wheels, "
                 "which live on different indexes; write e.g. https://mirror.example.com/whl/{variant}")


PYPI_HOSTS = ("pypi.org", "pypi.python.org")


def _check_pypi_platform_wheels(ctx: MatrixCtx, cells: Sequence[Cell], sources: Sources) -> None:
    """A CUDA cell whose platform's torch wheel on PyPI is the CPU build (the knowledge base's ``pypi: cpu``) must not
    take torch from PyPI: it would build, and run, without CUDA (pytorch/pytorch#160162)."""
    url = sources.torch_index_url
    if not url or urllib.parse.urlsplit(url).hostname not in PYPI_HOSTS:
        return
    for cell in cells:
        release = ctx.kb.resolve_torch(cell.torch)
        variant = release.variant_for(cell.cuda) if release else None
        wheels = ctx.kb.wheels_for(release, variant.name, cell.platform) if release and variant and variant.cuda else None
        if release is not None and variant is not None and wheels is not None and wheels.pypi == "cpu":
            ctx.error(("sources", "torch_index_url"),
                      f"PyPI's {cell.platform} wheel of torch {release.version} is the CPU build (torch.version.cuda is None; "
                      f"pytorch/pytorch#160162), so cell {cell.label()} would get no CUDA; take its {variant.name} wheels from "
                      f"{variant.index} (or a mirror of it: write {{variant}} in torch_index_url), or build torch 2.11 or newer, "
                      "whose PyPI aarch64 wheels are CUDA builds")
            return


def _credentials(ctx: MatrixCtx, raw: Any, path: KeyPath) -> tuple[Credential, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        ctx.error(path, f"expected a list of credentials, got {kind(raw)}")
        return ()
    out = []
    for i, item in enumerate(raw):
        s = ctx.section(item, path + (i,), ("host", "username_env", "password_env", "file"))
        host = s("host", Ctx.string)
        if not host:
            ctx.error(path + (i,), "a credential needs host: the index host it is sent to")
            continue
        if "file" not in s and "password_env" not in s:
            ctx.error(path + (i,), "a credential needs password_env (an environment variable) or file (holding user:password)")
        out.append(Credential(ctx.checked(host, path + (i, "host"), grammar.host), s("username_env", Ctx.optional, grammar.env_name),
                              s("password_env", Ctx.optional, grammar.env_name), s("file", _secret_file)))
    return tuple(out)


def _secret_file(ctx: MatrixCtx, raw: Any, path: KeyPath) -> Path | None:
    """A credentials file (read at build time, so it may not exist yet), inside the roots:
    otherwise a matrix could send any one-line host file to the host it names."""
    text = ctx.string(raw, path)
    if text is None:
        return None
    try:
        resolved = ctx.roots.resolve(text)
    except PathProblem as exc:
        ctx.error(path, str(exc))
        return None
    if not ctx.roots.inside(resolved):
        ctx.error(path, f"{text} resolves to {resolved}, outside {ctx.roots.base}; keep it in the matrix's folder, "
                  f"or allow its folder on the command line: --allow-root {resolved.parent}")
    return resolved


PROXY = Table("proxy", (
    Key("http", partial(Ctx.optional, check=grammar.proxy_url)),
    Key("https", partial(Ctx.optional, check=grammar.proxy_url)),
    Key("no_proxy", partial(Ctx.optional, check=grammar.no_proxy)),
))


def _proxy_values(ctx: MatrixCtx, v: dict[str, Any], p: KeyPath) -> None:
    v["proxy"] = PROXY.values(ctx, v["proxy"], p + ("proxy",))


SOURCES = Table("sources", (  # -> Sources
    Key("proxy", PROXY.given),  # its unknown keys first, as they always came; its values below
    Key("ca_bundle", _ca_bundle),
    Key("torch_index_url", _index),
    Key("index_url", _index),
    Key("extra_index_urls", _indexes),
    Key("find_links", _indexes),
    Key("trusted_hosts", partial(Ctx.checked_strings, check=grammar.host)),
    Rule(_proxy_values),
    Key("network", partial(Ctx.choice, choices=NETWORK_MODES), Sources.network),
    Key("credentials", _credentials),
    Key("advisories", _advisories),
))


def _sources(ctx: MatrixCtx, raw: Any) -> Sources:
    v = SOURCES.read(ctx, raw, ("sources",))
    ca, proxy = v["ca_bundle"], v["proxy"]
    return Sources(
        torch_index_url=v["torch_index_url"], index_url=v["index_url"], extra_index_urls=v["extra_index_urls"],
        find_links=v["find_links"], trusted_hosts=v["trusted_hosts"],
        ca_bundle=ca[0] if ca else None, ca_bundle_data=ca[1] if ca else b"",
        http_proxy=proxy["http"], https_proxy=proxy["https"], no_proxy=proxy["no_proxy"],
        network=v["network"], credentials=v["credentials"], advisories=v["advisories"],
    )


def _base_images(ctx: MatrixCtx, raw: Any) -> dict[str, str]:
    """``base_images.<os>``: one reference for every platform, or a mapping platform -> reference (a local base
    is one architecture: ``{linux/amd64: imagesmith/debian:bookworm, linux/arm64: imagesmith/debian:bookworm-arm64}``).
    Keys of the result: ``<os>`` and ``<os>@<platform>`` (:func:`base_image_for`)."""
    p: KeyPath = ("base_images",)
    d = ctx.mapping(raw, p, ctx.kb.os.keys())
    out = {}
    for os_key, value in d.items():
        if isinstance(value, Mapping):
            per = ctx.mapping(value, p + (os_key,), platforms.NAMES)
            for name, ref in per.items():
                out[f"{os_key}@{name}"] = _base_ref(ctx, ref, p + (os_key, name))
        else:
            out[os_key] = _base_ref(ctx, value, p + (os_key,))
    return out


def _base_ref(ctx: MatrixCtx, ref: Any, path: KeyPath) -> str:
    image = ctx.checked(ctx.string(ref, path) or "", path, grammar.image_reference)
    if not grammar.image_reference(image):
        _check_base_ref(ctx, image, path)
    return image


def _check_base_ref(ctx: MatrixCtx, ref: str, path: KeyPath) -> None:
    parsed = ImageRef.maybe(ref)
    if parsed is None or parsed.pinned or ref.startswith("sha256:"):
        return
    if not parsed.tag or parsed.tag == "latest":
        ctx.warn(path, f"{ref!r} is a mutable tag; pin it by digest ({parsed.name}@sha256:...) or a dated tag so every build starts from the same bytes")


# -- the whole document ---------------------------------------------------------


def build(ctx: MatrixCtx, d: Mapping[str, Any]) -> Matrix:
    """The records of a matrix from its top-level mapping; problems are left in ``ctx``."""
    layers = _layers(ctx, d.get("layers"))
    base_images = _base_images(ctx, d.get("base_images"))
    cells = _unique(ctx, _expand(ctx, d.get("matrix")))
    for cell in cells:
        _check_cell(ctx, cell, layers, base_images)
    sources = _sources(ctx, d.get("sources"))
    _check_torch_index(ctx, sources)
    _check_pypi_platform_wheels(ctx, cells, sources)
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
