"""Verify what users run: the image's ENTRYPOINT started with a no-op command (entrypoint.start), the payload run
through it or in its place, who exited, --expect against labels, the verdict's words. An engine double stands where
verify_image takes its engine (tests/unit/stages/verify/test_verify_container.py shows it); the real images are
tests/integration/test_verify_entrypoint.py's."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable

import pytest
from click.testing import CliRunner

from imagesmith.cli.verification import print_verdict
from imagesmith.edges.engine import ImageConfig, RunResult, RunSpec
from imagesmith.errors import CommandNotFound, UserError
from imagesmith.model import compat, policy
from imagesmith.resources import payload_module
from imagesmith.stages.verify import entrypoint as entrypoints
from imagesmith.stages.verify import incontainer, judge, verify
from tests.doubles import verify_report
from tests.unit.stages.verify.test_verify_container import INFO, OPTIONS, STARTED, EngineDouble, answer

ENTRY = ["/entry.sh"]
TINI = ("/usr/bin/tini", "--")
AUTO = dataclasses.replace(OPTIONS, through_entrypoint=None, only=("versions", "entrypoint"))
RUN = ["python3", "/opt/imagesmith/verify/run.py", "--config", "/opt/imagesmith/verify/config.json", "--emit-marker"]
TINI_BYPASSED = ("the payload ran python3 in place of the image's ENTRYPOINT /usr/bin/tini -- (--bypass-entrypoint): what "
                 "it sets up (PATH, a venv, conda) was not used")
HOW = "(started as `docker run IMAGE echo imagesmith-entrypoint-ran` starts it, without GPUs or network: every command users run starts this way)"


# -- pure: how an ENTRYPOINT is given a command ----------------------------------------------------------------


@pytest.mark.parametrize("entrypoint, kind, payload, no_op", [
    (["/entry.sh"], "args", RUN, ["echo", "imagesmith-entrypoint-ran"]),
    (["/usr/bin/tini", "-g", "--", "start.sh"], "args", RUN, ["echo", "imagesmith-entrypoint-ran"]),
    (["conda", "run", "--no-capture-output", "-n", "ml"], "args", RUN, ["echo", "imagesmith-entrypoint-ran"]),
    (["python3"], "python", RUN[1:], ["-c", "print('imagesmith-entrypoint-ran')"]),
    (["/usr/local/bin/python3.11", "-u"], "python", RUN[1:], ["-c", "print('imagesmith-entrypoint-ran')"]),
    (["/opt/venv/bin/python"], "python", RUN[1:], ["-c", "print('imagesmith-entrypoint-ran')"]),
    (["python3", "app.py"], "args", RUN, ["echo", "imagesmith-entrypoint-ran"]),  # an app: its arguments are its own
    (["/bin/bash", "-c"], "shell", ["python3 /opt/imagesmith/verify/run.py --config /opt/imagesmith/verify/config.json "
                                    "--emit-marker"], ["echo imagesmith-entrypoint-ran"]),
    (["sh", "-lc"], "shell", [" ".join(RUN)], ["echo imagesmith-entrypoint-ran"]),
    (["/bin/bash", "-c", "exec \"$@\""], "args", RUN, ["echo", "imagesmith-entrypoint-ran"]),
])
def test_each_shape_is_given_the_command_its_own_way(entrypoint: list[str], kind: str, payload: list[str],
                                                    no_op: list[str]) -> None:
    assert entrypoints.shape(entrypoint) == kind
    assert entrypoints.given(entrypoint, RUN) == payload
    assert entrypoints.no_op(entrypoint) == no_op


def test_a_python_entrypoint_cannot_be_given_a_login_shell() -> None:
    assert entrypoints.given(["python3"], ["/bin/sh", "/opt/imagesmith/verify/login.sh", *RUN]) is None
    assert entrypoints.given(["/bin/bash", "-c"], ["it's"]) == ["'it'\"'\"'s'"]  # quoted for the shell


def start(code: int | None, stdout: str = "", stderr: str = "", seconds: float = 0.43,
          entrypoint: tuple[str, ...] = ("/entry.sh",)) -> entrypoints.Start:
    return entrypoints.outcome(entrypoint, entrypoints.no_op(entrypoint), code, seconds, stdout, stderr)


@pytest.mark.parametrize("started, status, detail", [
    (start(0, "imagesmith-entrypoint-ran\n"), "pass",
     "ENTRYPOINT /entry.sh ran the command it was given (`echo imagesmith-entrypoint-ran`) and exited 0 in 0.4 s"),
    (start(0, "=== ACME 4.2 ===\nimagesmith-entrypoint-ran\n"), "pass",
     "ENTRYPOINT /entry.sh ran the command it was given (`echo imagesmith-entrypoint-ran`) and exited 0 in 0.4 s"),
    (start(3, "checking\n", "licence not accepted: run with -e ACCEPT_EULA=Y\n"), "fail",
     f"ENTRYPOINT /entry.sh exited 3: licence not accepted: run with -e ACCEPT_EULA=Y {HOW}"),
    (start(3, "a\nb\nc\nd\n"), "fail", f"ENTRYPOINT /entry.sh exited 3: b | c | d {HOW}"),
    (start(1), "fail", f"ENTRYPOINT /entry.sh exited 1: it printed nothing {HOW}"),
    (start(None, "", "Serving HTTP on 127.0.0.1 port 8000 ...\n", seconds=30.2), "fail",
     "ENTRYPOINT /entry.sh did not return within 30 s when given the command `echo imagesmith-entrypoint-ran` (killed): "
     "it does not run the command it is given, or waits for something; its last lines: Serving HTTP on 127.0.0.1 port "
     "8000 .... An image that is only a server: --skip entrypoint.start"),
    (start(0, "usage: tool [--help]\n"), "warn",
     "ENTRYPOINT /entry.sh exited 0 without running the command it was given (`echo imagesmith-entrypoint-ran` printed "
     "nothing): a command users give this image does not run; its last lines: usage: tool [--help]"),
    (start(3, entrypoint=TINI + ("/opt/nvidia/nvidia_entrypoint.sh",)), "fail",
     f"ENTRYPOINT /usr/bin/tini -- /opt/nvidia/nvidia_entrypoint.sh exited 3: it printed nothing {HOW}"),
    (entrypoints.Start(("/entry.sh",), ("echo", "x"), None, 0.1, False, refused="starting a container of sha256:abc: "
                       'exec: "/entry.sh": no such file or directory'), "fail",
     'ENTRYPOINT /entry.sh could not be started: starting a container of sha256:abc: exec: "/entry.sh": no such file or '
     "directory"),
])
def test_the_start_says_what_ran_and_who_exited(started: entrypoints.Start, status: str, detail: str) -> None:
    assert entrypoints.verdict(started) == (status, detail)


BYPASSED = ("the payload ran python3 in place of the image's ENTRYPOINT /entry.sh, which {}: what it sets up (PATH, a venv, "
            "conda) was not used; --through-entrypoint runs the payload through it")


@pytest.mark.parametrize("forced, started, through, note", [
    (None, start(0, "imagesmith-entrypoint-ran\n"), True,
     "the payload ran through the image's ENTRYPOINT /entry.sh, as `docker run IMAGE python3 ...` runs it; "
     "--bypass-entrypoint runs python3 in its place"),
    (None, start(3), False, BYPASSED.format("exited 3 when given a command")),
    (None, start(None), False, BYPASSED.format("did not return within 30 s when given a command")),
    (None, start(0), False, BYPASSED.format("exited 0 without running the command it was given")),
    (True, start(3), True, "the payload ran through the image's ENTRYPOINT /entry.sh, as `docker run IMAGE python3 ...` "
                           "runs it (--through-entrypoint)"),
    (False, None, False, "the payload ran python3 in place of the image's ENTRYPOINT /entry.sh (--bypass-entrypoint): "
                         "what it sets up (PATH, a venv, conda) was not used"),
])
def test_the_default_runs_through_an_entrypoint_that_runs_its_command(forced: bool | None, started: entrypoints.Start | None,
                                                                      through: bool, note: str) -> None:
    launch = entrypoints.choose(ENTRY, forced, started, RUN)
    assert (launch.through, launch.note()) == (through, note)


def test_no_entrypoint_no_note_and_a_python_one_never_gets_a_login_shell() -> None:
    assert entrypoints.choose([], None, None, RUN).note() is None
    login = ["/bin/sh", "/opt/imagesmith/verify/login.sh", *RUN]
    launch = entrypoints.choose(["python3"], None, start(0, "imagesmith-entrypoint-ran\n"), login, login_shell=True)
    assert not launch.through and launch.note() == (
        "the payload ran python3 in place of the image's ENTRYPOINT python3, which is a Python interpreter, which runs a "
        "script, not a login shell (--login-shell): what it sets up (PATH, a venv, conda) was not used; "
        "--through-entrypoint runs the payload through it")
    with pytest.raises(UserError, match=r"^--through-entrypoint: the image's ENTRYPOINT python3 is a Python interpreter"):
        entrypoints.choose(["python3"], True, None, login, login_shell=True)


# -- verify_image with an engine double ---------------------------------------------------------------------------


def run(options: verify.VerifyOptions, outcome: Callable[[RunSpec], RunResult] | None = None,
        entry: Callable[[RunSpec], RunResult] = lambda s: RunResult(0, f"{entrypoints.MARK}\n", ""),
        config: ImageConfig | None = None) -> tuple[dict[str, Any], EngineDouble]:
    engine = EngineDouble(outcome or (lambda spec: RunResult(0, answer(spec), STARTED)), entry=entry)
    if config is not None:
        engine.image = lambda ref: dataclasses.replace(INFO, config=config)  # type: ignore[method-assign]
    return incontainer.verify_image(engine, "img:1", options, compat.load()).report.to_json(), engine


def checks(report: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["id"]: (c["status"], c["detail"]) for c in report["checks"]}


def test_by_default_the_payload_runs_through_an_entrypoint_that_ran_its_no_op() -> None:
    report, engine = run(AUTO)
    (probe,) = engine.starts
    assert (probe.entrypoint, probe.command, probe.gpus, probe.timeout_s) == (list(TINI), ["echo", entrypoints.MARK], "none", 30.0)
    (spec,) = engine.specs
    assert spec.entrypoint == list(TINI) and spec.command == RUN
    assert checks(report)["entrypoint.start"] == (
        "pass", "ENTRYPOINT /usr/bin/tini -- ran the command it was given (`echo imagesmith-entrypoint-ran`) and exited 0 "
                f"in {engine_seconds(report)} s")
    assert report["launch"]["through"] is True and report["launch"]["chosen"] == "default"
    assert report["launch"]["argv"] == [*TINI, *RUN] and report["launch"]["start"]["exit_code"] == 0
    assert verify.VerifyOutcome(verify_report(report)).ok


def engine_seconds(report: dict[str, Any]) -> str:
    return f"{report['launch']['start']['seconds']:.1f}"


LICENCE = lambda s: RunResult(3, "", "licence not accepted: run with -e ACCEPT_EULA=Y\n")  # noqa: E731


def test_an_entrypoint_that_exits_non_zero_fails_the_image_and_the_payload_runs_in_its_place() -> None:
    report, engine = run(AUTO, entry=LICENCE)
    assert checks(report)["entrypoint.start"] == ("fail", f"ENTRYPOINT /usr/bin/tini -- exited 3: licence not accepted: run "
                                                          f"with -e ACCEPT_EULA=Y {HOW}")
    assert engine.specs[0].entrypoint is None and engine.specs[0].command == RUN
    assert report["notes"] == ["the payload ran python3 in place of the image's ENTRYPOINT /usr/bin/tini --, which exited 3 "
                               "when given a command: what it sets up (PATH, a venv, conda) was not used; "
                               "--through-entrypoint runs the payload through it"]
    assert not verify.VerifyOutcome(verify_report(report)).ok and policy.failed_required(verify_report(report)) == ["entrypoint.start"]


def test_the_start_runs_whatever_checks_are_asked_for_but_only_reports_when_asked() -> None:
    report, engine = run(OPTIONS)  # --bypass-entrypoint, entrypoint.start not asked for: nothing started
    assert engine.starts == [] and "entrypoint.start" not in checks(report)
    report, engine = run(dataclasses.replace(AUTO, only=("versions",)), entry=LICENCE)  # the default needs its answer
    assert len(engine.starts) == 1 and "entrypoint.start" not in checks(report) and engine.specs[0].entrypoint is None
    report, engine = run(dataclasses.replace(AUTO, through_entrypoint=False), entry=LICENCE)  # bypassed, still checked
    assert checks(report)["entrypoint.start"][0] == "fail" and engine.specs[0].entrypoint is None
    report, engine = run(AUTO, config=ImageConfig(cmd=("python3",)))
    assert engine.starts == [] and checks(report)["entrypoint.start"] == ("skip", "the image has no ENTRYPOINT: a command runs as given")
    assert "notes" not in report or report["notes"] == []


@pytest.mark.parametrize("outcome, check, detail", [
    (lambda s: RunResult(3, "", "licence not accepted: run with -e ACCEPT_EULA=Y\n"), "payload.report",
     "the image's ENTRYPOINT /usr/bin/tini -- exited 3 before the payload started (it was given python3 run.py as "
     "`docker run IMAGE python3 ...` gives it a command): licence not accepted: run with -e ACCEPT_EULA=Y"),
    (lambda s: RunResult(127, "", "/entry.sh: 3: exec: python3: not found\n"), "payload.report",
     "the image's ENTRYPOINT /usr/bin/tini -- finds no python3 on the PATH it gives the command it runs, so the payload "
     "could not start through it; --bypass-entrypoint runs the image's own python3"),
    (lambda s: RunResult(137, "", STARTED + "Killed\n"), "payload.report",
     "the payload exited 137 without a report (python3 run.py, given to the image's ENTRYPOINT /usr/bin/tini --; it "
     "crashed, or something in the image swallowed its output): imagesmith payload: started (Python 3.11.2, "
     "/usr/bin/python3) | Killed"),
    (lambda s: RunResult(-1, "", "Serving on 8000\n", timed_out=True), "payload.timeout",
     "killed after 900 s (verify.timeout / --timeout): the payload never started: the image's ENTRYPOINT /usr/bin/tini -- "
     "was still running (it does not run the command it is given); --bypass-entrypoint runs python3 in its place"),
])
def test_through_the_entrypoint_the_verdict_says_who_exited(outcome: Callable[[RunSpec], RunResult], check: str,
                                                            detail: str) -> None:
    report, _ = run(dataclasses.replace(OPTIONS, through_entrypoint=True), outcome)
    assert checks(report) == {check: ("fail", detail)}


def test_through_the_entrypoint_the_engine_refusing_python3_names_the_entrypoint() -> None:
    refused = CommandNotFound('starting: exec: "python3": executable file not found in $PATH', "python3")

    def raises(spec: RunSpec) -> RunResult:
        raise refused
    report, _ = run(dataclasses.replace(OPTIONS, through_entrypoint=True), raises)
    assert checks(report)["payload.start"][1].startswith("the image's ENTRYPOINT /usr/bin/tini -- finds no python3")


@pytest.mark.parametrize("entrypoint, container_entrypoint, command", [
    (("python3",), ["python3"], RUN[1:]),
    (("/bin/bash", "-c"), ["/bin/bash", "-c"], [" ".join(RUN)]),
    (("/entry.sh",), ["/entry.sh"], RUN),
])
def test_each_shape_gets_the_payload_as_it_runs_commands(entrypoint: tuple[str, ...], container_entrypoint: list[str],
                                                        command: list[str]) -> None:
    probe = lambda s: RunResult(0, f"{entrypoints.MARK}\n", "")  # noqa: E731
    _, engine = run(AUTO, entry=probe, config=ImageConfig(entrypoint=entrypoint))
    assert (engine.specs[0].entrypoint, engine.specs[0].command) == (container_entrypoint, command)


def test_login_shell_runs_the_payload_under_the_images_login_shell() -> None:
    report, engine = run(dataclasses.replace(OPTIONS, login_shell=True), config=ImageConfig(cmd=("bash", "-l")))
    assert engine.specs[0].entrypoint is None
    assert engine.specs[0].command == ["/bin/sh", "/opt/imagesmith/verify/login.sh", *RUN]
    assert "login.sh" in engine.specs[0].files and report["launch"]["login_shell"] is True
    _, engine = run(dataclasses.replace(AUTO, login_shell=True))  # through an ENTRYPOINT too
    assert engine.specs[0].entrypoint == list(TINI) and engine.specs[0].command[:2] == ["/bin/sh", "/opt/imagesmith/verify/login.sh"]


def test_a_torch_that_did_not_import_in_a_bypassed_image_names_the_entrypoint() -> None:
    def no_torch(spec: RunSpec) -> RunResult:
        def tamper(report: dict[str, Any]) -> dict[str, Any]:
            report["checks"][0].update(status="fail", detail="torch is not importable: No module named 'torch'")
            report["summary"] = payload_module("report").summarize(report["checks"])
            return report
        return RunResult(0, answer(spec, tamper), STARTED)
    report, _ = run(dataclasses.replace(OPTIONS, only=("versions.torch",)), no_torch)
    note = TINI_BYPASSED
    assert report["notes"] == [note]
    assert report["checks"][0]["detail"] == f"torch is not importable: No module named 'torch' ({note})"


def test_torch_found_elsewhere_gets_the_advice_that_fits_how_it_is_put_on_path() -> None:
    found = {"prefix": "/opt/venv", "kind": "venv", "torch": "2.13.0", "python": "/opt/venv/bin/python3",
             "on_path": [{"by": "/etc/profile.d/venv.sh", "scope": "login shells"}]}
    said = ("torch is not importable (no torch package): ModuleNotFoundError: No module named 'torch'; torch 2.13.0 is "
            "installed in /opt/venv, put on PATH only by /etc/profile.d/venv.sh (login shells)")

    def no_torch(spec: RunSpec) -> RunResult:
        def tamper(report: dict[str, Any]) -> dict[str, Any]:
            report["checks"][0].update(status="fail", detail=said, data={"elsewhere": [found]})
            report["summary"] = payload_module("report").summarize(report["checks"])
            return report
        return RunResult(0, answer(spec, tamper), STARTED)
    report, _ = run(dataclasses.replace(AUTO, only=("versions.torch",)), no_torch, config=ImageConfig(cmd=("bash", "-l")))
    assert report["checks"][0]["detail"] == f"{said}; run with --login-shell or set ENV PATH=/opt/venv/bin:$PATH"
    report, _ = run(dataclasses.replace(AUTO, only=("versions.torch",), login_shell=True), no_torch)
    assert report["checks"][0]["detail"] == f"{said}; set ENV PATH=/opt/venv/bin:$PATH"  # a login shell ran already


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
    assert judge.expect_conflicts(labels, expect) == notes


@pytest.mark.parametrize("status, ok, line", [
    ("pass", True, "verified reg/img@sha256:d"),
    ("fail", False, "FAILED verification: reg/img@sha256:d"),
])
def test_the_verdict_never_says_verified_for_a_failed_run(status: str, ok: bool, line: str) -> None:
    report = {"summary": {"ok": ok}, "state": "complete", "image": {"digests": ["reg/img@sha256:d"]},
              "checks": [{"id": "a", "status": status}]}
    runner = CliRunner()
    with runner.isolation() as (out, _err, _):
        print_verdict(verify_report(report))
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
    from imagesmith.cli.verification import DETAIL_WIDTH, print_verify
    from imagesmith.model import engines

    why = ("the container did not start: starting a container of sha256:abc: Podman's default ulimits exceed this host's hard "
           f"limits (runc could not set nofile: error setting rlimit type 7: operation not permitted); {engines.FIX_PODMAN_ULIMITS}")
    report = {"summary": {"ok": False, "fail": 1}, "state": "complete", "tier": "quick", "image": {"ref": "img:1", "digests": []},
              "engine": {"name": "Podman", "version": "4.3.1", "api": "1.41", "rootless": False},
              "checks": [{"id": "payload.start", "status": "fail", "detail": why}, {"id": "b", "status": "pass", "detail": "x" * 200}]}
    runner = CliRunner()
    with runner.isolation() as (out, err, _):
        print_verify(verify_report(report), None)
    assert "verify img:1 on Podman 4.3.1 (quick)" in out.getvalue().decode()
    assert len(why) > DETAIL_WIDTH and err.getvalue().decode().splitlines()[0] == f"payload.start: {why}"  # only the failure
    assert "x" * 200 not in err.getvalue().decode()
