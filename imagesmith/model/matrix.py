"""matrix.yaml: the whole schema, loading and validation.

Validated input becomes frozen records at once; nothing downstream indexes raw
dicts.  Every finding carries ``file:line key.path``; all errors of a file are
reported together, warnings (legal but suspicious input) come with a fix hint.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import graphlib
import itertools
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement

from imagesmith.errors import Problem, ValidationError
from imagesmith.model import compat, grammar, vulns
from imagesmith.model import platform as platforms
from imagesmith.model.located import MAX_BYTES, KeyPath, Lines, TextProblem, dotted, line_of, load_located, printable, read_limited
from imagesmith.model.paths import PathProblem, Roots, confined, read_text
from imagesmith.model.platform import Platform
from imagesmith.model.ref import ImageRef
from imagesmith.model.tags import DOCKER_TAG, TAG_FIELDS
from imagesmith.model.tags import FloatingTag as FloatingTag  # re-exported: the matrix's tag policy is the tags module's
from imagesmith.model.tags import TagPolicy as TagPolicy
from imagesmith.model.versions import matches, version_key

SCHEMA_VERSION = 1
AXES = ("torch", "cuda", "python", "os")
PLATFORM = "platform"  # the fifth axis: optional (default linux/amd64), so a cell is named by the four above
BUILTIN_PARENTS = {"base": None, "cv": "base", "nlp": "base", "project": "cv"}
BASE_FROM = ("os", "cuda-runtime", "cuda-devel")
CUDA_LIBS = ("shared", "venv")  # base layer: torch's CUDA wheels in a layer shared across cells, or in each venv
NETWORK_MODES = ("default", "host", "none")
TIERS = ("quick", "standard", "soak")
KB_PINNED = ("torch", "torchvision", "torchaudio", "numpy")
REQUIREMENTS_LIMIT = 1 << 20  # bytes of a requirements file
CA_LIMIT = 4 << 20  # bytes of a CA bundle
TEMPLATE_LIMIT = 256 << 10  # bytes of a user template


# --------------------------------------------------------------------------
# records


@dataclass(frozen=True)
class Cell:
    """One combination of the axes, as written in the matrix."""

    torch: str
    cuda: str
    python: str
    os: str
    cudnn: str | None = None
    origin: tuple[KeyPath, ...] = field(default=(), compare=False)  # where torch, cuda, python, os (, platform) were written
    platform: Platform = platforms.DEFAULT

    def label(self) -> str:
        words = [f"{a}={getattr(self, a)}" for a in AXES]
        return " ".join(words + ([f"platform={self.platform}"] if self.platform is not platforms.DEFAULT else []))

    def where(self) -> dict[str, KeyPath]:
        """Axis -> where it was written (``platform`` where it was written at all)."""
        return dict(zip((*AXES, PLATFORM), self.origin)) if len(self.origin) >= len(AXES) else {}


@dataclass(frozen=True)
class Jupyter:
    enabled: bool = False
    bind: str = "127.0.0.1"
    port: int = 8888
    version: str = "4.4.10"


@dataclass(frozen=True)
class Sshd:
    enabled: bool = False
    port: int = 2222


@dataclass(frozen=True)
class Layer:
    name: str
    parent: str | None
    packages: tuple[str, ...] = ()
    apt: tuple[str, ...] = ()
    requirements: Path | None = None
    requirements_data: bytes = b""  # the bytes validate checked; render copies these, never re-reads the path
    requirements_pins: tuple[str, ...] = ()  # its pinned lines, name==version
    env: tuple[tuple[str, str], ...] = ()
    base_from: str = "os"
    toolchain: bool = True
    cuda_libs: str = "shared"
    template: str = ""
    template_path: Path | None = None  # a template of the user's (trusted code, rendered sandboxed)
    jupyter: Jupyter = Jupyter()
    sshd: Sshd = Sshd()
    when: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def applies_to(self, cell: "Cell") -> bool:
        """Whether this layer is built for ``cell`` (``when:`` filter; a platform is matched whole)."""
        return all(str(cell.platform) in values if axis == PLATFORM else matches_any(getattr(cell, axis), values)
                   for axis, values in self.when)


def matches_any(value: str, wanted: Sequence[str]) -> bool:
    return any(matches(w, value) for w in wanted)


@dataclass(frozen=True)
class VerifyPolicy:
    tier: str = "quick"
    gpus: str = "all"
    # None: true for CUDA cells (a CUDA image is verified on a GPU), false for CPU cells.
    # false lets a CUDA image pass verification in CPU mode; floating tags still need a GPU.
    require_gpu: bool | None = None
    shm_size: str = "8g"
    memory: str | None = None
    timeout_s: int = 900
    thresholds: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Credential:
    host: str
    username_env: str | None = None
    password_env: str | None = None
    file: Path | None = None


@dataclass(frozen=True)
class Sources:
    torch_index_url: str | None = None
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()
    ca_bundle: Path | None = None
    ca_bundle_data: bytes = b""
    http_proxy: str | None = None
    https_proxy: str | None = None
    no_proxy: str | None = None
    network: str = "default"
    credentials: tuple[Credential, ...] = ()
    advisories: tuple[str, ...] = ()  # OSV snapshots: a zip (all.zip) or folder inside the roots, or an http(s) URL


@dataclass(frozen=True)
class ImageSpec:
    repository: str
    registry: str | None = None
    user: str = "ml"
    uid: int = 1000
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.repository}" if self.registry else self.repository


@dataclass(frozen=True)
class Matrix:
    file: Path
    image: ImageSpec
    cells: tuple[Cell, ...]
    layers: tuple[Layer, ...]  # parents before children
    base_images: Mapping[str, str]
    tags: TagPolicy
    verify: VerifyPolicy
    sources: Sources
    warnings: tuple[Problem, ...] = ()
    vulnerabilities: vulns.Policy = field(default_factory=vulns.Policy)
    lines: Mapping[KeyPath, int] = field(default_factory=dict, compare=False, repr=False)
    roots: Roots | None = field(default=None, compare=False, repr=False)

    def problem(self, path: KeyPath, message: str) -> Problem:
        """A problem found after loading (at plan time), located at the line of ``path``."""
        return Problem(message, self.file.name, line_of(self.lines, path), dotted(path))

    def layer(self, name: str) -> Layer:
        return next(layer for layer in self.layers if layer.name == name)


# --------------------------------------------------------------------------
# the validation context: collects located problems


class Ctx:
    def __init__(self, file: Path, lines: Lines, kb: compat.KnowledgeBase, roots: Roots | None = None) -> None:
        self.file, self.lines, self.kb = file, lines, kb
        self.problems: list[Problem] = []
        self.base_dir = file.parent
        self.roots = roots or Roots.of(file)
        self.variants: set[str] = set()

    def _add(self, path: KeyPath, message: str, severity: str) -> None:
        line = line_of(self.lines, path)
        problem = Problem(message, self.file.name, line, dotted(path), severity)
        if problem not in self.problems:
            self.problems.append(problem)

    def error(self, path: KeyPath, message: str) -> None:
        self._add(path, message, "error")

    def warn(self, path: KeyPath, message: str) -> None:
        self._add(path, message, "warning")

    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    # -- typed getters -------------------------------------------------
    def mapping(self, raw: Any, path: KeyPath, allowed: Iterable[str]) -> dict[str, Any]:
        """``raw`` as a mapping with only ``allowed`` keys (others reported)."""
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.error(path, f"expected a mapping, got {_kind(raw)}")
            return {}
        allowed = list(allowed)
        for key in raw:
            if key not in allowed:
                self.error(path + (key,), f"unknown key{_did_you_mean(key, allowed)}")
        return {k: v for k, v in raw.items() if k in allowed}

    def open_mapping(self, raw: Any, path: KeyPath) -> dict[str, Any]:
        """A mapping whose keys are the user's own (layer names, env vars)."""
        return self.mapping(raw, path, raw.keys() if isinstance(raw, dict) else ())

    def string(self, raw: Any, path: KeyPath, default: str | None = None) -> str | None:
        if raw is None:
            return default
        if isinstance(raw, (dict, list, bool)):
            self.error(path, f"expected a string, got {_kind(raw)}")
            return default
        return str(raw)

    def strings(self, raw: Any, path: KeyPath) -> tuple[str, ...]:
        """A list of strings; a single string is taken as a list of one."""
        if raw is None:
            return ()
        if isinstance(raw, (str, int, float)) and not isinstance(raw, bool):
            return (str(raw),)
        if not isinstance(raw, list):
            self.error(path, f"expected a list, got {_kind(raw)}")
            return ()
        items = [self.string(v, path + (i,)) for i, v in enumerate(raw)]
        return tuple(i for i in items if i is not None)

    def boolean(self, raw: Any, path: KeyPath, default: bool) -> bool:
        if raw is None:
            return default
        if not isinstance(raw, bool):
            self.error(path, f"expected true or false, got {raw!r}")
            return default
        return raw

    def integer(self, raw: Any, path: KeyPath, default: int, lo: int = 0, hi: int = 2**31) -> int:
        if raw is None:
            return default
        text = str(raw)
        if not re.fullmatch("[+-]?[0-9]{1,18}", text):  # ASCII digits only ("²" and "٣" are digits to int()), bounded
            self.error(path, f"expected a whole number, got {printable(text, 40)}")
            return default
        try:
            value = int(text)
        except ValueError:
            self.error(path, f"expected a whole number, got {printable(text, 40)}")
            return default
        if not lo <= value <= hi:
            self.error(path, f"{value} is out of range ({lo}..{hi})")
        return value

    def choice(self, raw: Any, path: KeyPath, choices: Sequence[str], default: str) -> str:
        value = self.string(raw, path, default) or default
        if value not in choices:
            self.error(path, f"{value!r} is not one of {', '.join(choices)}{_did_you_mean(value, choices)}")
            return default
        return value

    def checked(self, value: str, path: KeyPath, check: grammar.Check) -> str:
        """``value`` checked against its grammar; an error (with the fix) if it fails."""
        why = check(value)
        if why:
            self.error(path, why)
        return value

    def checked_strings(self, raw: Any, path: KeyPath, check: grammar.Check) -> tuple[str, ...]:
        return tuple(self.checked(v, path + (i,), check) for i, v in enumerate(self.strings(raw, path)))

    def local_file(self, raw: Any, path: KeyPath, limit: int) -> tuple[Path, bytes, str] | None:
        """A file named in the matrix: inside the roots, regular, bounded, UTF-8."""
        text = self.string(raw, path)
        if text is None:
            return None
        try:
            found = confined(self.roots, text)
            return (found, *read_text(found, text, limit))
        except PathProblem as exc:
            self.error(path, str(exc))
            return None

    def local_folder(self, text: str, path: KeyPath) -> None:
        try:
            confined(self.roots, text, kind="folder")
        except PathProblem as exc:
            self.error(path, str(exc))


def _kind(raw: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(raw), type(raw).__name__
    )


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


# --------------------------------------------------------------------------
# sections

TOP_KEYS = ("version", "image", "matrix", "base_images", "layers", "tags", "verify", "sources", "vulnerabilities")


def _image(ctx: Ctx, raw: Any) -> ImageSpec:
    p: KeyPath = ("image",)
    d = ctx.mapping(raw, p, ("repository", "registry", "user", "uid", "labels"))
    repo = ctx.checked(ctx.string(d.get("repository"), p + ("repository",), "imagesmith/pytorch") or "",
                       p + ("repository",), grammar.repository)
    registry = ctx.string(d.get("registry"), p + ("registry",))
    if registry is not None:
        ctx.checked(registry, p + ("registry",), grammar.registry_host)
    if len(f"{registry}/{repo}" if registry else repo) > 255:
        ctx.error(p + ("repository",), "registry/repository is over 255 characters, the limit of an image name; shorten it")
    return ImageSpec(
        repository=repo,
        registry=registry,
        user=ctx.checked(ctx.string(d.get("user"), p + ("user",), "ml") or "ml", p + ("user",), grammar.user_name),
        uid=ctx.integer(d.get("uid"), p + ("uid",), 1000, 1, 65535),
        labels=_pairs(ctx, d.get("labels"), p + ("labels",), grammar.label_key),
    )


def _pairs(ctx: Ctx, raw: Any, path: KeyPath, key_check: grammar.Check) -> tuple[tuple[str, str], ...]:
    """A mapping of the user's own keys (env names, label keys) to free text, both checked."""
    out = []
    for key, value in ctx.open_mapping(raw, path).items():
        ctx.checked(key, path + (key,), key_check)
        text = ctx.string(value, path + (key,), "")
        out.append((key, ctx.checked("" if text is None else text, path + (key,), grammar.text)))
    return tuple(sorted(out))


def _axis(ctx: Ctx, d: Mapping[str, Any], axis: str) -> list[tuple[str, KeyPath]]:
    path: KeyPath = ("matrix", axis)
    values = ctx.strings(d.get(axis), path)
    return [(v, path + (i,)) for i, v in enumerate(values)]


def _cell_entries(ctx: Ctx, raw: Any, key: str) -> list[tuple[dict[str, str], KeyPath]]:
    """The entries of include/exclude; one whose platform is not one imagesmith builds is reported and dropped."""
    path: KeyPath = ("matrix", key)
    if raw is None:
        return []
    if not isinstance(raw, list):
        ctx.error(path, f"expected a list of cells, got {_kind(raw)}")
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


def _platform_axis(ctx: Ctx, raw: Any) -> list[tuple[Platform, KeyPath]]:
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


def _expand(ctx: Ctx, raw: Any) -> list[Cell]:
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


def _include(ctx: Ctx, cells: _Cells, entry: dict[str, str], path: KeyPath, cudnn: str | None,
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


def _check_cell(ctx: Ctx, cell: Cell, layers: Sequence[Layer], base_images: Mapping[str, str]) -> None:
    where = cell.where()
    release = ctx.kb.resolve_torch(cell.torch)
    if release is None:
        known = ", ".join(ctx.kb.torch_lines())
        ctx.error(where.get("torch", ("matrix",)), f"unknown torch {cell.torch}; known: {known}{_did_you_mean(cell.torch, ctx.kb.torch_lines())}")
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


def _check_cuda(ctx: Ctx, cell: Cell, release: compat.TorchRelease, where: Mapping[str, KeyPath]) -> None:
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


def _check_python(ctx: Ctx, cell: Cell, release: compat.TorchRelease, where: Mapping[str, KeyPath]) -> None:
    if cell.python not in release.python:
        ctx.error(where.get("python", ("matrix",)),
                  f"torch {release.line} has no wheels for Python {cell.python}; it has {', '.join(release.python)}")


def _check_os(ctx: Ctx, cell: Cell, where: Mapping[str, KeyPath], layers: Sequence[Layer], base_images: Mapping[str, str]) -> None:
    path = where.get("os", ("matrix",))
    info = ctx.kb.os.get(cell.os)
    if info is None:
        ctx.error(path, f"unknown os {cell.os!r}; known: {', '.join(ctx.kb.os)}{_did_you_mean(cell.os, ctx.kb.os)}")
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


def _check_platform(ctx: Ctx, cell: Cell, release: compat.TorchRelease, where: Mapping[str, KeyPath]) -> None:
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


def _layers(ctx: Ctx, raw: Any) -> tuple[Layer, ...]:
    d = ctx.open_mapping(raw if raw is not None else {"base": {}}, ("layers",))
    layers = {name: _layer(ctx, name, spec) for name, spec in d.items()}
    if "base" not in layers:
        ctx.error(("layers",), "a matrix needs a layer named base (OS + Python + torch)")
        return tuple(layers.values())
    return _ordered(ctx, layers)


def _layer(ctx: Ctx, name: str, raw: Any) -> Layer:
    p: KeyPath = ("layers", name)
    d = ctx.mapping(raw, p, LAYER_KEYS)
    if not re.fullmatch(r"[a-z][a-z0-9-]{0,30}", name):
        ctx.error(p, f"layer name {name!r} must be lowercase letters, digits and '-' (it goes into tags)")
    parent = ctx.string(d.get("parent"), p + ("parent",), BUILTIN_PARENTS.get(name, "base"))
    packages = ctx.strings(d.get("packages"), p + ("packages",))
    for i, spec in enumerate(packages):
        _check_package(ctx, spec, p + ("packages", i))
    req = ctx.local_file(d.get("requirements"), p + ("requirements",), REQUIREMENTS_LIMIT)
    pins = _check_requirements(ctx, req[0].name, req[2], p + ("requirements",)) if req else ()
    template, template_path = _template(ctx, d.get("template"), p + ("template",))
    return Layer(
        name=name,
        parent=None if name == "base" else parent,
        packages=packages,
        apt=ctx.checked_strings(d.get("apt"), p + ("apt",), grammar.debian_package),
        requirements=req[0] if req else None,
        requirements_data=req[1] if req else b"",
        requirements_pins=pins,
        env=_pairs(ctx, d.get("env"), p + ("env",), grammar.env_name),
        base_from=ctx.choice(d.get("from"), p + ("from",), BASE_FROM, "os"),
        toolchain=ctx.boolean(d.get("toolchain"), p + ("toolchain",), name == "base"),
        cuda_libs=_cuda_libs(ctx, name, d.get("cuda_libs"), p + ("cuda_libs",)),
        template=template,
        template_path=template_path,
        jupyter=_jupyter(ctx, d.get("services"), p + ("services",)),
        sshd=_sshd(ctx, d.get("services"), p + ("services",)),
        when=_layer_when(ctx, d.get("when"), p + ("when",)),
    )


def _cuda_libs(ctx: Ctx, name: str, raw: Any, path: KeyPath) -> str:
    if raw is not None and name != "base":
        ctx.error(path, "cuda_libs belongs to the base layer (where torch and its CUDA wheels are installed)")
    return str(ctx.choice(raw, path, CUDA_LIBS, "shared"))


def _layer_when(ctx: Ctx, raw: Any, path: KeyPath) -> tuple[tuple[str, tuple[str, ...]], ...]:
    d = ctx.mapping(raw, path, (*AXES, PLATFORM))
    out = tuple((axis, ctx.strings(d[axis], path + (axis,))) for axis in AXES if axis in d)
    if PLATFORM in d:
        out += ((PLATFORM, ctx.checked_strings(d[PLATFORM], path + (PLATFORM,), platforms.problem)),)
    return out


def _template(ctx: Ctx, raw: Any, path: KeyPath) -> tuple[str, Path | None]:
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


def _check_package(ctx: Ctx, spec: str, path: KeyPath) -> None:
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


def _check_requirements(ctx: Ctx, name: str, text: str, path: KeyPath) -> tuple[str, ...]:
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


def _check_requirement(ctx: Ctx, name: str, n: int, spec: str, path: KeyPath) -> list[str]:
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


def _jupyter(ctx: Ctx, raw: Any, path: KeyPath) -> Jupyter:
    services = ctx.mapping(raw, path, ("jupyter", "sshd"))
    p = path + ("jupyter",)
    d = ctx.mapping(services.get("jupyter"), p, ("enabled", "bind", "port", "version"))
    bind = ctx.string(d.get("bind"), p + ("bind",), "127.0.0.1") or "127.0.0.1"
    version = ctx.string(d.get("version"), p + ("version",), Jupyter.version) or Jupyter.version
    return Jupyter(
        enabled=ctx.boolean(d.get("enabled"), p + ("enabled",), bool(d)),
        bind=ctx.checked(bind, p + ("bind",), grammar.listen_address),
        port=ctx.integer(d.get("port"), p + ("port",), 8888, 1, 65535),
        version=ctx.checked(version, p + ("version",), grammar.python_version),
    )


def _sshd(ctx: Ctx, raw: Any, path: KeyPath) -> Sshd:
    services = raw if isinstance(raw, dict) else {}
    p = path + ("sshd",)
    d = ctx.mapping(services.get("sshd"), p, ("enabled", "port"))
    return Sshd(
        enabled=ctx.boolean(d.get("enabled"), p + ("enabled",), bool(d)),
        port=ctx.integer(d.get("port"), p + ("port",), 2222, 1024, 65535),
    )


def _ordered(ctx: Ctx, layers: dict[str, Layer]) -> tuple[Layer, ...]:
    """Parents before children, each generation in the matrix's order (stdlib graphlib);
    unknown parents and cycles are errors (a cycle leaves no layer order: nothing to build)."""
    for layer in layers.values():
        if layer.parent is not None and layer.parent not in layers:
            ctx.error(("layers", layer.name, "parent"),
                      f"parent {layer.parent!r} is not a layer here; layers: {', '.join(layers)}{_did_you_mean(layer.parent, layers)}")
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


def _tags(ctx: Ctx, raw: Any) -> TagPolicy:
    p: KeyPath = ("tags",)
    d = ctx.mapping(raw, p, ("immutable", "floating", "prerelease"))
    immutable = ctx.string(d.get("immutable"), p + ("immutable",), TagPolicy.immutable) or TagPolicy.immutable
    _check_template(ctx, immutable, p + ("immutable",))
    floating = _floating(ctx, d.get("floating"), p + ("floating",))
    return TagPolicy(immutable, floating, ctx.boolean(d.get("prerelease"), p + ("prerelease",), False))


def _floating(ctx: Ctx, raw: Any, path: KeyPath) -> tuple[FloatingTag, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        ctx.error(path, f"expected a list of tags, got {_kind(raw)}")
        return ()
    out = []
    for i, item in enumerate(raw):
        entry = {"tag": item} if isinstance(item, str) else ctx.mapping(item, path + (i,), ("tag", "when"))
        template = ctx.string(entry.get("tag"), path + (i, "tag"), "") or ""
        _check_template(ctx, template, path + (i,))
        when = ctx.mapping(entry.get("when"), path + (i, "when"), AXES + ("layer",))
        out.append(FloatingTag(template, tuple(sorted((k, str(v)) for k, v in when.items()))))
    return tuple(out)


def _check_template(ctx: Ctx, template: str, path: KeyPath) -> None:
    fields = re.findall(r"{([^{}]*)}", template)
    for name in fields:
        if name not in TAG_FIELDS:
            ctx.error(path, f"unknown tag field {{{name}}}{_did_you_mean(name, TAG_FIELDS)}; fields: {', '.join(TAG_FIELDS)}")
    sample = re.sub(r"{[^{}]*}", "x", template)
    if not template or not DOCKER_TAG.match(sample):
        ctx.error(path, f"{template!r} cannot make a Docker tag ([A-Za-z0-9_.-], not starting with . or -, at most 128 characters)")


def _verify(ctx: Ctx, raw: Any) -> VerifyPolicy:
    p: KeyPath = ("verify",)
    d = ctx.mapping(raw, p, ("tier", "gpus", "require_gpu", "shm_size", "memory", "timeout", "thresholds"))
    thresholds = ctx.open_mapping(d.get("thresholds"), p + ("thresholds",))
    return VerifyPolicy(
        tier=ctx.choice(d.get("tier"), p + ("tier",), TIERS, "quick"),
        gpus=_gpus(ctx, d.get("gpus"), p + ("gpus",)),
        require_gpu=None if d.get("require_gpu") is None else ctx.boolean(d["require_gpu"], p + ("require_gpu",), True),
        shm_size=ctx.string(d.get("shm_size"), p + ("shm_size",), "8g") or "8g",
        memory=ctx.string(d.get("memory"), p + ("memory",)),
        timeout_s=ctx.integer(d.get("timeout"), p + ("timeout",), 900, 10, 86400),
        thresholds={k: _threshold(ctx, v, p + ("thresholds", k)) for k, v in thresholds.items()},
    )


GPU_LIST = re.compile(r"^(all|none|(\d+|(GPU|MIG)-[A-Za-z0-9-]+)(,(\d+|(GPU|MIG)-[A-Za-z0-9-]+))*)$")


def _gpus(ctx: Ctx, raw: Any, path: KeyPath) -> str:
    value = (ctx.string(raw, path, "all") or "all").replace(" ", "")
    if not GPU_LIST.match(value):
        ctx.error(path, f"{value!r} is not all, none or a list of GPU indexes/UUIDs such as 0,1")
        return "all"
    return value


THRESHOLD_KEYS = ("baseline", "fail_fraction", "warn_fraction")


def _threshold(ctx: Ctx, raw: Any, path: KeyPath) -> dict[str, float]:
    # the keys the payload reads (verify/imagesmith_payload/config.py THRESHOLD_KEYS): a key it would refuse is refused here
    d = ctx.mapping(raw, path, THRESHOLD_KEYS)
    out = {}
    for key, value in d.items():
        try:
            out[key] = float(value)
        except (TypeError, ValueError):
            ctx.error(path + (key,), f"expected a number, got {value!r}")
    return out


SOURCE_KEYS = ("torch_index_url", "index_url", "extra_index_urls", "find_links", "trusted_hosts",
               "ca_bundle", "proxy", "network", "credentials", "advisories")


def _sources(ctx: Ctx, raw: Any) -> Sources:
    p: KeyPath = ("sources",)
    d = ctx.mapping(raw, p, SOURCE_KEYS)
    proxy = ctx.mapping(d.get("proxy"), p + ("proxy",), ("http", "https", "no_proxy"))
    ca = _ca_bundle(ctx, d.get("ca_bundle"), p + ("ca_bundle",))
    return Sources(
        torch_index_url=_index(ctx, d.get("torch_index_url"), p + ("torch_index_url",)),
        index_url=_index(ctx, d.get("index_url"), p + ("index_url",)),
        extra_index_urls=_indexes(ctx, d.get("extra_index_urls"), p + ("extra_index_urls",)),
        find_links=_indexes(ctx, d.get("find_links"), p + ("find_links",)),
        trusted_hosts=ctx.checked_strings(d.get("trusted_hosts"), p + ("trusted_hosts",), grammar.host),
        ca_bundle=ca[0] if ca else None,
        ca_bundle_data=ca[1] if ca else b"",
        http_proxy=_optional(ctx, proxy.get("http"), p + ("proxy", "http"), grammar.proxy_url),
        https_proxy=_optional(ctx, proxy.get("https"), p + ("proxy", "https"), grammar.proxy_url),
        no_proxy=_optional(ctx, proxy.get("no_proxy"), p + ("proxy", "no_proxy"), grammar.no_proxy),
        network=ctx.choice(d.get("network"), p + ("network",), NETWORK_MODES, "default"),
        credentials=_credentials(ctx, d.get("credentials"), p + ("credentials",)),
        advisories=_advisories(ctx, d.get("advisories"), p + ("advisories",)),
    )


def _advisories(ctx: Ctx, raw: Any, path: KeyPath) -> tuple[str, ...]:
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


VULN_KEYS = ("threshold", "allow", "max_age_days")


def _vulnerabilities(ctx: Ctx, raw: Any) -> vulns.Policy:
    p: KeyPath = ("vulnerabilities",)
    d = ctx.mapping(raw, p, VULN_KEYS)
    age = d.get("max_age_days")
    return vulns.Policy(
        threshold=ctx.choice(d.get("threshold"), p + ("threshold",), vulns.THRESHOLDS, "critical"),
        allow=_allowances(ctx, d.get("allow"), p + ("allow",)),
        max_age_days=None if age is None else ctx.integer(age, p + ("max_age_days",), 0, 1, 3650),
    )


ADVISORY_ID = re.compile(r"[A-Za-z][A-Za-z0-9]*(-[A-Za-z0-9.:_]+)+")


def _allowances(ctx: Ctx, raw: Any, path: KeyPath) -> tuple[vulns.Allowance, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        ctx.error(path, f"expected a list of allowances ({{id, reason, expires}}), got {_kind(raw)}")
        return ()
    out = []
    for i, item in enumerate(raw):
        d = ctx.mapping(item, path + (i,), ("id", "reason", "expires"))
        ident = ctx.string(d.get("id"), path + (i, "id")) or ""
        reason = (ctx.string(d.get("reason"), path + (i, "reason")) or "").strip()
        expires = _date(ctx, d.get("expires"), path + (i, "expires"))
        if not ADVISORY_ID.fullmatch(ident) or len(ident) > 64:
            ctx.error(path + (i, "id"), f"{printable(ident)} is not an advisory id (GHSA-xxxx-xxxx-xxxx, CVE-2025-32434, PYSEC-2024-1, DSA-5514-1)")
        if not reason:
            ctx.error(path + (i, "reason"), "an allowance needs a reason: why this image may ship with the advisory")
        else:
            ctx.checked(reason, path + (i, "reason"), grammar.text)
        if expires is not None and ident and reason:
            out.append(vulns.Allowance(ident, reason, expires))
    return tuple(out)


def _date(ctx: Ctx, raw: Any, path: KeyPath) -> dt.date | None:
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


def _optional(ctx: Ctx, raw: Any, path: KeyPath, check: grammar.Check) -> str | None:
    text = ctx.string(raw, path)
    return None if text is None else ctx.checked(text, path, check)


def _index(ctx: Ctx, raw: Any, path: KeyPath) -> str | None:
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


def _indexes(ctx: Ctx, raw: Any, path: KeyPath) -> tuple[str, ...]:
    values = ctx.strings(raw, path)
    return tuple(_index(ctx, v, path + (i,)) or v for i, v in enumerate(values))


def _ca_bundle(ctx: Ctx, raw: Any, path: KeyPath) -> tuple[Path, bytes] | None:
    found = ctx.local_file(raw, path, CA_LIMIT)
    if found and "-----BEGIN CERTIFICATE-----" not in found[2]:
        ctx.error(path, f"{raw} holds no PEM certificate (-----BEGIN CERTIFICATE-----); give the CA bundle of your proxy")
        return None
    return (found[0], found[1]) if found else None


def _check_torch_index(ctx: Ctx, sources: Sources) -> None:
    cuda_variants = sorted(v for v in ctx.variants if v != "cpu")
    url = sources.torch_index_url
    if url and "{variant}" not in url and len(cuda_variants) > 1:
        ctx.warn(("sources", "torch_index_url"), f"has no {{variant}} but the matrix needs {', '.join(cuda_variants)} wheels, "
                 "which live on different indexes; write e.g. https://mirror.example.com/whl/{variant}")


def _credentials(ctx: Ctx, raw: Any, path: KeyPath) -> tuple[Credential, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        ctx.error(path, f"expected a list of credentials, got {_kind(raw)}")
        return ()
    out = []
    for i, item in enumerate(raw):
        d = ctx.mapping(item, path + (i,), ("host", "username_env", "password_env", "file"))
        host = ctx.string(d.get("host"), path + (i, "host"))
        if not host:
            ctx.error(path + (i,), "a credential needs host: the index host it is sent to")
            continue
        if "file" not in d and "password_env" not in d:
            ctx.error(path + (i,), "a credential needs password_env (an environment variable) or file (holding user:password)")
        out.append(Credential(ctx.checked(host, path + (i, "host"), grammar.host),
                              _optional(ctx, d.get("username_env"), path + (i, "username_env"), grammar.env_name),
                              _optional(ctx, d.get("password_env"), path + (i, "password_env"), grammar.env_name),
                              _secret_file(ctx, d.get("file"), path + (i, "file"))))
    return tuple(out)


def _secret_file(ctx: Ctx, raw: Any, path: KeyPath) -> Path | None:
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


def _base_images(ctx: Ctx, raw: Any) -> dict[str, str]:
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


def _base_ref(ctx: Ctx, ref: Any, path: KeyPath) -> str:
    image = ctx.checked(ctx.string(ref, path) or "", path, grammar.image_reference)
    if not grammar.image_reference(image):
        _check_base_ref(ctx, image, path)
    return image


def base_image_for(base_images: Mapping[str, str], os_key: str, platform: str) -> str | None:
    """The plain base an OS key names for ``platform``: its per-platform entry, else its one for every platform."""
    return base_images.get(f"{os_key}@{platform}") or base_images.get(os_key)


def _check_base_ref(ctx: Ctx, ref: str, path: KeyPath) -> None:
    parsed = ImageRef.maybe(ref)
    if parsed is None or parsed.pinned or ref.startswith("sha256:"):
        return
    if not parsed.tag or parsed.tag == "latest":
        ctx.warn(path, f"{ref!r} is a mutable tag; pin it by digest ({parsed.name}@sha256:...) or a dated tag so every build starts from the same bytes")


# --------------------------------------------------------------------------
# entry points


def load(path: str | Path, kb: compat.KnowledgeBase | None = None, allowed_roots: Sequence[Path] = ()) -> Matrix:
    """Load and validate ``path``; raise ValidationError listing every error.
    Paths it names must stay inside its folder or one of ``allowed_roots``."""
    file = Path(path)
    try:
        data = read_limited(file, MAX_BYTES)
    except TextProblem as exc:
        raise ValidationError(problems=[Problem(f"{file.name}: {exc.why}")]) from None
    except OSError as exc:
        raise ValidationError(problems=[Problem(f"cannot read {file}: {exc.strerror}")]) from None
    return parse(data, file, kb or compat.load(), allowed_roots)


def parse(text: str | bytes, file: Path, kb: compat.KnowledgeBase, allowed_roots: Sequence[Path] = ()) -> Matrix:
    raw, lines = load_located(text, file.name)
    ctx = Ctx(file.resolve(), lines, kb, Roots.of(file, allowed_roots))
    d = ctx.mapping(raw, (), TOP_KEYS)
    if d.get("version") is not None and str(d["version"]) != str(SCHEMA_VERSION):
        ctx.error(("version",), f"schema version {d['version']} is not supported; this imagesmith reads version {SCHEMA_VERSION}")
    if "matrix" not in d:
        ctx.error((), "no matrix: section; it holds the axes torch, cuda, python, os")
    matrix = _build(ctx, d)
    if ctx.errors():
        raise ValidationError(problems=ctx.errors() + ctx.warnings())
    return matrix


def _build(ctx: Ctx, d: Mapping[str, Any]) -> Matrix:
    layers = _layers(ctx, d.get("layers"))
    base_images = _base_images(ctx, d.get("base_images"))
    cells = _unique(ctx, _expand(ctx, d.get("matrix")))
    for cell in cells:
        _check_cell(ctx, cell, layers, base_images)
    sources = _sources(ctx, d.get("sources"))
    _check_torch_index(ctx, sources)
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


def _unique(ctx: Ctx, cells: Sequence[Cell]) -> list[Cell]:
    seen: dict[tuple[str, ...], Cell] = {}
    for cell in cells:
        key = _key(cell)
        if key in seen:
            ctx.warn(("matrix", "include"), f"cell {cell.label()} is listed twice; it is built once")
        seen.setdefault(key, cell)
    return list(seen.values())


def sort_cells(cells: Iterable[Cell]) -> list[Cell]:
    """A stable order for cells: torch, cuda, python, os by version."""
    def key(c: Cell) -> tuple[Any, ...]:
        cuda = (0,) if c.cuda == "cpu" else version_key(c.cuda)
        return (version_key(c.torch), cuda, version_key(c.python), c.os, list(Platform).index(c.platform))
    return sorted(cells, key=key)

