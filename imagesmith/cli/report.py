"""``imagesmith report``: render a report for people and CI."""

from __future__ import annotations

from pathlib import Path

import click

from imagesmith.errors import UserError


@click.command("report")
@click.argument("report_file", metavar="REPORT.json", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["md", "junit", "html", "prom"]), default="md", show_default=True,
              help="md: a summary for CI job pages; junit: one testcase per target x check; html: a page with charts; "
                   "prom: Prometheus text exposition format (docs/metrics.md).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write here (atomically); default: standard output.")
@click.option("--hostname", default=None, help="prom: the Hostname label (the host the verification ran on); default $NODE_NAME, else this host's name.")
def report_cmd(report_file: Path, fmt: str, out: Path | None, hostname: str | None) -> None:
    """Render a build, verify, run or fleet report (report.json, fleet-report.json) for people and CI."""
    from imagesmith import report
    from imagesmith.model import fleetreport as fleet_report
    from imagesmith.model import loader
    from imagesmith.report.parse import log_tail_in
    from imagesmith.stages.fleet import render as fleet_render

    raw = loader.load_json_any(report_file, fix="give a report.json, verify.json, run-report.json or fleet-report.json that imagesmith wrote")
    if raw.get("schema") == fleet_report.SCHEMA:  # imagesmith.fleet-report/1: one row per class
        if fmt == "prom":
            raise UserError(f"{report_file}: --format prom exports verify, run and build reports; a fleet run's metrics come "
                            "from imagesmith fleet verify --metrics FILE.prom")
        fleet = fleet_report.parse(raw, str(report_file))
        _emit(fleet_render.render(fleet, fmt), out, f"{fmt} fleet report of {len(fleet.cells)} cells", fleet.ok)
        return
    run = report.parse(raw, str(report_file), log_tail_in(report_file.parent))
    if fmt == "prom":
        from imagesmith.stages import metrics

        text = metrics.exposition(metrics.run_metrics(run, hostname or metrics.hostname()).registry)
        _emit(text, out, f"Prometheus metrics of {sum(t.verify is not None for t in run.targets)} verified targets", run.ok)
        return
    _emit(report.render(run, fmt), out, f"{fmt} report of {len(run.targets)} targets", run.ok)


def _emit(text: str, out: Path | None, what: str, ok: bool) -> None:
    """A rendering to standard output, or atomically to ``out`` with one line saying what was written."""
    from imagesmith.atomic import write_text

    if out is None:
        click.echo(text, nl=False)
        return
    write_text(out, text)
    click.echo(f"{out}: {what} ({'ok' if ok else 'with failures'})", err=True)

