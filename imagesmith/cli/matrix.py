"""``imagesmith matrix ...``: work with matrix files."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import click

from imagesmith.cli.common import load_matrix, today
from imagesmith.cli.options import ALLOW_ROOT_OPTION
from imagesmith.inert import inert
from imagesmith.model import matrix as matrix_mod
from imagesmith.model import plan as plan_mod
from imagesmith.render import contexts as render_mod


@click.group("matrix")
def matrix_group() -> None:
    """Work with matrix files."""


@matrix_group.command("validate")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--date", default=None, help="Build date for tags (YYYYMMDD); default today.")
@ALLOW_ROOT_OPTION
def validate_cmd(file: Path, date: str | None, allow_roots: tuple[Path, ...]) -> None:
    """Check FILE against the schema and the knowledge base, and render every
    target in memory (nothing is written), so what passes here renders.

    Lists the templates of the matrix's own folder it ran: they are code."""
    from imagesmith import pipeline

    m = load_matrix(file, allow_roots)
    p = pipeline.validate(m, date or today())
    on = dt.datetime.strptime(date or today(), "%Y%m%d").date()
    _early_vulnerabilities(m, p, on, None if date else dt.datetime.now(dt.timezone.utc))
    click.echo(f"OK: {len(m.cells)} cells, {len(p.targets)} targets")
    for layer, path, refs in render_mod.user_templates(m):
        uses = f" (with {', '.join(refs)})" if refs else ""
        click.echo(f"runs template {path}{uses} for layer {layer}: code from the matrix's folder, rendered in Jinja's sandbox")


def _early_vulnerabilities(m: matrix_mod.Matrix, p: plan_mod.Plan, on: dt.date, now: dt.datetime | None) -> None:
    """The advisories of sources.advisories that hit the plan's pins: warnings, or errors (exit 1)
    at or above vulnerabilities.threshold and not allowed; a snapshot older than vulnerabilities.max_age
    (at ``now``, else the end of --date's day): an error, or a warning with vulnerabilities.stale: warn."""
    from imagesmith.errors import ValidationError
    from imagesmith.stages.evidence import vulngate

    if not m.sources.advisories and not m.vulnerabilities.allow:
        return
    found = vulngate.early(m, p, on, vulngate.load_snapshots(m), now)  # no snapshots: only the allowances' expiry is checked
    for s in found.snapshots:
        click.echo(inert(f"advisories: {s.location} ({s.digest}, {len(s.advisories)} records, newest {s.date or 'none'})"
                   + "".join(f"; {n}" for n in s.notes)))
    for w in found.warnings:
        click.secho(inert(str(w)), fg="yellow", err=True)
    if found.errors:
        raise ValidationError(problems=list(found.errors))

