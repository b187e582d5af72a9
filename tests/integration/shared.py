"""What the integration tier makes once per test run, however many pytest-xdist workers share the run.

`make test` runs the integration tier on two workers (pytest-xdist); a session fixture runs once per worker.
What is slow to make (the debootstrapped bases, the torch CPU base imagesmith builds, the CUDA cells) is made by
:func:`once`: the first worker that asks makes it under a file lock in a folder of the whole run and writes its
record (JSON: image IDs, references); a worker that asks later waits for the lock and reads the record. Nothing
is made twice, and a failure is recorded too, so a second worker fails at once with the first one's message
instead of spending the same minutes again.

What a make will leave is written down before it starts (``cleanup``); :func:`finish` removes it when the run ends, in the process that
started the run (the xdist controller, or the one pytest process without xdist), after every worker is done:
no worker removes an image another one may still be using. ``IMAGESMITH_TEST_KEEP=1`` keeps it all (the next
run rebuilds anyway: each run bootstraps its own Debian bases).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

ENV_DIR = "IMAGESMITH_TEST_SHARED"  # the run's folder of records and locks
ENV_RUN = "IMAGESMITH_TEST_RUN"  # the run's id: in every tag and label the tier makes
OWNED = pytest.StashKey[str]()


def start(config: pytest.Config) -> None:
    """In the process that starts a run (not an xdist worker, not a pytest started by a test): the run's folder
    and id, in the environment the workers inherit."""
    if hasattr(config, "workerinput") or os.environ.get(ENV_DIR):
        return
    os.environ[ENV_DIR] = tempfile.mkdtemp(prefix="imagesmith-test-run-")
    os.environ[ENV_RUN] = uuid.uuid4().hex[:8]
    config.stash[OWNED] = os.environ[ENV_DIR]


def run_id() -> str:
    return os.environ.setdefault(ENV_RUN, uuid.uuid4().hex[:8])


def folder() -> Path:
    path = os.environ.get(ENV_DIR)
    if not path:  # the integration tier imported outside a run that tests/conftest.py started
        os.environ[ENV_DIR] = path = tempfile.mkdtemp(prefix="imagesmith-test-run-")
    return Path(path)


class Locked:
    """An exclusive lock on ``folder()/<name>.lock`` for as long as the ``with`` lasts."""

    def __init__(self, name: str) -> None:
        self.path = folder() / f"{name}.lock"

    def __enter__(self) -> Locked:
        self.fh = self.path.open("a")
        fcntl.flock(self.fh, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


def once(name: str, make: Callable[[], dict[str, Any]], cleanup: dict[str, list[str]]) -> dict[str, Any]:
    """``make()``'s record (a JSON object), made by the first caller of the run and read by every later one.
    ``cleanup`` (see :func:`finish`) is written down before ``make`` starts, so what an interrupted or failed
    make left goes at the end of the run too."""
    record = folder() / f"{name}.json"
    with Locked(name):
        if record.exists():
            done = json.loads(record.read_text())
            if "error" in done:
                pytest.fail(f"{name}, made once for the whole run, failed in another worker: {done['error']}", pytrace=False)
            return dict(done["value"])
        _write(folder() / f"{name}.cleanup", {"cleanup": cleanup, "made_ns": time.time_ns()})
        try:
            value = make()
        except Exception as exc:
            _write(record, {"error": f"{type(exc).__name__}: {exc}"[:4000]})
            raise
        _write(record, {"value": value})
        return value


def _write(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def cleanups() -> Iterator[dict[str, list[str]]]:
    """What every make of this run (done, failed or interrupted) asked to remove, the newest first (what was built
    on an older one goes before it)."""
    made = [json.loads(path.read_text()) for path in folder().glob("*.cleanup")]
    for doc in sorted(made, key=lambda doc: doc["made_ns"], reverse=True):
        yield doc["cleanup"]


def finish(config: pytest.Config) -> None:
    """At the end of the run, in the process that started it: remove what every record's ``cleanup`` names
    (``repositories``: every image a matrix of the tier made there, see engine_fixtures.remove_repository;
    ``images``: references removed with their untagged parents; ``trees``: an image of the run and every image
    built on it, such as what an interrupted build left on a base), then the run's folder."""
    owned = config.stash.get(OWNED, None)
    if owned is None or os.environ.get(ENV_DIR) != owned:
        return
    try:
        made = list(cleanups())
        if made and not os.environ.get("IMAGESMITH_TEST_KEEP"):
            from imagesmith.edges.engine import Engine
            from tests.integration.engine_fixtures import remove_repository, remove_with_descendants

            engine = Engine()
            for cleanup in made:
                for repository in cleanup.get("repositories", ()):
                    remove_repository(engine, repository)
                for ref in cleanup.get("images", ()):
                    try:
                        engine.remove_image(ref, force=True)
                    except Exception:  # noqa: BLE001 - gone already, or still used by a container: leave it
                        pass
                for ref in cleanup.get("trees", ()):
                    info = engine.image(ref)
                    if info is not None:
                        remove_with_descendants(engine, info.id)
    finally:
        shutil.rmtree(owned, ignore_errors=True)
