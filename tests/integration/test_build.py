"""imagesmith build against the real engine: DAG order, cache, failure
isolation, in-image measurement, credentials, interruption.

These build a real torch 2.13.0+cpu base (from the local wheel) on a Debian
base made by imagesmith's bootstrap; docker's layer cache makes every build
after the first in a session quick.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagesmith.edges.engine import Engine
from imagesmith.model import matrix, plan
from imagesmith.model.buildreport import BuildReport
from imagesmith.stages.building import build, buildreport
from tests.conftest import LOCAL_ROOTS
from tests.integration.engine_fixtures import (
    CountingEngine,
    MatrixFactory,
    containers_of_repository,
    no_stray_containers,
)

pytestmark = pytest.mark.integration
ALLOW = {"IMAGESMITH_ALLOW_ROOT": os.pathsep.join(map(str, LOCAL_ROOTS))}  # the wheel folder and CA of LOCAL_SOURCES
DATE = "20261130"

LAYERS = """\
layers:
  base: {toolchain: false}
  tools: {parent: base, packages: ["tabulate==0.9.0"]}
  broken: {parent: base, packages: ["imagesmith-no-such-package==9.9.9"]}
  leaf: {parent: broken, packages: ["six==1.17.0"]}
"""


def run_build(path: Path, engine: Engine, out: Path, **select: tuple[str, ...]) -> BuildReport:
    m = matrix.load(path, allowed_roots=LOCAL_ROOTS)
    p = plan.expand(m, DATE).select(**select)
    return build.Builder(p, m, engine, out, jobs=2).run()


def statuses(report: BuildReport) -> dict[str, str]:
    return {r.target.rsplit("-", 1)[1]: r.status for r in report.results}


def test_dag_cache_failure_isolation_and_partial_rebuild(build_matrix: MatrixFactory, engine: Engine, tmp_path: Path) -> None:
    path = build_matrix(LAYERS)
    out = tmp_path / "build"
    first = run_build(path, engine, out)
    assert statuses(first) == {"base": "built", "tools": "built", "broken": "failed", "leaf": "skipped"}
    base, tools = first.results[0], first.results[1]
    assert base.facts and base.facts["torch"].startswith("2.13.0") and base.facts["os"] == "debian12"
    assert base.facts["uid"] == 1000 and not base.mismatches
    assert tools.facts and tools.facts["packages"]["tabulate"] == "0.9.0"
    # the child was built FROM its parent's image ID, not from a tag
    assert base.image_id in [h["Id"] for h in engine.history(tools.image_id or "")]
    summary = "\n".join(buildreport.failure_summary(first))
    assert f"Dockerfile: {out}/2.13.0-cpu-py3.11-debian12-broken/Dockerfile" in summary
    assert "imagesmith-no-such-package" in summary and "|" in summary
    report = json.loads((out / "report.json").read_text())
    assert report["schema"] == "imagesmith.build-report/1" and report["ok"] is False

    counting = CountingEngine(engine)
    second = run_build(path, counting, out)  # type: ignore[arg-type]
    assert statuses(second) == {"base": "cached", "tools": "cached", "broken": "failed", "leaf": "skipped"}
    assert [r.image_id for r in second.results[:2]] == [base.image_id, tools.image_id]
    assert counting.calls["build"] == 1 and counting.calls["run"] == 0  # only broken again; nothing measured again

    build_matrix(LAYERS.replace('"tabulate==0.9.0"', '"tabulate==0.9.0", "six==1.17.0"'))
    third = run_build(path, engine, out, layers=("tools",))
    assert statuses(third) == {"base": "cached", "tools": "built"}
    assert third.results[0].image_id == base.image_id and third.results[1].image_id != tools.image_id


def test_a_child_that_would_change_its_parent_fails(build_matrix: MatrixFactory, engine: Engine, tmp_path: Path) -> None:
    path = build_matrix("layers:\n  base: {toolchain: false}\n  downgrade: {parent: base, packages: ['typing-extensions==4.0.0']}\n")
    report = run_build(path, engine, tmp_path / "build")
    assert statuses(report) == {"base": "cached", "downgrade": "failed"} or statuses(report)["downgrade"] == "failed"
    log = Path(report.results[1].log).read_text()
    assert "this layer would change its parent's packages: typing-extensions" in log


SLOW = """\
ARG PARENT_IMAGE={{ parent_image }}
FROM ${PARENT_IMAGE}
RUN sleep 12
{% include "partials/labels.j2" %}
"""


def test_sigterm_stops_the_build_leaves_no_container_and_the_next_run_resumes(
        build_matrix: MatrixFactory, engine: Engine, tmp_path: Path) -> None:
    path = build_matrix("layers:\n  base: {toolchain: false}\n  slow: {parent: base, template: slow.Dockerfile.j2}\n",
                        files={"slow.Dockerfile.j2": SLOW})
    out = tmp_path / "build"
    run_build(path, engine, out, layers=("base",))  # the base from cache or a first build
    before = set(containers_of_repository(engine, build_matrix.repository))
    cmd = [sys.executable, "-m", "imagesmith.cli", "build", "--matrix", str(path), "--out", str(out), "--quiet",
           *(f"--allow-root={root}" for root in LOCAL_ROOTS)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = out / "2.13.0-cpu-py3.11-debian12-slow" / "build.log"
    deadline = time.monotonic() + 600  # a hang guard: the step starts when the engine gets to it
    while time.monotonic() < deadline and "Running in" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.2)
    assert "Running in" in log.read_text(), "the slow step never started"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=600)  # a hang guard only: what is judged is below
    assert proc.returncode != 0 and "interrupted" in err, err
    deadline = time.monotonic() + 600  # the engine removes the step's container once the build's client went
    while no_stray_containers(engine, before, build_matrix.repository) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert no_stray_containers(engine, before, build_matrix.repository) == []
    # the CLI stopped the build, it did not wait for it: the slow step never finished and no image was made
    after_step = log.read_text().split("Running in", 1)[1]
    assert not re.search(r"^ ---> [0-9a-f]{12}$", after_step, re.M) and "Successfully built" not in after_step, after_step
    assert engine.image(f"{build_matrix.repository}:2.13.0-cpu-py3.11-debian12-slow") is None
    report = run_build(path, engine, out)
    assert statuses(report) == {"base": "cached", "slow": "built"}


def test_a_successful_run_prunes_builder_stages_and_superseded_cache(build_matrix: MatrixFactory, engine: Engine,
                                                                     tmp_path: Path) -> None:
    path = build_matrix("layers:\n  base: {toolchain: false}\n  tools: {packages: ['tabulate==0.9.0']}\n")
    first = run_build(path, engine, tmp_path / "build")
    old_tools = first.results[1]
    assert engine.image(f"imagesmith-cache:{old_tools.context_hash.split(':')[1]}") is not None
    build_matrix("layers:\n  base: {toolchain: false}\n  tools: {packages: ['tabulate==0.9.0', 'six==1.17.0']}\n")
    m = matrix.load(path, allowed_roots=LOCAL_ROOTS)
    builder = build.Builder(plan.expand(m, DATE), m, engine, tmp_path / "build", jobs=2)
    second = builder.run()
    assert second.ok and second.results[1].image_id != old_tools.image_id
    assert engine.image(f"imagesmith-cache:{old_tools.context_hash.split(':')[1]}") is None  # superseded here, used nowhere else: gone
    assert engine.image(f"imagesmith-cache:{second.results[0].context_hash.split(':')[1]}") is not None  # kept
    assert builder.stages and all(engine.image(stage) is None for stage in builder.stages)  # the builder stages it made


def test_cli_build_exit_codes_and_json(build_matrix: MatrixFactory, engine: Engine, tmp_path: Path) -> None:
    path = build_matrix("layers:\n  base: {toolchain: false}\n")
    out = tmp_path / "build"
    ok = subprocess.run([sys.executable, "-m", "imagesmith.cli", "build", "-m", str(path), "--out", str(out), "--json"],
                        capture_output=True, text=True, env=os.environ | {"NO_COLOR": "1"} | ALLOW)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["targets"][0]["status"] in ("built", "cached")
    bad = subprocess.run([sys.executable, "-m", "imagesmith.cli", "build", "-m", str(path), "--only", "nothing-matches"],
                         capture_output=True, text=True, env=os.environ | ALLOW)
    assert bad.returncode == 1 and bad.stderr.strip() == "error: no target matches --only nothing-matches --layer"


def test_the_full_build_takes_the_steps_of_its_stage_made_ahead(engine: Engine, debian_base: str, tmp_path: Path) -> None:
    """A shared-CUDA base's builder stage is made ahead, beside another target whose first steps are the same: the
    classic builder takes the newest image of an identical step, the other target's, whose next step differs, and
    ran the stage's pip install again. Given the stage made ahead (cache_from), the full build runs none of it."""
    nonce = os.urandom(6).hex()
    stage = f"FROM {debian_base} AS builder\nRUN echo {nonce} > /shared\n"
    ahead, beside = tmp_path / "ahead", tmp_path / "beside"
    (ahead / "stubs").mkdir(parents=True)
    beside.mkdir()
    (ahead / "stubs" / "METADATA").write_text("Name: stub\n")
    (ahead / "Dockerfile").write_text(stage + "COPY stubs/ /stubs/\nRUN cat /stubs/METADATA > /made\n"
                                      f"FROM {debian_base}\nCOPY --from=builder /made /made\n")
    (beside / "Dockerfile").write_text(stage + "RUN echo other > /made\n")
    tags = [f"imagesmith-test/ahead-{nonce}:{name}" for name in ("stage", "beside", "full", "plain")]
    try:
        made = engine.build(ahead, tags[0], {}, {}, None, lambda line: None, target="builder")
        assert made.image_id and not made.error, made.error
        # built beside it: its own image of the identical RUN, the newer one (what two builds at once make)
        list(engine.client.api.build(path=str(beside), tag=tags[1], nocache=True, rm=True, decode=True))
        plain = engine.build(ahead, tags[3], {}, {}, None, lambda line: None)  # what the full build did before
        assert plain.cached_steps < 3 and plain.stages, plain  # the stage's last RUN ran again
        full = engine.build(ahead, tags[2], {}, {}, None, lambda line: None, cache_from=[tags[0]])
        assert full.image_id and not full.error, full.error
        assert full.cached_steps == 3 and full.stages == [], full  # RUN, COPY, RUN: none of the stage ran again
    finally:
        for tag in tags:
            engine.remove_image(tag)
