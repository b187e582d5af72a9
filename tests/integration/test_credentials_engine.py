"""verify --build-report through the real Docker engine: what dockerd sends a staging host read from
build.json. The recording registry of tests/unit/edges/test_credentials_http.py logs every Authorization header
the engine's pull sends; the staged image is never served, so each pull fails after its requests."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagesmith import pipeline
from imagesmith.edges.credentials import Declared, load_store
from imagesmith.edges.engine import Engine
from tests.unit.edges.test_credentials_http import basic, recorder, staged_artifact
from tests.unit.pipeline.test_pipeline_stages import OPTIONS, Recorder

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("declared, want", [
    (False, {None}),  # read from build.json only: dockerd is handed no login, whatever the store holds for that host
    (True, {None, basic("stg", "stg-pw")}),  # --stage declares it: its own login, and no other
])
def test_the_engine_pulls_a_staged_image_with_the_declared_login_only(tmp_path: Path, engine: Engine, declared: bool,
                                                                      want: set[str | None]) -> None:
    with recorder() as release, recorder() as stage:
        path = staged_artifact(tmp_path, release.host, stage.host)
        logins = tmp_path / "logins"
        logins.write_text(f"{stage.host} stg:stg-pw\n{release.host} rel:rel-pw\n")
        store = load_store(Declared(staging=stage.host if declared else None), {}, logins, {})
        done = pipeline.verify_builds(pipeline.read_builds([path]), tmp_path, OPTIONS, Recorder(), store, engine=engine)
    assert done.failed == [path.parent.name]  # the recorder serves no image
    assert stage.seen and stage.authorizations == want and release.seen == []
