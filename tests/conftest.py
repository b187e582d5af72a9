"""Shared fixtures. Docker-backed fixtures live in tests/integration/conftest.py."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any, Protocol

import pytest

from tests.integration import shared, timeline
from tests.integration.disk import WORKER_KEY, DiskWatch

ROOT = Path(__file__).resolve().parent.parent
# examples/local.yaml names the host's wheel folder and CA bundle: the roots
# `make release` allows on the command line (--allow-root).
LOCAL_ROOTS = (Path("/opt/wheels"), Path("/etc/ssl/certs"))


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C means KeyboardInterrupt here, as in a terminal. A shell that starts the suite in the
    background (`make test &`, nohup) leaves SIGINT ignored, children inherit that, and the tests
    of what Ctrl-C does (a push, a build, a fleet run) would then see nothing happen."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    shared.start(config)


@pytest.hookimpl(trylast=True)  # after the session fixtures' teardown (an interrupted run's too)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The end of the run: what the integration tier made once for all its workers goes (tests/integration/shared.py)."""
    shared.finish(session.config)


# Under pytest-xdist the integration tier's disk samples come from each worker (tests/integration/disk.py).
_WORKERS_DISK = DiskWatch()
_WORKERS_TIMELINE = timeline.Timeline()


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` keeps the integration tier's groups of modules on one worker each (tests/integration/groups.py)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from tests.integration.groups import make_scheduler

    return make_scheduler(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    doc = getattr(node, "workeroutput", {}).get(WORKER_KEY)
    if doc:
        _WORKERS_DISK.merge(doc)
    spans = getattr(node, "workeroutput", {}).get(timeline.WORKER_KEY)
    if spans:
        _WORKERS_TIMELINE.merge(spans)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if _WORKERS_DISK.paths:
        terminalreporter.section("disk (every worker)")
        for line in _WORKERS_DISK.lines():
            terminalreporter.write_line(line)
    if _WORKERS_TIMELINE.spans:
        terminalreporter.section("timeline (every worker, modules by start; the longest busy time is the critical path)")
        for line in _WORKERS_TIMELINE.lines():
            terminalreporter.write_line(line)


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
