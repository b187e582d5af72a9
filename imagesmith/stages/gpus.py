"""The CDI specs of this host, read by :func:`read_specs` through the strict loader (confined, bounded, strict
YAML or JSON, schema-valid, then :func:`imagesmith.model.cdi.parse`). Nothing here imports docker.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any, Sequence

from imagesmith.model import cdi, schemas
from imagesmith.model.loader import CAPS, LoadError, check_schema, parse_json, read_confined
from imagesmith.model.located import load_located

NUMBERS = ("major", "minor", "fileMode", "uid", "gid", "timeout")  # YAML keeps whole numbers as text; the schema wants numbers
MAX_SPEC_FILES = 256  # spec files read per folder: more is not a CDI folder


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
