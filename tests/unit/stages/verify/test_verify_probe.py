"""security.service (stages/verify/probe.py): the image's own command started and probed; every ending says what ran, who
ended it and what to do. A double of the running container stands where engine.started hands one over."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any, Iterator

import pytest

from imagesmith.edges.engine import ImageConfig, ImageInfo, RunSpec
from imagesmith.stages.verify import probe
from tests.doubles import EngineBase

RAN = "the image's command (/entry.sh python3, as user 1000)"
ANSWER = probe.PROBE_MARKER + json.dumps({"listening": ["127.0.0.1:8000"], "open": []})


@dataclass
class RunningDouble:
    """``states``: running() answers, in turn (the last one repeats); ``answers``: what each exec returns."""

    states: list[bool]
    answers: list[tuple[int | None, str]]
    code: int = 3
    log: str = "starting\nlicence not accepted: run with -e ACCEPT_EULA=Y\n"
    execs: list[list[str]] = field(default_factory=list)

    def running(self) -> bool:
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]

    def exit_code(self) -> int | None:
        return self.code

    def logs(self, limit: int = 0) -> str:
        return self.log

    def exec(self, argv: list[str], timeout_s: float, user: str | None = None) -> tuple[int | None, str]:
        self.execs.append(argv)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


@dataclass
class Engine(EngineBase):
    running: RunningDouble
    specs: list[RunSpec] = field(default_factory=list)

    @contextlib.contextmanager
    def started(self, spec: RunSpec) -> Iterator[Any]:
        self.specs.append(spec)
        yield self.running


INFO = ImageInfo("sha256:abc", ("img:1",), {}, 1, "", config=ImageConfig(user="1000", entrypoint=("/entry.sh",),
                                                                          cmd=("python3",)))


def checked(running: RunningDouble, info: ImageInfo = INFO) -> tuple[str, str]:
    entry = probe.service_check(Engine(running), info, 60.0, sleep=lambda s: None)
    return entry["status"], entry["detail"]


@pytest.mark.parametrize("running, status, detail", [
    (RunningDouble([False], [(0, "")]), "pass",
     f"{RAN} exited 3 after 0 s: nothing left listening; its last lines: starting | licence not accepted: run with -e "
     "ACCEPT_EULA=Y"),
    # the command exits while the probe runs: the probe dies with it (137), and the engine says so a moment later
    (RunningDouble([True, True, True, False], [(137, "")]), "pass",
     f"{RAN} exited 3 after 0 s (the probe, run inside it, ended with it: exit 137): nothing left listening; its last "
     "lines: starting | licence not accepted: run with -e ACCEPT_EULA=Y"),
    (RunningDouble([True], [(137, "")]), "warn",
     f"the probe (python3 probe.py, by docker exec as the image's user) was killed after 0 s (exit 137: SIGKILL) while "
     f"{RAN} kept running: not by its own 20 s timeout (that gives no answer) nor with the command (it still ran), but by "
     "the container's 4g memory limit or by something in the image that kills other processes; nothing was probed; run "
     "verify again, and if it repeats look inside by hand (docker run IMAGE, then docker exec ... ss -ltn)"),
    (RunningDouble([True], [(None, "no answer within 20 s")]), "warn",
     f"the probe (python3 probe.py, by docker exec as the image's user) gave no answer within 20 s, its own timeout, "
     f"while {RAN} kept running: python3 in this image is slow to start or hangs, so nothing was probed; run verify "
     "again on a quieter host, and check that `docker run IMAGE python3 -c pass` returns"),
    (RunningDouble([True], [(127, 'OCI runtime exec failed: exec: "python3": executable file not found in $PATH')]), "warn",
     "the probe (python3 probe.py, by docker exec as the image's user) could not start (exit 127: OCI runtime exec "
     'failed: exec: "python3": executable file not found in $PATH): docker exec finds no python3 on the image\'s ENV '
     f"PATH, so nothing was probed while {RAN} ran; put python3 on ENV PATH"),
    (RunningDouble([True], [(1, "Traceback ...\nOSError: boom\n")]), "warn",
     "the probe (python3 probe.py, by docker exec as the image's user) exited 1 without an answer while "
     f"{RAN} ran: Traceback ... OSError: boom; nothing was probed; run verify again"),
    (RunningDouble([True], [(0, ANSWER)]), "pass",
     f"{RAN} ran 0 s; listening on 127.0.0.1:8000; no Jupyter API answered without a token"),
    (RunningDouble([True], [(0, probe.PROBE_MARKER + json.dumps({"listening": ["0.0.0.0:8888"],
                                                                 "open": ["http://127.0.0.1:8888/api"]}))]), "fail",
     f"{RAN} serves Jupyter without a token: http://127.0.0.1:8888/api answered; set a token or a password"),
])
def test_every_ending_says_what_ran_who_ended_it_and_what_to_do(running: RunningDouble, status: str, detail: str) -> None:
    assert checked(running) == (status, detail)


def test_a_root_image_says_so_and_an_image_without_a_command_is_skipped() -> None:
    root = ImageInfo("sha256:abc", (), {}, 1, "", config=ImageConfig(cmd=("jupyter", "lab")))
    assert checked(RunningDouble([False], [(0, "")], code=0, log=""), root) == (
        "pass", "the image's command (jupyter lab, as its default user, root) exited 0 after 0 s: nothing left listening")
    entry = probe.service_check(Engine(RunningDouble([False], [(0, "")])), ImageInfo("i", (), {}, 1, ""), 60.0)
    assert (entry["status"], entry["detail"]) == ("skip", "the image has no ENTRYPOINT or CMD: it starts nothing by itself")
