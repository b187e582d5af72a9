"""The host's judgement of what a container printed (judge.judge_output), the
request it must answer, --expect meaning what the labels mean, and the probe's
answer: pure, no engine. Whatever the output, the result is a report or a reason."""

from __future__ import annotations

import json
import random
from typing import Any, cast

import pytest

from imagesmith.errors import UsageError
from imagesmith.resources import payload_module
from imagesmith.stages.verify import judge, probe, verify

REQUEST = verify.Request("n0nce", "quick", {"versions.torch": False, "security.user": False, "libs.optional": True})


def entry(check_id: str, status: str = "pass", optional: bool = False) -> dict[str, Any]:
    return {"id": check_id, "title": check_id, "status": status, "value": None, "threshold": None, "unit": "",
            "baseline": None, "percent_of_baseline": None, "detail": "d", "optional": optional, "duration_s": 0.1}


def genuine(**changes: object) -> dict[str, Any]:
    checks = [entry("versions.torch"), entry("security.user"), entry("libs.optional", "fail", True)]
    report = payload_module("report").build_report("quick", "t", 1.0, {}, checks, "n0nce")
    return cast(dict[str, Any], report) | changes


def output(report: object, before: str = "progress\n", after: str = "") -> str:
    return f"{before}\n@@IMAGESMITH-REPORT@@ {json.dumps(report)}\n{after}"


def test_a_genuine_report_is_accepted() -> None:
    report, problem = judge.judge_output(output(genuine()), REQUEST)
    assert problem is None and report is not None and report["summary"]["ok"] is True


def summary(checks: list[dict[str, Any]]) -> dict[str, Any]:
    return cast(dict[str, Any], payload_module("report").summarize(checks))


@pytest.mark.parametrize("report, problem", [
    (genuine(nonce=None), "the report was rejected: report.nonce: missing: this report was not written by this run's payload"),
    (genuine(nonce="old"), "the report was rejected: report.nonce: 'old', not this run's: this report was not written by this run's payload"),
    (genuine(tier="standard"), "the report was rejected: report.tier: expected 'quick', got 'standard'"),
    (genuine(checks=[entry("versions.torch"), entry("libs.optional", optional=True)],
             summary=summary([entry("versions.torch"), entry("libs.optional", optional=True)])),
     "the report was rejected: report.checks: missing: security.user"),
    (genuine(checks=[entry("versions.torch"), entry("security.user"), entry("libs.optional", optional=True), entry("x.extra")],
             summary=summary([entry("versions.torch"), entry("security.user"), entry("libs.optional", optional=True), entry("x.extra")])),
     "the report was rejected: report.checks: not requested: x.extra"),
    (genuine(checks=[entry("versions.torch"), entry("versions.torch"), entry("security.user"), entry("libs.optional", optional=True)],
             summary=summary([entry("versions.torch")] * 2 + [entry("security.user"), entry("libs.optional", optional=True)])),
     "the report was rejected: report.checks: reported twice: versions.torch"),
    (genuine(checks=[entry("versions.torch"), entry("security.user", "fail", True), entry("libs.optional", optional=True)],
             summary=summary([entry("versions.torch"), entry("security.user", "fail", True), entry("libs.optional", optional=True)])),
     "the report was rejected: report.checks: optional flag differs from the registry: security.user"),
    (genuine(summary={"pass": 3, "warn": 0, "fail": 0, "skip": 0, "inconclusive": 0, "ok": True}),
     "the report was rejected: report.summary: does not match the checks"),
    (genuine(checks=[entry("versions.torch", "great"), entry("security.user"), entry("libs.optional", optional=True)]),
     "the report was rejected: report.checks[0].status: expected one of pass, warn, fail, skip, inconclusive, got 'great'"),
])
def test_a_report_that_does_not_answer_this_run_is_rejected(report: dict[str, Any], problem: str) -> None:
    got, why = judge.judge_output(output(report), REQUEST)
    assert got is None and why is not None and why.startswith(problem), why


@pytest.mark.parametrize("change, problem", [
    ({"mode": {"mode": "gpu", "gpus": "2"}}, "the report was rejected: mode.gpus: expected integer, got '2'"),
    ({"mode": {"mode": "gpu", "gpus": -1}}, "the report was rejected: mode.gpus: '-1' is out of range (minimum 0)"),
    ({"mode": {"mode": "tpu", "gpus": 1}}, "the report was rejected: mode.mode: 'tpu' is not one of 'gpu', 'cpu'"),
    ({"duration_s": 1e300}, "the report was rejected: duration_s: '1e+300' is out of range (maximum 1000000000000000.0)"),
])
def test_a_report_the_host_schema_refuses_is_rejected_before_anything_signs_it(change: dict[str, Any], problem: str) -> None:
    got, why = judge.judge_output(output(genuine(**change)), REQUEST)
    assert (got, why) == (None, problem)


@pytest.mark.parametrize("stdout, problem", [
    ("nothing here\n", None),
    ("@@IMAGESMITH-REPORT@@ {garbage\n", "the report line is not strict JSON (not JSON (Expecting property name enclosed in double quotes) "
                                          "at line 1 column 2; 30 characters)"),
    ("@@IMAGESMITH-REPORT@@ " + "[" * 200000, "the report line is not strict JSON (nested deeper than 64 levels; 200022 characters)"),
    ("@@IMAGESMITH-REPORT@@ 1e999999\n", "the report line is not strict JSON (the number '1e999999' is too large to be finite at "
                                          "line 1 column 1; 30 characters)"),
    ('@@IMAGESMITH-REPORT@@ {"mode": {"gpus": NaN}}\n', "the report line is not strict JSON (NaN is not JSON (NaN and Infinity are "
                                                       "not numbers JSON allows) at line 1 column 19; 45 characters)"),
    ('@@IMAGESMITH-REPORT@@ {"a": 1, "a": 2}\n', "the report line is not strict JSON (the key 'a' appears twice in one object "
                                                "(JSON readers disagree on which wins); 38 characters)"),
    ("@@IMAGESMITH-REPORT@@ {}\n@@IMAGESMITH-REPORT@@ {}\n", "2 report lines in the output (the payload prints one)"),
    ("@@IMAGESMITH-REPORT@@ \"text\"\n", "the report was rejected: report: expected an object"),
    ("@@IMAGESMITH-REPORT@@ {\"checks\": {\"a\": 1}, \"nonce\": [1]}", "the report was rejected: report.nonce: [1], not this run's"),
    ("\udcff\x00@@IMAGESMITH-REPORT@@ {}\n", None),  # not at the start of a line: not a report line
])
def test_malformed_output_is_a_reason_never_an_exception(stdout: str, problem: str | None) -> None:
    report, why = judge.judge_output(stdout, REQUEST)
    assert report is None
    assert (why is None) if problem is None else (why is not None and why.startswith(problem)), why


def test_random_output_never_raises() -> None:
    rng = random.Random(16)
    pieces = ['{', '}', '[', ']', '"id"', '"status"', '"pass"', ':', ',', 'null', '1', '"checks"', '"nonce"', '"n0nce"',
              '"summary"', '"schema"', '"imagesmith.verify-report/1"', 'true', '\n', '\r', '\x00', 'é']
    for _ in range(3000):
        body = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        report, why = judge.judge_output("@@IMAGESMITH-REPORT@@ " + body, REQUEST)
        assert report is None or why is None


def test_the_request_follows_the_registry_and_rejects_nothing_to_run() -> None:
    request = verify.request_for(verify.VerifyOptions(tier="standard", only=("security",)))
    assert list(request.checks) == ["security.user", "security.jupyter", "security.sshd", "security.config"]
    assert request.host_checks == ("security.service",) and len(request.nonce) == 32
    assert verify.request_for(verify.VerifyOptions(tier="quick", only=("security",))).host_checks == ()
    assert verify.request_for(verify.VerifyOptions()).nonce != verify.request_for(verify.VerifyOptions()).nonce
    with pytest.raises(UsageError) as err:
        verify.request_for(verify.VerifyOptions(only=("no.such.check",)))
    assert err.value.exit_code == 2
    assert str(err.value) == "--only no.such.check --skip - leave no quick-tier check to run; verify/run.py --list names them"


@pytest.mark.parametrize("labels, expect, expected", [
    ({"io.imagesmith.cuda": "cpu", "io.imagesmith.torch": "2.13.0"}, {}, {"cuda": "cpu", "torch": "2.13.0", "packages": {}}),
    ({"io.imagesmith.torch": "2.13.0"}, {"cuda": "cpu"}, {"cuda": "cpu", "torch": "2.13.0", "packages": {}}),
    ({"io.imagesmith.cudnn": "9.10.2.21"}, {}, {"cudnn": "9.10.2", "packages": {}}),
    ({}, {"cudnn": "9.10.2.21", "torchvision": "0.24", "einops": "0.8"},
     {"cudnn": "9.10.2", "packages": {"torchvision": "0.24", "einops": "0.8"}}),
    ({"io.imagesmith.packages": "a==1 b==2"}, {"a": "3"}, {"packages": {"a": "3", "b": "2"}}),
])
def test_expect_means_what_the_labels_mean(labels: dict[str, Any], expect: dict[str, Any], expected: dict[str, Any]) -> None:
    assert verify.expected_from(labels, expect) == expected


def test_expect_errors_are_usage_errors() -> None:
    with pytest.raises(UsageError) as err:
        verify.parse_expect("torhc=2.9")
    assert err.value.exit_code == 2 and str(err.value).startswith("--expect: item 'torhc=2.9': unknown name 'torhc'; did you mean 'torch'?")


def test_the_payload_config_carries_the_request_and_the_image() -> None:
    from imagesmith.edges.engine import ImageConfig
    from imagesmith.model import compat

    image = ImageConfig(user="root", entrypoint=("/start.sh",), cmd=("lab",), env=("A=1", "B=x=y"), exposed_ports=("8888/tcp",))
    config = verify.payload_config({"io.imagesmith.layer": ""}, verify.VerifyOptions(), compat.load(), REQUEST, image)
    assert config["nonce"] == "n0nce" and config["checks"] == ["versions.torch", "security.user", "libs.optional"]
    assert config["image"] == {"user": "root", "entrypoint": ["/start.sh"], "cmd": ["lab"], "env": {"A": "1", "B": "x=y"},
                               "exposed_ports": ["8888/tcp"]}
    assert "security" not in config  # an empty layer label: a foreign image (root warns)
    strict = verify.payload_config({}, verify.VerifyOptions(require_non_root=True), compat.load())
    assert strict["security"] == {"expect_non_root": True}
    assert payload_module("config").parse_config(config).image.env == {"A": "1", "B": "x=y"}


@pytest.mark.parametrize("out, parsed", [
    ('\n@@IMAGESMITH-PROBE@@ {"listening": ["0.0.0.0:8888"], "open": []}\n', {"listening": ["0.0.0.0:8888"], "open": []}),
    ("@@IMAGESMITH-PROBE@@ {garbage", None),
    ('@@IMAGESMITH-PROBE@@ {"listening": [1], "open": []}', None),
    ('@@IMAGESMITH-PROBE@@ ["a"]', None),
    ("OCI runtime exec failed: exec: \"python3\": executable file not found", None),
])
def test_the_probes_answer_is_checked(out: str, parsed: dict[str, Any] | None) -> None:
    assert probe.parse_probe(out) == parsed
