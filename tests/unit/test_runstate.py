"""Reports that say their state (runstate), the readers that refuse incomplete runs
(pipeline, report), what the engine says about pushes and builds, and a registry's
own error answers: pure, no engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import requests

from imagesmith import pipeline, report, runstate
from imagesmith.edges import registry
from imagesmith.edges.engine import BuildOutcome, Engine, push_error, unreachable
from imagesmith.errors import UserError
from imagesmith.model.buildreport import REPORT_SCHEMA
from imagesmith.stages.building import cache
from tests.doubles import verify_report


def read(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def test_a_tracked_report_says_running_then_complete(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text('{"ok": true, "state": "complete"}')  # the last run's
    with runstate.Tracked(path, {"ok": False, "n": 0}) as tracked:
        assert read(path) == {"ok": False, "n": 0, "state": "running"}
        tracked.update({"ok": False, "n": 1})
        assert read(path)["n"] == 1
        tracked.complete({"ok": True, "n": 2})
    assert read(path) == {"ok": True, "n": 2, "state": "complete"}


@pytest.mark.parametrize("exc, why", [
    (KeyboardInterrupt(), "SIGINT"),
    (KeyboardInterrupt("signal 15"), "SIGTERM"),
    (UserError("base image missing"), "error: UserError: base image missing"),
])
def test_a_run_that_ends_early_says_interrupted_and_why(tmp_path: Path, exc: BaseException, why: str) -> None:
    path = tmp_path / "r.json"
    with pytest.raises(type(exc)), runstate.Tracked(path, {"ok": True}, lambda doc: doc | {"ok": False}):
        raise exc
    assert read(path) == {"ok": False, "state": "interrupted", "interrupted_by": why}


@pytest.mark.parametrize("doc, complete", [
    ({}, True),  # written before reports had a state: only ever at the end of a run
    ({"state": "complete"}, True),
    ({"state": "running"}, False),
    ({"state": "interrupted"}, False),
    ({"state": ["odd"]}, False),
])
def test_is_complete(doc: dict[str, Any], complete: bool) -> None:
    assert runstate.is_complete(doc) is complete


def build_report(state: str | None, **extra: Any) -> dict[str, Any]:
    doc = {"schema": REPORT_SCHEMA, "matrix": "m.yaml", "started_at": "t", "seconds": 1, "ok": True, "base_images": {},
           "targets": [{"target": "a-base", "status": "built", "image": "x:y", "image_id": "sha256:1"}]}
    return doc | ({"state": state} if state else {}) | extra


@pytest.mark.parametrize("state, message", [
    ("running", "is from a run that has not finished (state: running; still going, or killed without a trace)"),
    ("interrupted", "is from a run that did not complete (state: interrupted, SIGTERM)"),
])
def test_readers_refuse_an_incomplete_build(tmp_path: Path, state: str, message: str) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(build_report(state, interrupted_by="SIGTERM" if state == "interrupted" else None)))
    with pytest.raises(UserError) as err:
        pipeline.read_build(path)
    assert message in str(err.value) and f"run imagesmith build --out {tmp_path} again" in str(err.value)
    run = report.load(path)
    assert not run.ok and report.to_markdown(run).startswith(f"## ❌ imagesmith build: not a result: the run did not complete (build {state}")
    assert '<failure message="not a result: the run did not complete' in report.to_junit(run)


@pytest.mark.parametrize("state, ok", [("complete", True), ("running", False), ("interrupted", False)])
def test_a_verify_report_whose_run_did_not_complete_is_not_a_pass(state: str, ok: bool) -> None:
    from imagesmith.stages.verify import verify

    check = {"id": "torch.import", "status": "pass", "optional": False}
    report = {"schema": "imagesmith.verify-report/1", "summary": {"ok": True}, "checks": [check], "state": state}
    assert verify.VerifyOutcome(verify_report(report)).ok is ok


def test_a_run_report_is_written_at_once_and_as_it_goes(tmp_path: Path) -> None:
    (tmp_path / "run-report.json").write_text('{"state": "complete", "release": {"ok": true}}')
    with pipeline.RunReport(tmp_path) as run:
        assert read(tmp_path / "run-report.json")["state"] == "running"
        assert read(tmp_path / "run-report.json")["release"] is None
        run.built(build_report("complete"))
        verified = {"schema": "imagesmith.verify-report/1", "summary": {"ok": True}, "checks": [], "state": "complete"}
        run.verified("a-base", verify_report(verified))
        assert read(tmp_path / "run-report.json")["verify"] == {"a-base": verified}
        run.complete()
    assert read(tmp_path / "run-report.json")["state"] == "complete"
    assert report.parse(read(tmp_path / "run-report.json")).complete


def test_a_nested_incomplete_part_makes_the_run_incomplete() -> None:
    doc = {"schema": "imagesmith.run-report/1", "state": "complete", "build": build_report("interrupted", interrupted_by="SIGINT"),
           "verify": {}, "release": None}
    assert report.parse(doc).unfinished == ("build interrupted (SIGINT)",)


# -- the engine's words ------------------------------------------------------------------------


@pytest.mark.parametrize("message, status, transient", [
    ("received unexpected HTTP status: 500 Internal Server Error", 500, True),
    ("received unexpected HTTP status: 507 Insufficient Storage", 507, False),
    ("received unexpected HTTP status: 501 Not Implemented", 501, False),
    ('Get "http://127.0.0.1:5000/v2/": dial tcp 127.0.0.1:5000: connect: connection refused', None, True),
    ("unauthorized: authentication required", 401, False),
    ("denied: requested access to the resource is denied", 403, False),
    ("something else entirely", None, False),
])
def test_a_push_error_carries_the_status_it_quotes(message: str, status: int | None, transient: bool) -> None:
    err = push_error("reg:5000/a:b", message, {})
    assert (err.status, err.transient, err.said) == (status, transient, message)
    assert str(err).startswith(f"push reg:5000/a:b failed: {message} (")


def test_build_stages_this_build_made_are_remembered() -> None:
    lines = ["Step 1/6 : FROM base AS builder", " ---> 111111111111", "Step 2/6 : LABEL io.imagesmith.stage=builder",
             " ---> Using cache", " ---> 222222222222", "Step 3/6 : RUN make", " ---> Running in c", " ---> 333333333333",
             "Step 4/6 : FROM base", " ---> 111111111111", "Step 5/6 : COPY --from=builder /a /a", " ---> 444444444444",
             "Step 6/6 : FROM other AS unused", " ---> 555555555555"]
    outcome = BuildOutcome(image_id=None)
    for line in lines:
        Engine._build_event({"stream": line + "\n"}, outcome, lambda _: None)
    assert outcome.stages == ["333333333333", "444444444444"] and outcome.steps == 6 and outcome.cached_steps == 1
    cached = BuildOutcome(image_id=None)
    for line in lines[:3] + [" ---> Using cache", " ---> 222222222222", "Step 4/6 : FROM base"]:
        Engine._build_event({"stream": line + "\n"}, cached, lambda _: None)
    assert cached.stages == []  # a stage found in cache is another run's: never pruned here


@pytest.mark.parametrize("host, message", [
    ("tcp://10.0.0.9:2376", "cannot reach the Docker engine at DOCKER_HOST=tcp://10.0.0.9:2376 (Connection refused); start the "
                            "engine there, fix DOCKER_HOST, or unset it to use the local engine (unix:///var/run/docker.sock)"),
    ("", "cannot reach the Docker engine at unix:///var/run/docker.sock (Connection refused); start it "
         "(sudo systemctl start docker, or dockerd &) or set DOCKER_HOST"),
])
def test_a_dead_engine_names_docker_host(host: str, message: str) -> None:
    assert unreachable(host, "Connection refused") == message


def test_owners_are_checkouts() -> None:
    a = cache.owner_id(Path("/a/matrix.yaml"), Path("/a/build"))
    assert a == cache.owner_id(Path("/a/./matrix.yaml"), Path("/a/build/")) != cache.owner_id(Path("/b/matrix.yaml"), Path("/b/build"))
    assert cache.owner_tag("2.13.0-cpu-py3.11-debian12-base") == "2.13.0-cpu-py3.11-debian12-base"
    assert cache.owner_tag("x" * 200).startswith("t-") and len(cache.owner_tag("x" * 200)) == 42


# -- a registry's own answer ----------------------------------------------------------------------


def response(status: int, body: Any, reason: str = "") -> requests.Response:
    resp = requests.Response()
    resp.status_code, resp.reason = status, reason
    resp._content = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    return resp


FULL = {"errors": [{"code": "UNKNOWN", "message": "unknown error", "detail": {"DriverName": "filesystem", "Enclosed": {
    "Op": "write", "Path": "/var/lib/registry/docker/registry/v2/repositories/ml/x/_uploads/u/startedat", "Err": 28}}}]}


@pytest.mark.parametrize("resp, text, transient, storage", [
    (response(500, FULL, "Internal Server Error"),
     "UNKNOWN: unknown error (filesystem: write /var/lib/registry/docker/registry/v2/repositories/ml/x/_uploads/u/startedat: "
     "No space left on device (errno 28))", False, "no space left on device"),
    (response(500, {"errors": [{"code": "UNKNOWN", "message": "unknown error", "detail": "disk quota exceeded"}]}),
     "UNKNOWN: unknown error (disk quota exceeded)", False, "disk quota exceeded"),
    (response(507, "", "Insufficient Storage"), "Insufficient Storage", False, "insufficient storage"),
    (response(405, {"errors": [{"code": "UNSUPPORTED", "message": "The operation is unsupported."}]}),
     "UNSUPPORTED: The operation is unsupported.", False, None),
    (response(503, "<html>busy</html>", "Service Unavailable"), "Service Unavailable", True, None),
    (response(500, {"errors": [{"code": "UNKNOWN", "message": "unknown error"}]}), "UNKNOWN: unknown error", True, None),
    (response(429, {"errors": [{"code": "TOOMANYREQUESTS", "message": "slow down"}]}), "TOOMANYREQUESTS: slow down", True, None),
    (response(500, "{\"errors\": 3}", "Internal Server Error"), "{\"errors\": 3}", True, None),
])
def test_a_registrys_own_answer(resp: requests.Response, text: str, transient: bool, storage: str | None) -> None:
    answer = registry.answer_of(resp)
    assert (answer.text(), answer.transient, answer.storage()) == (text, transient, storage)
