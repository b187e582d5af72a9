"""verify.py's host side around the container: what a run's outcome becomes (a report
that answers the request, or one failed check saying why), with an engine double
passed where verify_image takes its engine. The real container is the integration
tier's (tests/integration/test_verify.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

from imagesmith.edges.engine import ImageConfig, ImageInfo, RunResult, RunSpec
from imagesmith.errors import CommandNotFound, ContainerRefused, EngineConnectionLost, GpuRuntimeMissing, UserError
from imagesmith.model import compat
from imagesmith.resources import payload_module
from imagesmith.stages.verify import entrypoint as entrypoints
from imagesmith.stages.verify import incontainer, judge, verify
from tests.doubles import EngineBase, verify_report

LABELS = {"io.imagesmith.cuda": "cpu", "io.imagesmith.torch": "2.13.0", "io.imagesmith.layer": "base"}
INFO = ImageInfo("sha256:abc", ("img:1",), LABELS, 1, "2026-11-30", (f"reg/img@sha256:{'d' * 64}",),
                 config=ImageConfig(entrypoint=("/usr/bin/tini", "--")))
# --bypass-entrypoint: python3 run.py in place of the ENTRYPOINT (test_verify_entrypoint.py runs it through one)
OPTIONS = verify.VerifyOptions(tier="quick", gpus="none", sample_gpus=False, only=("versions",), through_entrypoint=False)
STARTED = "imagesmith payload: started (Python 3.11.2, /usr/bin/python3)\n"


def answer(spec: RunSpec, tamper: Callable[[dict[str, Any]], dict[str, Any]] = lambda r: r) -> str:
    """What a genuine payload prints for the request in ``spec``'s config."""
    config = json.loads(spec.files["config.json"])
    checks = [{"id": c, "title": c, "status": "pass", "value": None, "threshold": None, "unit": "", "baseline": None,
               "percent_of_baseline": None, "detail": "ok", "optional": False, "duration_s": 0.1} for c in config["checks"]]
    report = payload_module("report").build_report(config["tier"], "t", 1.0, {}, checks, config["nonce"])
    return f"progress\n{verify.MARKER}{json.dumps(tamper(report))}\n"


def runs_commands(spec: RunSpec) -> RunResult:
    """An ENTRYPOINT that runs the command it is given (exec "$@"): the no-op's mark, exit 0."""
    return RunResult(0, f"{entrypoints.MARK}\n", "")


@dataclass
class EngineDouble(EngineBase):
    """engine.image/pull/run as verify calls them; ``outcome`` decides what the payload's run does, ``entry`` what
    the ENTRYPOINT's start (entrypoint.start, labelled entry-PID) does; ``starts`` holds those."""

    outcome: Callable[[RunSpec], RunResult]
    specs: list[RunSpec] = field(default_factory=list)
    entry: Callable[[RunSpec], RunResult] = runs_commands
    starts: list[RunSpec] = field(default_factory=list)

    def info(self) -> dict[str, Any]:
        return {}  # docker info names no platform: verify compares none

    def image(self, ref: str) -> ImageInfo | None:
        return INFO if ref == "img:1" else None

    def pull(self, ref: str, auth: Any = None) -> ImageInfo:
        raise AssertionError("verify pulled a local image")

    def run(self, spec: RunSpec) -> RunResult:
        if spec.labels.get("io.imagesmith.run", "").startswith("entry-"):
            self.starts.append(spec)
            return self.entry(spec)
        self.specs.append(spec)
        return self.outcome(spec)


def verify_with(outcome: Callable[[RunSpec], RunResult], options: verify.VerifyOptions = OPTIONS) -> tuple[dict[str, Any], EngineDouble]:
    engine = EngineDouble(outcome)
    report = incontainer.verify_image(engine, "img:1", options, compat.load()).report
    return report.to_json(), engine


def test_a_genuine_answer_is_the_report_with_the_hosts_view() -> None:
    report, engine = verify_with(lambda spec: RunResult(0, answer(spec), "stderr log"))
    assert report["summary"]["ok"] is True and report["state"] == "complete"
    assert (report["payload_log"], report["payload_exit_code"]) == ("stderr log", 0)
    assert report["image"] == {"ref": "img:1", "id": "sha256:abc", "digests": [f"reg/img@sha256:{'d' * 64}"], "labels": LABELS}
    assert report["nvml"] is None and report["schema"] == verify.REPORT_SCHEMA
    (spec,) = engine.specs
    assert spec.image == "sha256:abc" and spec.network_disabled and spec.gpus == "none"
    assert spec.command == ["python3", f"{verify.IN_CONTAINER}/run.py", "--config", f"{verify.IN_CONTAINER}/config.json",
                            "--emit-marker"]
    assert "run.py" in spec.files and spec.environment == verify.PAYLOAD_ENV
    assert verify.VerifyOutcome(verify_report(report)).ok


def failed(report: dict[str, Any]) -> tuple[str, str]:
    (check,) = report["checks"]
    assert report["summary"] == {"pass": 0, "warn": 0, "fail": 1, "skip": 0, "inconclusive": 0, "ok": False}
    return check["id"], check["detail"]


def raises(error: Exception) -> Callable[[RunSpec], RunResult]:
    def run(spec: RunSpec) -> RunResult:
        raise error
    return run


NO_PYTHON3 = CommandNotFound('starting a container of sha256:abc: failed to create task for container: exec: "python3": '
                             "executable file not found in $PATH: unknown", "python3")


@pytest.mark.parametrize("outcome, check, detail", [
    (lambda s: RunResult(137, "", "", timed_out=True), "payload.timeout", "killed after 900 s (verify.timeout / --timeout)"),
    (raises(NO_PYTHON3), "payload.start", judge.NO_PYTHON),
    (raises(ContainerRefused("creating a container of sha256:abc: no space left on device")), "payload.start",
     "the container did not start: creating a container of sha256:abc: no space left on device"),
    (lambda s: RunResult(127, "", "/bin/sh: 1: python3: not found"), "payload.report", judge.NO_PYTHON),
    (lambda s: RunResult(1, "a\nb\nc\nd\n", ""), "payload.report",
     "the image's python3 exited 1 without starting the payload (python3 run.py in place of the image's ENTRYPOINT "
     "/usr/bin/tini --; it did not run its arguments): b | c | d"),
    (lambda s: RunResult(139, "a\n", STARTED + "Segmentation fault\n"), "payload.report",
     "the payload exited 139 without a report (python3 run.py in place of the image's ENTRYPOINT /usr/bin/tini --; it "
     "crashed, or something in the image swallowed its output): imagesmith payload: started (Python 3.11.2, "
     "/usr/bin/python3) | Segmentation fault"),
    (lambda s: RunResult(0, "", STARTED, stdout_bytes=3 << 20), "payload.report",
     "the payload exited 0 without a report (python3 run.py in place of the image's ENTRYPOINT /usr/bin/tini --; it "
     "crashed, or something in the image swallowed its output): imagesmith payload: started (Python 3.11.2, "
     "/usr/bin/python3) (the container printed 3 MiB on stdout; the last 0 MiB were read)"),
    (lambda s: RunResult(0, answer(s, lambda r: r | {"nonce": "replayed"}), ""), "payload.report",
     "the report was rejected: report.nonce: 'replayed', not this run's: this report was not written by this run's payload"),
])
def test_a_run_without_a_genuine_report_is_one_failed_check_saying_why(outcome: Callable[[RunSpec], RunResult],
                                                                       check: str, detail: str) -> None:
    report, _ = verify_with(outcome)
    assert failed(report) == (check, detail) and not verify.VerifyOutcome(verify_report(report)).ok


def test_no_gpu_runtime_runs_again_without_gpus_and_tells_the_payload() -> None:
    def run(spec: RunSpec) -> RunResult:
        if spec.gpus != "none":
            raise GpuRuntimeMissing("creating a container of sha256:abc: could not select device driver \"\" with capabilities: [[gpu]]")
        return RunResult(0, answer(spec), "")

    report, engine = verify_with(run, verify.VerifyOptions(tier="quick", gpus="all", sample_gpus=False, only=("versions",),
                                                           through_entrypoint=False))
    assert [s.gpus for s in engine.specs] == ["all", "none"]
    assert json.loads(engine.specs[1].files["config.json"])["gpu_unavailable"] == incontainer.GPU_RUNTIME_FIX
    assert report["notes"][0] == f"ran without GPUs: {incontainer.GPU_RUNTIME_FIX}" and report["summary"]["ok"] is True
    assert report["notes"][1].startswith("the payload ran python3 in place of the image's ENTRYPOINT")


def test_an_image_not_in_the_engine_with_no_pull_is_a_user_error() -> None:
    with pytest.raises(UserError, match=r"^image other:1 is not in the engine \(and --no-pull was given\)$"):
        incontainer.verify_image(EngineDouble(lambda s: RunResult(0, "", "")), "other:1", OPTIONS, compat.load(), pull=False)


@pytest.mark.parametrize("error, why", [
    (GpuRuntimeMissing("creating a container of x: could not select device driver"), incontainer.GPU_RUNTIME_FIX),
    (NO_PYTHON3, judge.NO_PYTHON),
    (CommandNotFound('starting x: exec: "bash": executable file not found', "bash"),
     'the container did not start: starting x: exec: "bash": executable file not found'),
    (ContainerRefused("starting x: python3 is mentioned but is not the matter"),
     "the container did not start: starting x: python3 is mentioned but is not the matter"),  # the type decides, not words
])
def test_why_no_start(error: ContainerRefused, why: str) -> None:
    assert incontainer._why_no_start(error) == why


@pytest.mark.parametrize("error", [
    EngineConnectionLost("creating a container of sha256:abc: the Docker engine stopped answering (Connection refused)"),
    RuntimeError("a bug in a double is no failed check"),
])
def test_only_a_refused_container_is_a_failed_check(error: Exception) -> None:
    with pytest.raises(type(error)):
        verify_with(raises(error))


def test_why_no_report_without_an_entrypoint_keeps_the_last_three_lines_cut_at_300() -> None:
    output = "one\n" + "x" * 400 + "\nthree\nfour\n"
    assert judge.why_no_report(2, output, "") == (
        "the image's python3 exited 2 without starting the payload (python3 run.py; the image has no ENTRYPOINT; it did "
        "not run its arguments): " + "x" * 300 + " | three | four")
    assert judge.why_no_report(2, "out", STARTED + output) == (
        "the payload exited 2 without a report (python3 run.py; the image has no ENTRYPOINT; it crashed, or something in "
        "the image swallowed its output): " + "x" * 300 + " | three | four")


def test_check_entry_and_with_checks_recount_the_summary() -> None:
    base = judge.failed_report("payload.report", "why", "quick")
    entry = verify.check_entry("security.service", "title", "pass", "  served\n nothing ", seconds=1.234, data={"k": 1})
    assert entry["detail"] == "served nothing" and entry["duration_s"] == 1.23 and entry["data"] == {"k": 1}
    assert judge.with_checks(base, []) is base
    more = judge.with_checks(base, [entry])
    assert [c["id"] for c in more["checks"]] == ["payload.report", "security.service"]
    assert more["summary"] == {"pass": 1, "warn": 0, "fail": 1, "skip": 0, "inconclusive": 0, "ok": False}
    assert "data" not in verify.check_entry("x", "t", "skip", "d")


def test_a_running_report_never_says_ok() -> None:
    running = judge.running_report("img:1", "standard")
    assert (running["tier"], running["image"], running["summary"]["ok"], running["checks"]) == ("standard", {"ref": "img:1"}, False, [])
    assert judge.running_report(None, "quick")["image"] is None


def test_driver_requirement_names_the_declared_cuda_and_every_release() -> None:
    kb = compat.load()
    declared = verify.driver_requirement("13.0", kb)
    assert (declared["toolkit_driver"], declared["min_driver"]) == ("580.126.20", "580.65.06")
    assert verify.driver_requirement(None, kb) == {"releases": kb.cuda_releases()}
    assert verify.driver_requirement("cpu", kb) == {"releases": kb.cuda_releases()}
