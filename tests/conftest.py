"""Shared fixtures. Docker-backed fixtures live in tests/integration/conftest.py."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Protocol

import pytest

ROOT = Path(__file__).resolve().parent.parent
# examples/local.yaml names the host's wheel folder and CA bundle: the roots
# `make release` allows on the command line (--allow-root).
LOCAL_ROOTS = (Path("/opt/wheels"), Path("/etc/ssl/certs"))


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C means KeyboardInterrupt here, as in a terminal. A shell that starts the suite in the
    background (`make test &`, nohup) leaves SIGINT ignored, children inherit that, and the tests
    of what Ctrl-C does (a push, a build, a fleet run) would then see nothing happen."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


class WriteMatrix(Protocol):
    def __call__(self, text: str, name: str = "matrix.yaml", **files: str) -> Path: ...


@pytest.fixture()
def write_matrix(tmp_path: Path) -> WriteMatrix:
    """Write a matrix file (and optional side files) and return its path."""

    def write(text: str, name: str = "matrix.yaml", **files: str) -> Path:
        for rel, content in files.items():
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_text(content)
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    return write


@pytest.fixture(autouse=True)
def _no_site_kb(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests use the packaged knowledge base, never a developer's override."""
    monkeypatch.delenv("IMAGESMITH_COMPAT", raising=False)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", os.environ.get("SOURCE_DATE_EPOCH", "1796083200"))
