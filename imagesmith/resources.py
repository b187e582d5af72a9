"""Where the shipped templates/ and verify/ folders are.

They live at the top of the repository (one source of truth) and a wheel
carries them inside the package as ``_templates`` and ``_verify``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

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


PAYLOAD_PACKAGE = "imagesmith_payload"


def payload_module(name: str) -> ModuleType:
    """A module of the payload package (standard library only), imported from
    :func:`payload_dir`: the host judges what the payload reports with the
    payload's own schema, check registry and parsers (one source of truth)."""
    if PAYLOAD_PACKAGE not in sys.modules:
        init = payload_dir() / PAYLOAD_PACKAGE / "__init__.py"
        spec = importlib.util.spec_from_file_location(PAYLOAD_PACKAGE, init, submodule_search_locations=[str(init.parent)])
        if spec is None or spec.loader is None:
            raise ImportError(f"the verification payload is missing at {init}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[PAYLOAD_PACKAGE] = module
        spec.loader.exec_module(module)
    return importlib.import_module(f"{PAYLOAD_PACKAGE}.{name}")
