"""Runs never leave a misleading report behind, and checkouts sharing one engine
never evict each other's cache.

Real engine, real builds (torch 2.13.0+cpu base from the local wheel, tiny
child layers), the CLI in a subprocess where signals matter.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from imagesmith.edges.engine import Engine
from imagesmith.model import matrix, plan
from imagesmith.model.buildreport import BuildReport
from imagesmith.stages.building import build
from tests.conftest import LOCAL_ROOTS
from tests.integration.engine_fixtures import MatrixFactory
from tests.unit.trustkeys import verifier

pytestmark = pytest.mark.integration
DATE = "20261130"
ALLOW = [arg for root in LOCAL_ROOTS for arg in ("--allow-root", str(root))]  # the local wheels and CA bundle
SLOW = """\
ARG PARENT_IMAGE={{ parent_image }}
FROM ${PARENT_IMAGE}
RUN sleep 20
{% include "partials/labels.j2" %}
"""


def run_build(path: Path, engine: Engine, out: Path) -> BuildReport:
    m = matrix.load(path, allowed_roots=LOCAL_ROOTS)
    return build.Builder(plan.expand(m, DATE), m, engine, out, jobs=2).run()


def statuses(report: BuildReport) -> dict[str, str]:
    return {r.target.rsplit("-", 1)[1]: r.status for r in report.results}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "imagesmith.cli", *args], capture_output=True, text=True, timeout=900)


def wait_for(predicate: Callable[[], bool], seconds: float = 900) -> bool:  # a hang guard: nothing is judged by how long it took
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_sigint_mid_build_leaves_an_interrupted_report_that_nothing_reads_as_success(
        build_matrix: MatrixFactory, engine: Engine, tmp_path: Path) -> None:
    layers = "layers:\n  base: {toolchain: false}\n"
    path = build_matrix(layers)
    out = tmp_path / "build"
    ok = run_build(path, engine, out)  # the last run's report: complete, ok
    assert ok.ok and json.loads((out / "report.json").read_text())["state"] == "complete"

    build_matrix(layers + "  slow: {parent: base, template: slow.Dockerfile.j2}\n", files={"slow.Dockerfile.j2": SLOW})
    proc = subprocess.Popen([sys.executable, "-m", "imagesmith.cli", "build", "-m", str(path), "--out", str(out), "-q", *ALLOW],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = out / "2.13.0-cpu-py3.11-debian12-slow" / "build.log"
    assert wait_for(lambda: log.exists() and "Running in" in log.read_text()), "the slow step never started"
    running = json.loads((out / "report.json").read_text())
    assert running["state"] == "running" and running["ok"] is False  # the old ok report was replaced at the start
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err, err

    report = json.loads((out / "report.json").read_text())
    assert (report["state"], report["interrupted_by"], report["ok"]) == ("interrupted", "SIGINT", False)
    assert {t["target"].rsplit("-", 1)[1]: t["status"] for t in report["targets"]} == {"base": "cached", "slow": "cancelled"}

    verify = cli("verify", "--build-report", str(out / "report.json"), "-q")
    assert verify.returncode == 1 and "is from a run that did not complete (state: interrupted, SIGINT)" in verify.stderr, verify.stderr
    verifier(tmp_path / "keys")
    publish = cli("publish", "-m", str(path), "--out", str(out), "--trust-policy", str(tmp_path / "keys" / "trust-policy.yaml"),
                  "-q", *ALLOW)
    assert publish.returncode == 1 and "is from a run that did not complete (state: interrupted, SIGINT)" in publish.stderr
    summary = cli("report", str(out / "report.json"))
    assert summary.returncode == 0 and summary.stdout.startswith(
        "## ❌ imagesmith build: not a result: the run did not complete (build interrupted (SIGINT))"), summary.stdout
    # report text is inert: escaped where it would be markup only, so plain parentheses stay as written


LAYERS = "layers:\n  base: {toolchain: false}\n  tools: {packages: [%s]}\n"


def checkout(engine: Engine, base: str, folder: Path, repository: str, packages: str) -> Path:
    """One checkout of the matrix: its own folder (matrix, build output), the same image repository."""
    folder.mkdir()
    return MatrixFactory(engine, base, folder, repository)(LAYERS % packages)


def test_two_checkouts_sharing_an_engine_never_evict_each_other(build_matrix: MatrixFactory, engine: Engine,
                                                                debian_base: str, tmp_path: Path) -> None:
    main = checkout(engine, debian_base, tmp_path / "main", build_matrix.repository, "'tabulate==0.9.0'")
    copy = tmp_path / "copy"  # the same matrix, copied
    shutil.copytree(main.parent, copy)
    branch = checkout(engine, debian_base, tmp_path / "branch", build_matrix.repository, "'tabulate==0.9.0', 'six==1.17.0'")

    first = run_build(main, engine, main.parent / "build")
    assert first.ok and statuses(first)["tools"] in ("built", "cached")
    assert statuses(run_build(copy / "matrix.yaml", engine, copy / "build")) == {"base": "cached", "tools": "cached"}
    assert statuses(run_build(branch, engine, branch.parent / "build"))["tools"] == "built"
    for _ in range(2):  # alternating builds: each finds its own entries
        assert statuses(run_build(main, engine, main.parent / "build")) == {"base": "cached", "tools": "cached"}
        assert statuses(run_build(branch, engine, branch.parent / "build")) == {"base": "cached", "tools": "cached"}
    assert statuses(run_build(copy / "matrix.yaml", engine, copy / "build")) == {"base": "cached", "tools": "cached"}


def test_the_cli_build_with_verify_writes_a_run_report_that_says_its_state(build_matrix: MatrixFactory, tmp_path: Path) -> None:
    path = build_matrix("layers:\n  base: {toolchain: false}\nverify: {tier: quick, gpus: none}\n")
    out = tmp_path / "build"
    done = cli("build", "-m", str(path), "--out", str(out), "--verify", "-q", *ALLOW)
    assert done.returncode == 0, done.stderr
    run = json.loads((out / "run-report.json").read_text())
    target = "2.13.0-cpu-py3.11-debian12-base"
    assert run["state"] == "complete" and run["build"]["state"] == "complete" and run["verify"][target]["state"] == "complete"
    assert json.loads((out / target / "verify.json").read_text())["state"] == "complete"
    assert os.path.exists(out / "report.json")
