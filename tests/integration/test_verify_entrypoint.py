"""verify --through-entrypoint against a real image whose ENTRYPOINT puts its environment on PATH.

A tiny image FROM the run's Debian 12 base (debootstrapped by imagesmith, as on a fresh machine; Debian's
python3, no torch): /entry.sh puts
/opt/envbin first on PATH, where python3 is a link to /usr/bin/python3, then exec "$@". The payload
records which python3 ran (environment.python_executable): the ENTRYPOINT's only when it ran through it.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from imagesmith.edges.engine import Engine
from imagesmith.stages import verify
from tests.integration.engine_fixtures import docker_build, left_containers

pytestmark = pytest.mark.integration
ENTRY = '#!/bin/sh\nexport PATH=/opt/envbin:$PATH\nexec "$@"\n'
OPTIONS = verify.VerifyOptions(tier="quick", gpus="none", timeout_s=300, only=("versions.python",), sample_gpus=False)


@pytest.fixture(scope="module")
def entry_image(engine: Engine, debian_base: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("entrypoint")
    (folder / "entry.sh").write_text(ENTRY)
    (folder / "entry.sh").chmod(0o755)  # COPY keeps the mode (the engine's builder has no --chmod)
    tag = docker_build(engine, f"""FROM {debian_base}
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends python3 >/dev/null && rm -rf /var/lib/apt/lists/*
RUN mkdir -p /opt/envbin && ln -s /usr/bin/python3 /opt/envbin/python3 && useradd -m -u 1000 user
COPY entry.sh /entry.sh
USER 1000
ENTRYPOINT ["/entry.sh"]
""", f"imagesmith-test/entrypoint:{uuid.uuid4().hex[:8]}", Path(folder))
    try:
        yield tag
    finally:
        engine.remove_image(tag)


def test_the_entrypoint_is_bypassed_by_default_and_named(engine: Engine, entry_image: str) -> None:
    outcome = verify.verify_image(engine, entry_image, OPTIONS, pull=False)
    assert outcome.ok, outcome.report["checks"]
    assert outcome.report["environment"]["python_executable"] == "/usr/bin/python3"
    assert outcome.report["notes"] == [
        'the payload ran python3 in place of the image\'s ENTRYPOINT ["/entry.sh"]: an environment it sets up (PATH, '
        'a venv, conda) was not used; --through-entrypoint runs the payload through it']
    assert left_containers(engine) == []


def test_through_entrypoint_runs_the_python_its_path_finds(engine: Engine, entry_image: str) -> None:
    outcome = verify.verify_image(engine, entry_image, dataclasses.replace(OPTIONS, through_entrypoint=True), pull=False)
    assert outcome.ok, outcome.report["checks"]  # the nonce and the schema-checked report, as without the flag
    assert outcome.report["environment"]["python_executable"] == "/opt/envbin/python3"
    assert outcome.report["notes"] == ['the payload ran through the image\'s ENTRYPOINT ["/entry.sh"] (--through-entrypoint)']
    assert left_containers(engine) == []
