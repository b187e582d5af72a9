"""security.service (standard tier): the image's own command, started and probed.

The payload replaces the image's ENTRYPOINT, so what the image really starts
(``docker run IMAGE``: ENTRYPOINT + CMD, its user, its ENV) is run here in a
locked-down container: no network but loopback, no GPU, a pids and memory
cap, a short window, always removed. While it runs, ``verify/probe.py`` (the
payload's stdlib probe) is run inside it with ``docker exec``: which TCP ports
listen, and which answer the Jupyter API without a token.
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
PROBE_MARKER = "@@IMAGESMITH-PROBE@@ "
Verdict = tuple[str, str, dict[str, Any]]


def service_check(engine: EngineProtocol, info: Any, window_s: float, check_id: str = "security.service",
                  sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """The check entry: fail when a Jupyter API answers without a token, warn when
    the probe could not look, pass otherwise (saying what listened)."""
    from imagesmith.stages.payload import HOST_CHECKS, check_entry

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
    from imagesmith.stages.payload import IN_CONTAINER, payload_files

    return RunSpec(image=info.id, command=argv, gpus="none", files=payload_files(), files_dir=IN_CONTAINER,
                   network_mode="none", timeout_s=window_s, mem_limit="4g", pids_limit=1024,
                   labels={"io.imagesmith.run": f"probe-{os.getpid()}"})


def _watch(engine: EngineProtocol, info: Any, argv: list[str], window_s: float, sleep: Callable[[float], None]) -> Verdict:
    from imagesmith.stages.payload import IN_CONTAINER

    declared = [int(p.split("/")[0]) for p in info.config.exposed_ports
                if p.split("/")[0].isdigit() and p.split("/")[-1] in ("tcp", p)]  # TCP ports ("8888/tcp" or "8888")
    shown = " ".join(argv)[:120]
    t0, seen, stable = time.monotonic(), None, 0
    with engine.started(_spec(info, argv, window_s)) as running:
        while True:
            if not running.running():
                return "pass", f"the image's command ({shown}) exited {running.exit_code()} after " \
                               f"{time.monotonic() - t0:.0f} s: nothing left listening", {"listening": seen or []}
            code, out = running.exec(["python3", f"{IN_CONTAINER}/probe.py", *map(str, declared)], EXEC_TIMEOUT_S)
            answer = parse_probe(out)
            if answer is None and not running.running():
                continue  # it exited meanwhile: said above, on the next turn
            if answer is None:
                return "warn", f"could not probe inside the image (exit {code}): {out.strip()[-200:] or 'no output'}", {}
            if answer["open"]:
                return "fail", (f"the image's command ({shown}) serves Jupyter without a token: "
                                f"{', '.join(answer['open'])} answered; set a token or a password"), answer
            stable = stable + 1 if answer["listening"] == seen else 1
            seen = answer["listening"]
            if _settled(seen, declared, stable) or time.monotonic() - t0 >= window_s:
                return "pass", (f"the image's command ({shown}) ran {time.monotonic() - t0:.0f} s; listening on "
                                f"{', '.join(seen) or 'nothing'}; no Jupyter API answered without a token"), answer
            sleep(POLL_S)


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

