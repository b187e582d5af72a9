"""Which way GPUs reach verify's container, and the container spec that takes it.

:func:`plan` asks the one pure choice (:func:`imagesmith.model.gpupath.choose`) with what ``docker info`` says,
where the engine is (``DOCKER_HOST``), and, only when the choice needs them, the CDI specs of this host, read by
:func:`read_specs` through the strict loader. :func:`apply` turns a path into the :class:`RunSpec` fields the
engine applies (``gpus``, ``cdi_devices``, ``devices``, ``mounts``, ``links``, ``environment``). verify and
doctor call these; nothing here imports docker.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from imagesmith.edges import elf
from imagesmith.edges.protocols import RunSpec
from imagesmith.errors import UserError
from imagesmith.model import cdi, gpupath, schemas
from imagesmith.model.gpupath import EngineGpu, GpuPath, Lookup
from imagesmith.model.loader import CAPS, LoadError, check_schema, parse_json, read_confined
from imagesmith.model.located import load_located

NUMBERS = ("major", "minor", "fileMode", "uid", "gid", "timeout")  # YAML keeps whole numbers as text; the schema wants numbers
MAX_SPEC_FILES = 256  # spec files read per folder: more is not a CDI folder


@dataclass(frozen=True)
class GpuHost:
    """What verify and doctor ask this host about GPU paths: its CDI folders, its environment (DOCKER_HOST) and
    how a library's SONAME is read. Tests pass their own."""

    cdi_dirs: tuple[str, ...] = cdi.DEFAULT_DIRS
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    soname: Callable[[str], str | None] = elf.soname


@dataclass(frozen=True)
class Planned:
    path: GpuPath
    registry: cdi.Registry = cdi.Registry()  # noqa: RUF009 (frozen: one shared empty registry is safe)


# -- reading the specs ----------------------------------------------------------------------------------------------


def spec_files(folder: Path) -> list[Path]:
    """The spec files of one folder (``.json``, ``.yaml``, ``.yml``; no recursion), by name. A folder that
    is missing is none; one that cannot be listed is a LoadError."""
    try:
        entries = sorted(folder.iterdir()) if folder.is_dir() else []
    except OSError as exc:
        raise LoadError(str(folder), f"cannot be listed ({exc.strerror})", fix="check its permissions") from None
    found = [p for p in entries if p.suffix in cdi.SUFFIXES and not _is_dir(p)]
    if len(found) > MAX_SPEC_FILES:
        raise LoadError(str(folder), f"holds {len(found):,} spec files, over the {MAX_SPEC_FILES} imagesmith reads",
                        fix="keep the CDI specs of this host there, and nothing else")
    return found


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def read_spec(path: Path, priority: int = 0) -> cdi.Spec:
    """One spec file, confined to its folder, bounded, strict (YAML through the hardened loader), schema-valid,
    then :func:`imagesmith.model.cdi.parse`: any refusal is a LoadError or (YAML) a ValidationError, exit 1,
    naming the file and why."""
    data = read_confined(path, cap=CAPS[schemas.CDI_SPEC])
    if path.suffix == ".json":
        doc, lines = parse_json(data, str(path), cdi.FIX), None
    else:  # a refusal here is a ValidationError at FILE:LINE
        doc, lines = load_located(data, str(path))
        doc = _numbers(doc)
    check_schema(doc, schemas.CDI_SPEC, str(path), cdi.FIX, lines=lines)
    return cdi.parse(doc, str(path), priority, lines)


def _numbers(value: Any) -> Any:
    """The YAML values the schema wants as whole numbers (the hardened loader keeps them as text), as numbers."""
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: _numbers(v) for k, v in value.items()}
    for key in NUMBERS:
        if isinstance(out.get(key), str) and _digits(out[key]):
            out[key] = int(out[key])
    if isinstance(out.get("additionalGids"), list):
        out["additionalGids"] = [int(g) if isinstance(g, str) and _digits(g) else g for g in out["additionalGids"]]
    return out


def _digits(text: str) -> bool:
    body = text[1:] if text.startswith("-") else text
    return 0 < len(body) <= 18 and body.isascii() and body.isdigit()


def read_specs(dirs: Sequence[str]) -> cdi.Registry:
    """Every spec of ``dirs``, in the CDI spec's order (a later folder wins for the same device)."""
    return cdi.Registry(tuple(read_spec(p, i) for i, d in enumerate(dirs) for p in spec_files(Path(d))))


def lookup(names: tuple[str, ...], dirs: Sequence[str]) -> tuple[Lookup, cdi.Registry]:
    """Whether the specs of ``dirs`` define ``names``; a hostile spec is a LoadError, never a quiet no."""
    registry = read_specs(dirs)
    if not registry.specs:
        return Lookup(names, tuple(dirs), problem=gpupath.no_spec(tuple(dirs))), registry
    try:
        files = registry.resolve(names).files
    except UserError as exc:
        return Lookup(names, tuple(dirs), problem=str(exc)), registry
    return Lookup(names, tuple(dirs), files), registry


# -- choosing and applying --------------------------------------------------------------------------------------------


def engine_gpu(info: Mapping[str, Any], host: GpuHost) -> EngineGpu:
    return EngineGpu.of(info, host.environ.get("DOCKER_HOST", ""))


def plan(info: Mapping[str, Any], runtime: str, gpus: str, host: GpuHost | None = None) -> Planned:
    """The GPU path for ``--gpu-runtime runtime --gpus gpus`` on the engine whose ``docker info`` is ``info``.
    The specs are read only when the choice needs them: from the engine's own CDI folders when it has them,
    else from ``host.cdi_dirs``."""
    host = host or GpuHost()
    engine = engine_gpu(info, host)
    if not gpupath.wants_specs(runtime, gpus, engine):
        return Planned(gpupath.choose(runtime, gpus, engine, Lookup(cdi.qualified_names(gpus))))
    found, registry = lookup(cdi.qualified_names(gpus), engine.cdi_dirs or host.cdi_dirs)
    return Planned(gpupath.choose(runtime, gpus, engine, found), registry)


def apply(spec: RunSpec, path: GpuPath, registry: cdi.Registry, image_env: Mapping[str, str],
          soname: Callable[[str], str | None] = elf.soname) -> tuple[RunSpec, tuple[str, ...]]:
    """``spec`` set up for ``path``, and the notes of what was translated or left out. ``spec.gpus`` is kept
    for ``nvidia`` only; the CDI paths give the devices by name (``cdi-engine``) or as the specs' own edits
    (``cdi-translated``: device nodes, bind mounts, environment, links)."""
    if path.path == gpupath.NVIDIA:
        return spec, ()
    if path.path == gpupath.CDI_ENGINE:
        return replace(spec, gpus="none", cdi_devices=path.devices), ()
    if path.path == gpupath.NONE:
        return replace(spec, gpus="none"), ()
    done = cdi.translate(registry.resolve(path.devices).edits, image_env, soname)
    return replace(spec, gpus="none", devices=done.devices, mounts=done.mounts, links=done.links,
                   environment=dict(done.environment) | dict(spec.environment)), done.notes


def note(path: GpuPath) -> str | None:
    """The report's note for a CDI path (none for --gpus and CPU mode: the mode line says those)."""
    if path.path == gpupath.CDI_TRANSLATED:
        return (f"GPUs by CDI, translated by imagesmith from {cdi.listed(path.specs)} ({', '.join(path.devices)}): "
                "the engine has no CDI; gpu_path.notes says what was emulated and what was not applied")
    if path.path == gpupath.CDI_ENGINE:
        return f"GPUs by CDI, resolved by the engine ({', '.join(path.devices)})"
    return None
