"""Verification on this host (``verify --local``): the payload on a Python of this host (a GPU host without an
engine), its progress relayed, the GPUs watched meanwhile, its answer judged."""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from imagesmith.errors import UserError
from imagesmith.model import compat, verifyreport
from imagesmith.model.located import printable
from imagesmith.resources import payload_dir
from imagesmith.stages.verify import gpuwatch
from imagesmith.stages.verify.judge import failed_report, finish, judge_output, now, why_no_report, with_checks
from imagesmith.stages.verify.payload import HOST_CHECKS, check_entry
from imagesmith.stages.verify.sampling import claim, judged, run_with_sampler, sampler_for, watch_of
from imagesmith.stages.verify.verify import (
    PAYLOAD_ENV,
    Request,
    Sampler,
    VerifyOptions,
    VerifyOutcome,
    payload_args,
    payload_config,
    request_for,
)


def run_local(options: VerifyOptions, python: str | None = None, kb: compat.KnowledgeBase | None = None,
              sampler_factory: Callable[[], Sampler] | None = None,
              progress: Callable[[str], None] | None = None) -> VerifyOutcome:
    """The payload on this host's Python (a GPU host without Docker); its progress lines go to ``progress``
    (None: nowhere), each throughput check's judged against what the host's watch saw during it."""
    kb, started, t0 = kb or compat.load(), now(), time.monotonic()
    request = request_for(options)
    config = payload_config({}, options, kb, request)
    with tempfile.TemporaryDirectory(prefix="imagesmith-verify-") as tmp:
        config_path = Path(tmp, "config.json")
        config_path.write_text(json.dumps(config))
        cmd = [local_python(python), str(payload_dir() / "run.py"), *payload_args(options, str(config_path))]
        sampler = sampler_for(options, sampler_factory)
        lines = gpuwatch.live(progress, lambda: watch_of(sampler))
        report, nvml = run_with_sampler(lambda: _local_report(cmd, options, request, sampler, lines), sampler)
    report = judged(report, nvml, options, remote=False)
    skipped = [check_entry(c, HOST_CHECKS[c][1], "skip", "no image: verify --local runs this host's Python")
               for c in request.host_checks]
    return VerifyOutcome(verifyreport.parse(finish(with_checks(report, skipped), None, nvml, started, time.monotonic() - t0)))


def local_python(python: str | None) -> str:
    """The Python ``verify --local`` runs the payload with: ``--python`` (a path, or a name on PATH), else this one.
    A UserError (exit 1) saying which when it is not an executable file."""
    if python is None:
        return sys.executable
    found = shutil.which(python) if os.sep not in python else (python if os.path.isfile(python) and os.access(python, os.X_OK) else None)
    if found is None:
        what = "no such file" if os.sep in python and not os.path.exists(python) else \
            "not an executable file" if os.sep in python else "not found on PATH"
        raise UserError(f"--python {printable(python, 120)}: {what}; give the Python to verify, e.g. --python /opt/venv/bin/python")
    return found


def local_gpu_env(gpus: str, environ: Mapping[str, str]) -> dict[str, str]:
    """--local: --gpus none hides every GPU; a list selects those GPUs (numbered as NVML numbers them: PCI order),
    unless CUDA_VISIBLE_DEVICES already says which (then the payload counts what it sees)."""
    if gpus == "none":
        return {"CUDA_VISIBLE_DEVICES": ""}
    if gpus != "all" and "CUDA_VISIBLE_DEVICES" not in environ:
        return {"CUDA_VISIBLE_DEVICES": gpus, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    return {}


def _local_report(cmd: list[str], options: VerifyOptions, request: Request, sampler: Sampler | None = None,
                  lines: Callable[[str], None] | None = None) -> dict[str, Any]:
    env = os.environ | PAYLOAD_ENV | local_gpu_env(options.gpus, os.environ)
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    except OSError as exc:  # the Python vanished or is no program (an ELF for another machine, a script without #!)
        raise UserError(f"--python {printable(cmd[0], 120)}: cannot be run ({exc.strerror or exc}); give the Python to verify") from None
    from imagesmith.edges.gpuwatch import descendant_of

    claim(sampler, descendant_of(proc.pid))
    tail: collections.deque[str] = collections.deque(maxlen=20)  # stderr's last lines: who exited, and what it said

    def kept(line: str) -> None:
        tail.append(line)
        if lines is not None:
            lines(line)
    relay = threading.Thread(target=_relay, args=(proc.stderr, kept), daemon=True)
    relay.start()
    out = _Collect(proc.stdout)
    try:
        code = proc.wait(timeout=options.timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return failed_report("payload.timeout", f"killed after {options.timeout_s:.0f} s", options.tier)
    finally:
        relay.join(timeout=5)
    stdout = out.text()
    report, problem = judge_output(stdout, request)
    if report is None:
        return failed_report("payload.report", problem or why_no_report(code, stdout, "\n".join(tail)), options.tier)
    return report


def _relay(stream: Any, lines: Callable[[str], None] | None) -> None:
    """The payload's stderr, line by line, to ``lines`` (read to the end either way, so it never blocks)."""
    for raw in iter(stream.readline, b""):
        if lines is not None:
            lines(raw.decode(errors="replace").rstrip("\n"))
    stream.close()


class _Collect:
    """A child's stdout read to its end on a thread of its own (stderr is read beside it)."""

    def __init__(self, stream: Any) -> None:
        self._chunks: list[bytes] = []
        self._thread = threading.Thread(target=lambda: self._chunks.append(stream.read()), daemon=True)
        self._thread.start()

    def text(self) -> str:
        self._thread.join(timeout=30)
        return b"".join(self._chunks).decode(errors="replace")
