"""Where the shipped templates/ and verify/ folders are.

They live at the top of the repository (one source of truth) and a wheel
carries them inside the package as ``_templates`` and ``_verify``.
"""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _find(packaged: str, top: str) -> Path:
    inside = _PKG / packaged
    return inside if inside.is_dir() else _PKG.parent / top


def templates_dir() -> Path:
    return _find("_templates", "templates")


def payload_dir() -> Path:
    return _find("_verify", "verify")


def data_file(name: str) -> Path:
    """A file shipped inside the package (``imagesmith/data/``): JSON schemas."""
    return _PKG / "data" / name
