"""The image's ENTRYPOINT as users meet it, and how the payload runs beside it.

Every ``docker run IMAGE COMMAND`` starts the ENTRYPOINT with COMMAND as its arguments. So before the payload
runs, the ENTRYPOINT is started the same way with a command that does nothing but print a word
(``entrypoint.start``): an ENTRYPOINT that exits non-zero, never returns, or does not run the command it is
given is what every user meets, and the check says so with its exit code and its last lines.

By default the payload then runs through the ENTRYPOINT (its PATH, venv, conda) when that start showed it runs
the command it is given, and in its place otherwise, the verdict naming the bypassed ENTRYPOINT and the flag.
The table of shapes this follows is in docs/verification-fleet.md (Verify what users run: the ENTRYPOINT).

An ENTRYPOINT is given a command in one of three ways (:func:`shape`):

* ``args``: a program that runs its arguments (``exec "$@"``, ``tini --``, ``conda run -n ENV``): as they are;
* ``python``: a Python interpreter (``["python3"]``, ``["python3", "-u"]``): the script and its arguments;
* ``shell``: a shell's ``-c`` (``["/bin/bash", "-c"]``): the command as one shell-quoted word.
"""

from __future__ import annotations

import os
import re
import shlex
import time
from dataclasses import dataclass
from typing import Any, Sequence

from imagesmith.edges.protocols import EngineProtocol, RunSpec
from imagesmith.errors import ContainerRefused, UserError

CHECK = "entrypoint.start"
MARK = "imagesmith-entrypoint-ran"
BOUND_S = 30.0  # how long the ENTRYPOINT may take to run the no-op command and exit
THROUGH, BYPASS = "--through-entrypoint", "--bypass-entrypoint"
PYTHON = re.compile(r"python(?:3(?:\.\d+)?)?$")
PYTHON_FLAGS = re.compile(r"-[bBdEiIOqsSuv]+$")  # interpreter flags that take no value
SHELL = re.compile(r"(?:ba|da|z|k|a|mk)?sh$")
SHELL_C = re.compile(r"-[a-z]*c$")  # -c, -lc, -ec
LAST_LINES = 3


def shape(entrypoint: Sequence[str]) -> str:
    """How this ENTRYPOINT is given a command: ``args``, ``python`` or ``shell`` (module docstring)."""
    words = list(entrypoint)
    i = len(words) - 1
    while i > 0 and PYTHON_FLAGS.match(words[i]):
        i -= 1
    if words and PYTHON.match(os.path.basename(words[i])):
        return "python"
    if len(words) >= 2 and SHELL_C.match(words[-1]) and SHELL.match(os.path.basename(words[-2])):
        return "shell"
    return "args"


def given(entrypoint: Sequence[str], command: Sequence[str]) -> list[str] | None:
    """``command`` as this ENTRYPOINT must be given it to run it; None when it cannot be (a Python interpreter
    given anything but a ``python3 …`` command)."""
    kind = shape(entrypoint)
    if kind == "python":
        return list(command[1:]) if command and PYTHON.match(os.path.basename(command[0])) else None
    if kind == "shell":
        return [shlex.join(command)]
    return list(command)


def no_op(entrypoint: Sequence[str]) -> list[str]:
    """The command that does nothing but print :data:`MARK`, as this ENTRYPOINT must be given it."""
    if shape(entrypoint) == "python":
        return ["-c", f"print({MARK!r})"]
    return given(entrypoint, ["echo", MARK]) or []


def shown(entrypoint: Sequence[str]) -> str:
    """The ENTRYPOINT as a shell would write it (``/entry.sh``, ``/usr/bin/tini -- /entry.sh``), cut at 200."""
    text = shlex.join(entrypoint)
    return text if len(text) <= 200 else text[:197] + "..."


@dataclass(frozen=True)
class Start:
    """What ``docker run IMAGE <no-op>`` did: the ENTRYPOINT's own start."""

    entrypoint: tuple[str, ...]
    command: tuple[str, ...]  # the no-op it was given
    exit_code: int | None  # None: it did not return within the bound (killed), or never started
    seconds: float
    ran: bool  # the no-op printed its mark: the ENTRYPOINT ran the command it was given
    lines: tuple[str, ...] = ()  # its last lines (the mark left out)
    refused: str = ""  # the engine would not start it (its words)
    bound_s: float = BOUND_S

    @property
    def runs_commands(self) -> bool:
        return self.exit_code == 0 and self.ran and not self.refused

    def record(self) -> dict[str, Any]:
        return {"command": list(self.command), "exit_code": self.exit_code, "seconds": round(self.seconds, 2),
                "ran_command": self.ran, "last_lines": list(self.lines), "refused": self.refused or None}


def last_lines(stdout: str, stderr: str) -> tuple[str, ...]:
    """The last lines it printed, the mark left out: stderr's where it wrote any, else stdout's."""
    def lines(text: str) -> list[str]:
        return [line.strip()[:200] for line in text.splitlines() if line.strip() and line.strip() != MARK]
    return tuple((lines(stderr) or lines(stdout))[-LAST_LINES:])


def outcome(entrypoint: Sequence[str], command: Sequence[str], exit_code: int | None, seconds: float, stdout: str,
            stderr: str, bound_s: float = BOUND_S) -> Start:
    """A :class:`Start` from what the container did (``exit_code`` None: killed at the bound)."""
    ran = any(line.strip() == MARK for line in stdout.splitlines())
    return Start(tuple(entrypoint), tuple(command), exit_code, seconds, ran, last_lines(stdout, stderr), bound_s=bound_s)


def said(lines: Sequence[str]) -> str:
    return " | ".join(lines)


def verdict(start: Start) -> tuple[str, str]:
    """(status, detail) of ``entrypoint.start``: what ran, who exited, and what to do."""
    ep, cmd = f"ENTRYPOINT {shown(start.entrypoint)}", shlex.join(start.command)
    how = f"(started as `docker run IMAGE {cmd}` starts it, without GPUs or network: every command users run starts this way)"
    if start.refused:
        return "fail", f"{ep} could not be started: {start.refused}"
    if start.exit_code is None:
        tail = f"; its last lines: {said(start.lines)}" if start.lines else "; it printed nothing"
        return "fail", (f"{ep} did not return within {start.bound_s:.0f} s when given the command `{cmd}` (killed): it does "
                        f"not run the command it is given, or waits for something{tail}. An image that is only a "
                        f"server: --skip {CHECK}")
    if start.exit_code != 0:
        return "fail", f"{ep} exited {start.exit_code}: {said(start.lines) or 'it printed nothing'} {how}"
    if not start.ran:
        tail = f"; its last lines: {said(start.lines)}" if start.lines else ""
        return "warn", (f"{ep} exited 0 without running the command it was given (`{cmd}` printed nothing): a command "
                        f"users give this image does not run{tail}")
    return "pass", f"{ep} ran the command it was given (`{cmd}`) and exited 0 in {start.seconds:.1f} s"


def because(start: Start) -> str:
    """Why the payload could not run through this ENTRYPOINT, in a few words (for the notes)."""
    if start.refused:
        return "could not be started"
    if start.exit_code is None:
        return f"did not return within {start.bound_s:.0f} s when given a command"
    if start.exit_code != 0:
        return f"exited {start.exit_code} when given a command"
    return "exited 0 without running the command it was given"


@dataclass(frozen=True)
class Launch:
    """How the payload runs: through the image's ENTRYPOINT or in its place, chosen by whom, and why."""

    entrypoint: tuple[str, ...] = ()
    through: bool = False
    chosen: str = "default"  # "default" or the flag that chose
    reason: str = ""  # why the default bypassed it
    login_shell: bool = False

    def argv(self, command: Sequence[str]) -> tuple[list[str] | None, list[str]]:
        """(the container's ENTRYPOINT: None for the command's first word, its command)."""
        if not self.through:
            return None, list(command)
        return list(self.entrypoint), given(self.entrypoint, command) or list(command)

    def note(self) -> str | None:
        if not self.entrypoint:
            return None
        ep = f"the image's ENTRYPOINT {shown(self.entrypoint)}"
        if self.through:
            return (f"the payload ran through {ep}, as `docker run IMAGE python3 ...` runs it"
                    + (f" ({THROUGH})" if self.chosen == THROUGH else f"; {BYPASS} runs python3 in its place"))
        if self.chosen == BYPASS:
            return f"the payload ran python3 in place of {ep} ({BYPASS}): what it sets up (PATH, a venv, conda) was not used"
        return (f"the payload ran python3 in place of {ep}, which {self.reason}: what it sets up (PATH, a venv, conda) "
                f"was not used; {THROUGH} runs the payload through it")

    def ran(self) -> str:
        """What ran the payload, for a message about its exit."""
        if not self.entrypoint:
            return "python3 run.py; the image has no ENTRYPOINT"
        if self.through:
            return f"python3 run.py, given to the image's ENTRYPOINT {shown(self.entrypoint)}"
        return f"python3 run.py in place of the image's ENTRYPOINT {shown(self.entrypoint)}"

    def record(self, start: Start | None, command: Sequence[str]) -> dict[str, Any]:
        entrypoint, args = self.argv(command)
        return {"entrypoint": list(self.entrypoint), "through": self.through, "chosen": self.chosen,
                "reason": self.reason or None, "login_shell": self.login_shell,
                "argv": [a[:200] for a in [*(entrypoint or []), *args][:40]],
                "start": start.record() if start is not None else None}


def choose(entrypoint: Sequence[str], forced: bool | None, start: Start | None, command: Sequence[str],
           login_shell: bool = False) -> Launch:
    """Through the ENTRYPOINT or in its place: as ``forced`` says (--through-entrypoint / --bypass-entrypoint),
    else through where its start ran the command it was given. A command this ENTRYPOINT cannot be given (a
    Python interpreter and --login-shell) is run in its place, or refused (a UserError) when forced through."""
    ep = tuple(entrypoint)
    if not ep:
        return Launch(login_shell=login_shell)
    fits = given(ep, command) is not None
    if forced is True:
        if not fits:
            raise UserError(f"{THROUGH}: the image's ENTRYPOINT {shown(ep)} is a Python interpreter: it runs a script, "
                            "not the login shell --login-shell starts; leave out one of the two")
        return Launch(ep, True, THROUGH, login_shell=login_shell)
    if forced is False:
        return Launch(ep, False, BYPASS, login_shell=login_shell)
    if not fits:
        return Launch(ep, False, reason="is a Python interpreter, which runs a script, not a login shell (--login-shell)",
                      login_shell=login_shell)
    if start is not None and start.runs_commands:
        return Launch(ep, True, login_shell=login_shell)
    return Launch(ep, False, reason=because(start) if start is not None else "was not started", login_shell=login_shell)


def start(engine: EngineProtocol, image_id: str, entrypoint: Sequence[str], memory: str | None = None,
          bound_s: float = BOUND_S) -> Start:
    """Start ``image_id``'s ENTRYPOINT with the no-op command (no GPU, loopback only, the image's user and ENV,
    at most ``bound_s``, always removed)."""
    command = no_op(entrypoint)
    spec = RunSpec(image=image_id, command=command, entrypoint=list(entrypoint), gpus="none", network_disabled=True,
                   timeout_s=bound_s, mem_limit=memory, pids_limit=1024, labels={"io.imagesmith.run": f"entry-{os.getpid()}"})
    t0 = time.monotonic()
    try:
        result = engine.run(spec)
    except ContainerRefused as exc:
        return Start(tuple(entrypoint), tuple(command), None, time.monotonic() - t0, False, refused=str(exc), bound_s=bound_s)
    code = None if result.timed_out else result.exit_code
    return outcome(entrypoint, command, code, time.monotonic() - t0, result.stdout, result.stderr, bound_s)
