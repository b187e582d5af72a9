"""security.service (standard tier): the image's own command, started and probed.

The payload runs a command of its own, never the image's CMD, so what the image really starts
(``docker run IMAGE``: ENTRYPOINT + CMD, its user, its ENV) is run here in a
locked-down container: no network but loopback, no GPU, a pids and memory
cap, a short window, always removed. While it runs, ``verify/probe.py`` (the
payload's stdlib probe) is run inside it with ``docker exec``: which TCP ports
listen, and which answer the Jupyter API without a token. A probe that gives no answer is a warn saying
what ran, who ended it (its own timeout, the command's exit, a SIGKILL from elsewhere) and what to do.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

from imagesmith.edges.protocols import EngineProtocol
from imagesmith.errors import UserError
from imagesmith.model import loader

POLL_S = 1.5
STABLE_POLLS = 3  # without declared ports: the same listening set this many times in a row ends the watch
EXEC_TIMEOUT_S = 20.0
SETTLE_S = 3.0  # after a probe that did not answer: how long the engine may take to say the container has stopped
MEMORY = "4g"
PROBE_MARKER = "@@IMAGESMITH-PROBE@@ "
Verdict = tuple[str, str, dict[str, Any]]


def service_check(engine: EngineProtocol, info: Any, window_s: float, check_id: str = "security.service",
                  sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """The check entry: fail when a Jupyter API answers without a token, warn when
    the probe could not look, pass otherwise (saying what listened)."""
    from imagesmith.stages.verify.payload import HOST_CHECKS, check_entry

    t0, title = time.monotonic(), HOST_CHECKS[check_id][1]
    argv = list(info.config.argv)
    if not argv:
        return check_entry(check_id, title, "skip", "the image has no ENTRYPOINT or CMD: it starts nothing by itself")
    try:
        status, detail, data = _watch(engine, info, argv, window_s, sleep)
    except UserError as exc:  # the engine refused this image's command (engine.py says why): nothing runs, say so
        status, detail, data = "warn", f"the image's own command could not be started to probe it: {exc}", {}
    return check_entry(check_id, title, status, detail, seconds=time.monotonic() - t0,
                       data={"command": [a[:200] for a in argv[:40]], **data})


def _spec(info: Any, argv: list[str], window_s: float) -> Any:
    from imagesmith.edges.engine import RunSpec
    from imagesmith.stages.verify.payload import IN_CONTAINER, payload_files

    return RunSpec(image=info.id, command=argv, gpus="none", files=payload_files(), files_dir=IN_CONTAINER,
                   network_mode="none", timeout_s=window_s, mem_limit=MEMORY, pids_limit=1024,
                   labels={"io.imagesmith.run": f"probe-{os.getpid()}"})


def _watch(engine: EngineProtocol, info: Any, argv: list[str], window_s: float, sleep: Callable[[float], None]) -> Verdict:
    from imagesmith.stages.verify.payload import IN_CONTAINER

    declared = [int(p.split("/")[0]) for p in info.config.exposed_ports
                if p.split("/")[0].isdigit() and p.split("/")[-1] in ("tcp", p)]  # TCP ports ("8888/tcp" or "8888")
    ran = command_said(argv, info.config.user)
    probe = ["python3", f"{IN_CONTAINER}/probe.py", *map(str, declared)]
    t0, seen, stable = time.monotonic(), None, 0
    with engine.started(_spec(info, argv, window_s)) as running:
        while True:
            if not running.running():
                return "pass", exited(ran, running, time.monotonic() - t0), {"listening": seen or []}
            code, out = running.exec(probe, EXEC_TIMEOUT_S)
            answer = parse_probe(out)
            if answer is None and not _still_running(running, sleep):
                return "pass", exited(ran, running, time.monotonic() - t0, code), {"listening": seen or []}
            if answer is None:
                return "warn", no_answer(ran, code, out, time.monotonic() - t0), {"probe": probe, "probe_exit_code": code}
            if answer["open"]:
                return "fail", (f"{ran} serves Jupyter without a token: {', '.join(answer['open'])} answered; set a token "
                                "or a password"), answer
            stable = stable + 1 if answer["listening"] == seen else 1
            seen = answer["listening"]
            if _settled(seen, declared, stable) or time.monotonic() - t0 >= window_s:
                return "pass", (f"{ran} ran {time.monotonic() - t0:.0f} s; listening on "
                                f"{', '.join(seen) or 'nothing'}; no Jupyter API answered without a token"), answer
            sleep(POLL_S)


def command_said(argv: list[str], user: str) -> str:
    """``the image's command (/entry.sh python3, as user 1000)``: what this check started."""
    shown = " ".join(argv)
    shown = shown if len(shown) <= 120 else shown[:117] + "..."
    return f"the image's command ({shown}, as {'user ' + user if user else 'its default user, root'})"


def _still_running(running: Any, sleep: Callable[[float], None]) -> bool:
    """Whether the container still runs, once the engine has had ``SETTLE_S`` to notice that it stopped (a probe
    killed with its container is seen before the engine says the container exited)."""
    for _ in range(int(SETTLE_S / 0.5)):
        if not running.running():
            return False
        sleep(0.5)
    return bool(running.running())


def exited(ran: str, running: Any, seconds: float, probe_code: int | None = None) -> str:
    """The image's command ended while it was watched: its exit code and last lines (nothing left to probe)."""
    logs = [line.strip()[:200] for line in (running.logs() or "").splitlines() if line.strip()][-3:]
    with_probe = f" (the probe, run inside it, ended with it: exit {probe_code})" if probe_code is not None else ""
    return (f"{ran} exited {running.exit_code()} after {seconds:.0f} s{with_probe}: nothing left listening"
            + (f"; its last lines: {' | '.join(logs)}" if logs else ""))


def no_answer(ran: str, code: int | None, out: str, seconds: float) -> str:
    """Why the probe inside the running container gave no answer: what ran, who killed it, and what to do."""
    probe = "the probe (python3 probe.py, by docker exec as the image's user)"
    said = " ".join(out.split())[-200:] or "no output"
    if code is None and out.startswith("no answer within"):
        return (f"{probe} gave no answer within {EXEC_TIMEOUT_S:.0f} s, its own timeout, while {ran} kept running: "
                "python3 in this image is slow to start or hangs, so nothing was probed; run verify again on a quieter "
                "host, and check that `docker run IMAGE python3 -c pass` returns")
    if code is None:
        return f"{probe} could not be started in the running container ({said}), so nothing was probed; run verify again"
    if code in (126, 127):
        return (f"{probe} could not start (exit {code}: {said}): docker exec finds no python3 on the image's ENV PATH, "
                f"so nothing was probed while {ran} ran; put python3 on ENV PATH")
    if code == 137:
        return (f"{probe} was killed after {seconds:.0f} s (exit 137: SIGKILL) while {ran} kept running: not by its own "
                f"{EXEC_TIMEOUT_S:.0f} s timeout (that gives no answer) nor with the command (it still ran), but by the "
                f"container's {MEMORY} memory limit or by something in the image that kills other processes; nothing was "
                "probed; run verify again, and if it repeats look inside by hand (docker run IMAGE, then docker exec ... "
                "ss -ltn)")
    return f"{probe} exited {code} without an answer while {ran} ran: {said}; nothing was probed; run verify again"


def _settled(listening: list[str], declared: list[int], stable: int) -> bool:
    """Every declared port listens, or (none declared) the listening set stopped changing."""
    ports = {int(s.rsplit(":", 1)[1]) for s in listening if s.rsplit(":", 1)[-1].isdigit()}
    if declared:
        return set(declared) <= ports
    return bool(listening) and stable >= STABLE_POLLS


def parse_probe(output: str) -> dict[str, list[str]] | None:
    """The probe's one JSON line, checked; None when the output holds no such line."""
    lines = [line for line in output.split("\n") if line.startswith(PROBE_MARKER)]
    try:
        doc = loader.parse_json_line(lines[-1][len(PROBE_MARKER):], "the probe line") if lines else None
    except loader.LoadError:
        return None
    if not isinstance(doc, dict):
        return None
    out: dict[str, list[str]] = {}
    for key in ("listening", "open"):
        value = doc.get(key)
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            return None
        out[key] = [x[:200] for x in value[:50]]
    return out

