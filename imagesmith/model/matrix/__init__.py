"""matrix.yaml: load and validate it into frozen records (pure but for reading the file).

The public face of the matrix: :func:`load` and :func:`parse` return a :class:`Matrix`
or raise ValidationError listing every problem of the file (``file:line key.path``), warnings
(legal but suspicious input) with a fix hint. The records live in
:mod:`~imagesmith.model.matrix.records`, one parser per section in
:mod:`~imagesmith.model.matrix.sections`, on the toolkit fleet.yaml shares
(:mod:`imagesmith.model.validation`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from imagesmith.errors import Problem, ValidationError
from imagesmith.model import compat
from imagesmith.model.located import MAX_BYTES, TextProblem, load_located, read_limited
from imagesmith.model.matrix.context import MatrixCtx
from imagesmith.model.matrix.records import Matrix
from imagesmith.model.matrix.sections import SCHEMA_VERSION, TOP_KEYS, build
from imagesmith.model.paths import Roots

__all__ = ["Matrix", "load", "parse"]


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
    ctx = MatrixCtx(file.resolve(), lines, kb, Roots.of(file, allowed_roots))
    d = ctx.mapping(raw, (), TOP_KEYS)
    if d.get("version") is not None and str(d["version"]) != str(SCHEMA_VERSION):
        ctx.error(("version",), f"schema version {d['version']} is not supported; this imagesmith reads version {SCHEMA_VERSION}")
    if "matrix" not in d:
        ctx.error((), "no matrix: section; it holds the axes torch, cuda, python, os")
    matrix = build(ctx, d)
    if ctx.errors():
        raise ValidationError(problems=ctx.errors() + ctx.warnings())
    return matrix
