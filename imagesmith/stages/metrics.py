"""Verification metrics leave the host: a text file for node_exporter's textfile collector
(written atomically) and pushes to a Prometheus Pushgateway (prometheus-client's own
``push_to_gateway``), with errors turned into our own.

What the series are is ``imagesmith.report.prom``; this module only writes and sends them.
"""

from __future__ import annotations

import os
import socket
import tempfile
import urllib.error
import urllib.parse
from pathlib import Path
from typing import Callable, Mapping

from prometheus_client import CollectorRegistry, generate_latest, push_to_gateway

from imagesmith.atomic import write_bytes
from imagesmith.errors import UserError
from imagesmith.model.fleetreport import CellResult, FleetReport
from imagesmith.report.model import Run, Verify
from imagesmith.report.parse import load
from imagesmith.report.prom import Subject, VerifyMetrics, image_digest

JOB = "imagesmith"
PUSH_TIMEOUT_S = 10.0


def hostname() -> str:
    """The ``Hostname`` label and the Pushgateway's ``instance``: ``$NODE_NAME`` when set (as the DCGM
    exporter takes it, e.g. from the Kubernetes downward API), else this host's name."""
    return os.environ.get("NODE_NAME") or socket.gethostname()


def check_textfile(path: Path) -> Path:
    """A --metrics FILE, checked before anything runs: a ``*.prom`` name (node_exporter's textfile collector reads
    only those) that is not a folder, whose nearest existing folder (the write makes the missing ones) is no kernel
    pseudo file system (/proc, /sys, /dev), is not under a regular file, and takes a new file (one is made there and
    removed: the atomic write makes its temporary file beside the target)."""
    if path.suffix != ".prom":
        raise UserError(f"--metrics {path}: the file name must end in .prom (node_exporter's textfile collector "
                        "reads only *.prom files); e.g. --metrics /var/lib/node_exporter/textfile/imagesmith.prom")
    if path.is_dir():
        raise UserError(f"--metrics {path}: is a folder; give a file name ending in .prom")
    folder = Path(os.path.abspath(path)).parent
    while not folder.exists() and not folder.is_symlink() and folder != folder.parent:
        folder = folder.parent
    real = Path(os.path.realpath(folder))
    if real.parts[1:2] in (("proc",), ("sys",), ("dev",)):
        raise UserError(f"--metrics {path}: {real} is a kernel file system, not a folder node_exporter reads; give a file "
                        "in its --collector.textfile.directory")
    if not folder.is_dir():
        raise UserError(f"--metrics {path}: {folder} is a file, not a folder; give a file in node_exporter's textfile folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".imagesmith-probe-", suffix=".tmp", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UserError(f"--metrics {path}: cannot write in {folder} ({exc.strerror or exc}); is the folder writable?") from None
    return path


def check_gateway(url: str) -> str:
    """A --pushgateway URL: http(s)://host[:port][/path], nothing else."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise UserError(f"--pushgateway {url!r}: give the Pushgateway's base URL, e.g. http://pushgateway.example.com:9091")
    return url.rstrip("/")


def write_textfile(registry: CollectorRegistry, path: Path) -> Path:
    """The text exposition format, atomically (the collector never reads half a file).

    Same bytes as prometheus-client's ``write_to_textfile`` (``generate_latest``); the house's
    ``atomic.write_bytes`` adds the mode node_exporter can read and cleans up on failure."""
    try:
        write_bytes(check_textfile(path), generate_latest(registry))
    except OSError as exc:
        raise UserError(f"--metrics {path}: cannot write it ({exc.strerror or exc}); is the folder writable?") from None
    return path


def push(registry: CollectorRegistry, url: str, grouping: Mapping[str, str]) -> str:
    """PUT the registry to the group ``job=imagesmith`` + ``grouping`` (it replaces that group's previous
    series: the latest verification of one image on one host). Returns the group, for people."""
    gateway = check_gateway(url)
    try:
        push_to_gateway(gateway, job=JOB, registry=registry, grouping_key=dict(grouping), timeout=PUSH_TIMEOUT_S)
    except urllib.error.HTTPError as exc:
        body = exc.read().decode(errors="replace").strip()[:300]
        raise UserError(f"--pushgateway {gateway}: HTTP {exc.code} ({body or exc.reason}); the metrics were not pushed") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise UserError(f"--pushgateway {gateway}: cannot reach it ({reason}); is the Pushgateway running there?") from None
    return " ".join(f"{k}={v}" for k, v in {"job": JOB, **grouping}.items())


def export_run(run: Run, textfile: Path | None, gateway: str | None, host: str | None = None,
               say: Callable[[str], None] = lambda line: None, local: str | None = None) -> None:
    """Every verified target of a parsed report: all in one text file; one push per image
    (grouping key job=imagesmith, instance=HOST, digest=DIGEST). ``local``: the digest label of a report
    without an image (``verify --local``)."""
    if gateway is not None:
        check_gateway(gateway)
    if textfile is not None:
        check_textfile(textfile)
    name = host or hostname()
    if textfile is not None:
        say(f"metrics: {write_textfile(run_metrics(run, name, local).registry, textfile)}")
    if gateway is None:
        return
    for target, v in _verified(run):
        one = VerifyMetrics()
        digest = image_digest(v) or local or ""
        one.add(v, Subject(name, digest), run.source, target)
        say(f"metrics pushed to {gateway}: {push(one.registry, gateway, {'instance': name, 'digest': digest})}")


def run_metrics(run: Run, host: str, local: str | None = None) -> VerifyMetrics:
    """Every verified target of a report, as run on ``host`` (``local``: the digest label of one without an image)."""
    out = VerifyMetrics()
    for target, v in _verified(run):
        out.add(v, Subject(host, image_digest(v) or local or ""), run.source, target)
    return out


def _verified(run: Run) -> list[tuple[str, Verify]]:
    """(target id, verification) of each verified target; the id only from a run report (a verify report's is a guess)."""
    return [(t.id if run.kind == "run" else "", t.verify) for t in run.targets if t.verify is not None]


def exposition(registry: CollectorRegistry) -> str:
    """The text exposition format (what --metrics writes; ``imagesmith report --format prom`` prints)."""
    return generate_latest(registry).decode()


def export_fleet(fleet: FleetReport, folder: Path, textfile: Path | None, gateway: str | None,
                 say: Callable[[str], None] = lambda line: None) -> None:
    """A fleet run: every cell's outcome and its verify report's series (labels class, digest,
    Hostname=the node it ran on) in one text file; one push per class and digest."""
    if gateway is not None:
        check_gateway(gateway)
    if textfile is not None:
        check_textfile(textfile)
    everything = VerifyMetrics(fleet=True)
    for cell in fleet.cells:
        one, run = VerifyMetrics(fleet=True), _cell_report(cell, folder)
        for m in (everything, one):
            _add_cell(m, cell, run, folder)
        if gateway is not None:
            say(f"metrics pushed to {gateway}: {push(one.registry, gateway, {'class': cell.klass, 'digest': cell.digest})}")
    if textfile is not None:
        say(f"metrics: {write_textfile(everything.registry, textfile)}")


def _add_cell(m: VerifyMetrics, cell: CellResult, run: Run | None, folder: Path) -> None:
    subject = Subject(cell.node, cell.digest, cell.klass)
    m.add_cell(subject, cell.status, cell.queued_s, cell.ran_s, f"{folder / 'fleet-report.json'}: cell {cell.klass} {cell.digest}")
    if run is None:
        return
    for target in run.targets:
        if target.verify is not None:
            m.add(target.verify, subject, run.source)


def _cell_report(cell: CellResult, folder: Path) -> Run | None:
    """The cell's verify report (None when the job wrote none); a path out of ``folder`` is refused."""
    if not cell.report:
        return None
    path = (folder / cell.report).resolve()
    if not path.is_relative_to(folder.resolve()):
        raise UserError(f"{folder / 'fleet-report.json'}: cell {cell.klass} {cell.digest}: report {cell.report!r} "
                        f"is outside {folder}; give the fleet report fleet verify wrote")
    return load(path) if path.is_file() else None
