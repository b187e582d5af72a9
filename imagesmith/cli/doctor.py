"""``imagesmith doctor``: can this host build and verify?"""

from __future__ import annotations

import json
from pathlib import Path

import click

from imagesmith.cli.options import ALLOW_ROOT_OPTION, CREDENTIALS_OPTION
from imagesmith.errors import UserError
from imagesmith.table import print_table


@click.command("doctor")
@click.option("--matrix", "-m", "matrix_file", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="Check the host against this matrix (default: ./matrix.yaml when there is one).")
@click.option("--release", is_flag=True, help="This host also publishes: a missing registry login is a failure, not a warning.")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON (schema imagesmith.doctor/1).")
@ALLOW_ROOT_OPTION
@CREDENTIALS_OPTION
@click.pass_context
def doctor_cmd(ctx: click.Context, matrix_file: Path | None, release: bool, as_json: bool, allow_roots: tuple[Path, ...],
               credentials_file: Path | None) -> None:
    """Can this host build and verify? Docker engine, NVIDIA runtime/CDI, GPUs,
    driver against the matrix's CUDA versions, free disk, registry login.

    Every problem comes with the command that fixes it. Exit 0: ready; 1: not ready."""
    from imagesmith.stages.tools import doctor

    if matrix_file is not None and not matrix_file.is_file():
        raise UserError(f"{matrix_file}: no such file")
    results = doctor.diagnose(matrix=matrix_file, publish=release, allowed_roots=allow_roots, credentials_file=credentials_file)
    if as_json:
        click.echo(json.dumps(doctor.to_json(results), indent=2))
    else:
        print_table("imagesmith doctor", ["check", "status", "detail"], doctor.table_rows(results))
        fixes = doctor.fix_lines(results)
        if fixes:
            click.echo("to fix:\n" + "\n".join(fixes))
        click.secho(doctor.verdict(results), fg="green" if doctor.ready(results) else "red", bold=True)
    ctx.exit(doctor.exit_code(results))

