"""The matrix's ``layers:`` section, one parser per key: parents (in order), packages, apt, requirements (each line
checked), env, from, toolchain, cuda_libs, template, services (jupyter, sshd) and when."""

from __future__ import annotations

import graphlib
import re
from functools import partial
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from imagesmith.model import grammar
from imagesmith.model import platform as platforms
from imagesmith.model.located import KeyPath
from imagesmith.model.matrix.context import (
    BASE_FROM,
    CUDA_LIBS,
    KB_PINNED,
    REQUIREMENTS_LIMIT,
    TEMPLATE_LIMIT,
    MatrixCtx,
    pairs,
)
from imagesmith.model.matrix.records import (
    AXES,
    BUILTIN_PARENTS,
    PLATFORM,
    Jupyter,
    Layer,
    Sshd,
)
from imagesmith.model.validation import Ctx, Derived, Key, Table, checks, did_you_mean

LAYER_KEYS = ("parent", "packages", "apt", "requirements", "env", "from", "toolchain", "cuda_libs", "template", "services", "when")


def read_layers(ctx: MatrixCtx, raw: Any) -> tuple[Layer, ...]:
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
        env=s("env", pairs, grammar.env_name),
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
