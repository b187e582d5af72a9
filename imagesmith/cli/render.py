"""``imagesmith render``: one build context per target."""

from __future__ import annotations

from pathlib import Path

import click

from imagesmith.cli.common import load_matrix, today
from imagesmith.cli.options import ALLOW_ROOT_OPTION, MATRIX_OPTION
from imagesmith.errors import UserError


@click.command("render")
@MATRIX_OPTION
@click.option("--out", default="build", show_default=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if what is on disk differs (content, modes, extra or missing files).")
@ALLOW_ROOT_OPTION
def render_cmd(matrix_file: Path, out: Path, check: bool, allow_roots: tuple[Path, ...]) -> None:
    """One build context per target (Dockerfile + files) under OUT/<target>/.

    Every Dockerfile is parsed back with BuildKit's parser and must hold only
    the instructions its template makes; nothing is written otherwise."""
    from imagesmith import pipeline

    done = pipeline.render(load_matrix(matrix_file, allow_roots), today(), out, check)
    if check:
        for line in done.drift:
            click.echo(f"drift: {line}", err=True)
        if done.drift:
            raise UserError(f"{len(done.drift)} rendered files differ from {matrix_file}; run imagesmith render --matrix {matrix_file} --out {out}")
        click.echo(f"OK: {done.contexts} build contexts in {out} match {matrix_file}")
        return
    click.echo(f"rendered {done.contexts} build contexts into {out}/")
