"""Paths named in a matrix stay inside its folder (or a root allowed on the
command line), after symlinks; files are regular and bounded in size.

``matrix validate``, ``render`` and ``build`` all load the matrix through
:func:`imagesmith.model.matrix.load`, which applies these rules and keeps the bytes
it checked, so what is rendered is what was validated.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from imagesmith.errors import UserError
from imagesmith.model.located import TextProblem, decode, printable, read_limited


@dataclass(frozen=True)
class Roots:
    """Where paths named in a matrix may lead: its folder, plus allowed extras."""

    base: Path
    extra: tuple[Path, ...] = ()

    @classmethod
    def of(cls, matrix_file: Path, extra: Sequence[Path] = ()) -> "Roots":
        try:
            return cls(_resolved(matrix_file).parent, tuple(_resolved(Path(p).expanduser()) for p in extra))
        except PathProblem as exc:
            raise UserError(f"--allow-root or the matrix path: {exc}") from None

    def inside(self, path: Path) -> bool:
        return any(path == root or root in path.parents for root in (self.base, *self.extra))

    def resolve(self, text: str) -> Path:
        """``text`` relative to the matrix folder, symlinks resolved (PathProblem for a loop)."""
        return _resolved(self.base / Path(text).expanduser())


class PathProblem(Exception):
    """Why a path named in a matrix is refused; the message never quotes the file."""


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (RuntimeError, OSError, ValueError) as exc:  # a loop of symbolic links, a name too long
        raise PathProblem(f"{printable(str(path))} cannot be resolved ({getattr(exc, 'strerror', None) or exc})") from None


def confined(roots: Roots, text: str, kind: str = "file") -> Path:
    """The resolved path of ``text`` if it exists inside the roots and is a
    regular file (``kind="file"``) or a folder (``kind="folder"``)."""
    try:
        path = roots.resolve(text)
        if not path.exists():
            raise PathProblem(f"{text}: no such {kind} (looked at {path})")
        if not roots.inside(path):
            raise PathProblem(f"{text} resolves to {path}, outside {roots.base}; keep it in the matrix's folder, "
                              f"or allow its folder on the command line: --allow-root {path if kind == 'folder' else path.parent}")
        if kind == "folder" and not path.is_dir():
            raise PathProblem(f"{text} is not a folder")
        if kind == "file" and not path.is_file():
            raise PathProblem(f"{text} is not a regular file")
    except (OSError, ValueError) as exc:  # a name too long, a loop of links, ...
        raise PathProblem(f"{printable(text)} cannot be used as a path ({getattr(exc, 'strerror', None) or exc})") from None
    return path


def read_text(path: Path, text: str, limit: int) -> tuple[bytes, str]:
    """The bytes of a confined file and their UTF-8 text."""
    try:
        data = read_limited(path, limit)
        return data, decode(data)
    except TextProblem as exc:
        where = f" (line {exc.line})" if exc.line else ""
        raise PathProblem(f"{text} {exc.why}{where}") from None
    except OSError as exc:
        raise PathProblem(f"{text}: cannot read it ({exc.strerror})") from None
