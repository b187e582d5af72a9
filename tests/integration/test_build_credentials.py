"""Credentials for a private index never reach an image, a log or a report, nor the proxy's CA bundle a layer: a real build against the real engine
whose sources name an index behind basic auth (the planted wheel of ``private_index``), reached through
imagesmith's authenticating proxy on loopback.

Its own module: these sources differ from every other build's, so its torch CPU base builds cold whatever the
run's layer cache holds, and it runs on whichever worker is free (tests/integration/groups.py), not after the
builds that share that cache.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from imagesmith.edges.engine import Engine
from imagesmith.model import matrix, plan
from imagesmith.model.buildreport import BuildReport
from imagesmith.stages.building import build
from tests.conftest import LOCAL_ROOTS
from tests.integration.engine_fixtures import MatrixFactory, PrivateIndex, docker_save_contains

pytestmark = pytest.mark.integration
DATE = "20261130"


def run_build(path: Path, engine: Engine, out: Path) -> BuildReport:
    m = matrix.load(path, allowed_roots=LOCAL_ROOTS)
    return build.Builder(plan.expand(m, DATE), m, engine, out, jobs=2).run()


def test_credentials_never_reach_an_image_a_log_or_a_report(build_matrix: MatrixFactory, engine: Engine,
                                                            private_index: PrivateIndex, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_INDEX_USER", private_index.user)
    monkeypatch.setenv("TEST_INDEX_PASSWORD", private_index.password)
    sources = LOCAL_SOURCES_WITH_PRIVATE.format(port=private_index.port)
    path = build_matrix("layers:\n  base: {toolchain: false}\n  private: {parent: base, packages: ['imagesmith-planted==1.0']}\n", extra=sources)
    out = tmp_path / "build"
    report = run_build(path, engine, out)
    assert [r.status for r in report.results] in (["cached", "built"], ["built", "built"]), [r.error for r in report.results]
    assert report.results[1].facts and report.results[1].facts["packages"]["imagesmith-planted"] == "1.0"
    assert private_index.authorized_requests >= 2  # the proxy authenticated for the build
    raw = f"{private_index.user}:{private_index.password}"
    needles = [private_index.password, raw, base64.b64encode(raw.encode()).decode()]
    # the CA bundle: the step that fetched, used and deleted it is in the history; no layer holds the file (a tar
    # member's name is NUL-padded, the history's text is not)
    used, held = "/tmp/imagesmith-ca.pem", "tmp/imagesmith-ca.pem\x00"
    for r in report.results:
        found = docker_save_contains(r.image_id or "", [*needles, used, held])
        assert found == [used], f"{r.target}: {found}"
    texts = [p.read_text(errors="replace") for p in out.rglob("*") if p.is_file()]
    assert all(n not in t for n in needles for t in texts), "credential found in a log, report or context"


LOCAL_SOURCES_WITH_PRIVATE = """\
sources:
  torch_index_url: https://pypi.org/simple
  index_url: https://pypi.org/simple
  extra_index_urls: ["http://localhost:{port}/simple"]
  find_links: [/opt/wheels]
  ca_bundle: /etc/ssl/certs/ca-certificates.crt
  network: host
  credentials:
    - {{host: localhost, username_env: TEST_INDEX_USER, password_env: TEST_INDEX_PASSWORD}}
"""

