"""Verify what users run: the image's ENTRYPOINT run or named, --expect against labels, the verdict's words.
An engine double stands where verify_image takes its engine (tests/unit/test_verify_container.py shows it)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from click.testing import CliRunner

from imagesmith.cli.verify import print_verdict
from imagesmith.edges.engine import ImageConfig, RunResult, RunSpec
from imagesmith.model import compat
from imagesmith.resources import payload_module
from imagesmith.stages import verify
from tests.unit.test_verify_container import INFO, OPTIONS, EngineDouble, answer

ENTRY = ["/entry.sh"]
BYPASSED = ('the payload ran python3 in place of the image\'s ENTRYPOINT ["/usr/bin/tini", "--"]: an environment it '
            'sets up (PATH, a venv, conda) was not used; --through-entrypoint runs the payload through it')


def run(options: verify.VerifyOptions, tamper: Any = lambda r: r) -> tuple[dict[str, Any], RunSpec]:
    engine = EngineDouble(lambda spec: RunResult(0, answer(spec, tamper), ""))
    report = verify.verify_image(engine, "img:1", options, compat.load()).report
    return report, engine.specs[0]


def test_through_entrypoint_runs_the_payload_as_the_entrypoints_arguments() -> None:
    report, spec = run(dataclasses.replace(OPTIONS, through_entrypoint=True))
    assert spec.entrypoint == ["/usr/bin/tini", "--"]
    assert spec.command[:2] == ["python3", f"{verify.IN_CONTAINER}/run.py"] and "--emit-marker" in spec.command
    assert report["notes"] == ['the payload ran through the image\'s ENTRYPOINT ["/usr/bin/tini", "--"] (--through-entrypoint)']
    assert verify.VerifyOutcome(report).ok  # the nonce and the schema-checked report are unchanged


def test_by_default_the_entrypoint_is_bypassed_and_the_verdict_says_so() -> None:
    def no_torch(report: dict[str, Any]) -> dict[str, Any]:
        report["checks"][0].update(status="fail", detail="torch is not importable: No module named 'torch'")
        report["summary"] = payload_module("report").summarize(report["checks"])
        return report
    report, spec = run(dataclasses.replace(OPTIONS, only=("versions.torch",)), no_torch)
    assert spec.entrypoint is None
    assert report["notes"] == [BYPASSED]
    assert report["checks"][0]["detail"] == f"torch is not importable: No module named 'torch' ({BYPASSED})"


@pytest.mark.parametrize("labels, expect, notes", [
    ({"io.imagesmith.torch": "2.10.0"}, {"torch": "2.9.1"},
     ["--expect torch=2.9.1 overrides the image's label io.imagesmith.torch (torch 2.10.0): the checks compare "
      "against the --expect value; one of the two is wrong"]),
    ({"io.imagesmith.torch": "2.9.1"}, {"torch": "2.9.1"}, []),
    ({"io.imagesmith.packages": "einops==0.8.0 numpy==2.1"}, {"einops": "0.7"},
     ["--expect einops=0.7 overrides the image's label io.imagesmith.packages (einops 0.8.0): the checks compare "
      "against the --expect value; one of the two is wrong"]),
    ({}, {"cuda": "12.8"}, []),
])
def test_expect_against_labels_names_both_values(labels: dict[str, str], expect: dict[str, str], notes: list[str]) -> None:
    assert verify.expect_conflicts(labels, expect) == notes


@pytest.mark.parametrize("status, ok, line", [
    ("pass", True, "verified reg/img@sha256:d"),
    ("fail", False, "FAILED verification: reg/img@sha256:d"),
])
def test_the_verdict_never_says_verified_for_a_failed_run(status: str, ok: bool, line: str) -> None:
    report = {"summary": {"ok": ok}, "state": "complete", "image": {"digests": ["reg/img@sha256:d"]},
              "checks": [{"id": "a", "status": status}]}
    runner = CliRunner()
    with runner.isolation() as (out, _err, _):
        print_verdict(report)
    assert out.getvalue().decode().splitlines() == [line]


def test_the_engine_keeps_the_images_entrypoint_only_when_asked() -> None:
    from imagesmith.edges.engine import Engine
    from imagesmith.model.engines import EngineKind

    made: list[tuple[Any, Any]] = []

    class Containers:
        def create(self, image: str, command: Any, entrypoint: Any, **_: Any) -> Any:
            made.append((entrypoint, command))
            return type("Container", (), {"attrs": {"HostConfig": {}}})()

    engine = Engine.__new__(Engine)
    engine._client, engine._kind = type("Client", (), {"containers": Containers()})(), EngineKind()
    engine._create(RunSpec(image="i", command=["python3", "run.py"]))
    engine._create(RunSpec(image="i", command=["python3", "run.py"], entrypoint=ENTRY))
    assert made == [(["python3"], ["run.py"]), (ENTRY, ["python3", "run.py"])]


def test_the_config_carries_the_images_user_for_the_non_root_verdict() -> None:
    image = dataclasses.replace(INFO.config, user="")
    config = verify.payload_config({}, verify.VerifyOptions(require_non_root=True), compat.load(), None, image)
    assert config["image"]["user"] == "" and config["security"] == {"expect_non_root": True}
    assert json.dumps(ImageConfig().entrypoint) == "[]"


def test_the_table_names_the_engine_and_a_cut_failure_is_printed_whole() -> None:
    from imagesmith.cli.verify import DETAIL_WIDTH, print_verify
    from imagesmith.model import engines

    why = ("the container did not start: starting a container of sha256:abc: Podman's default ulimits exceed this host's hard "
           f"limits (runc could not set nofile: error setting rlimit type 7: operation not permitted); {engines.FIX_PODMAN_ULIMITS}")
    report = {"summary": {"ok": False, "fail": 1}, "state": "complete", "tier": "quick", "image": {"ref": "img:1", "digests": []},
              "engine": {"name": "Podman", "version": "4.3.1", "api": "1.41", "rootless": False},
              "checks": [{"id": "payload.start", "status": "fail", "detail": why}, {"id": "b", "status": "pass", "detail": "x" * 200}]}
    runner = CliRunner()
    with runner.isolation() as (out, err, _):
        print_verify(report, None)
    assert "verify img:1 on Podman 4.3.1 (quick)" in out.getvalue().decode()
    assert len(why) > DETAIL_WIDTH and err.getvalue().decode().splitlines()[0] == f"payload.start: {why}"  # only the failure
    assert "x" * 200 not in err.getvalue().decode()
