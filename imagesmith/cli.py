"""The command line. Commands are thin: parse, call a stage, print, exit code.

Exit codes: 0 success; 1 a user error or a failed check (one clear message);
2 bad usage (click); 3 a bug (traceback written to a log file).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Sequence

import click

from imagesmith import __version__, compat
from imagesmith import matrix as matrix_mod
from imagesmith import plan as plan_mod
from imagesmith import render as render_mod
from imagesmith.errors import ImagesmithError, UserError
from imagesmith.table import print_table

MATRIX_OPTION = click.option("--matrix", "-m", "matrix_file", default="matrix.yaml", show_default=True,
                             type=click.Path(dir_okay=False, path_type=Path), help="The matrix file.")


def today() -> str:
    """The build date for tags: SOURCE_DATE_EPOCH if set (reproducible), else today (UTC)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    now = dt.datetime.fromtimestamp(int(epoch), dt.timezone.utc) if epoch else dt.datetime.now(dt.timezone.utc)
    return now.strftime("%Y%m%d")


def load_matrix(path: Path) -> matrix_mod.Matrix:
    m = matrix_mod.load(path)
    for warning in m.warnings:
        click.secho(str(warning), fg="yellow", err=True)
    return m


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="imagesmith")
def cli() -> None:
    """Matrix in, vetted PyTorch/CUDA images out: validate, plan, render,
    build, verify, tag and push."""


# -- matrix / plan / render / compat ----------------------------------------------------


@cli.group("matrix")
def matrix_group() -> None:
    """Work with matrix files."""


@matrix_group.command("validate")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--date", default=None, help="Build date for tags (YYYYMMDD); default today.")
def validate_cmd(file: Path, date: str | None) -> None:
    """Check FILE against the schema and the knowledge base."""
    m = load_matrix(file)
    p = plan_mod.expand(m, date or today())
    click.echo(f"OK: {len(m.cells)} cells, {len(p.targets)} targets")


@cli.command("plan")
@MATRIX_OPTION
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Also write plan.json here.")
@click.option("--date", default=None, help="Build date for tags (YYYYMMDD); default today.")
def plan_cmd(matrix_file: Path, fmt: str, out: Path | None, date: str | None) -> None:
    """Every build target with its parent, resolved versions and tags."""
    p = plan_mod.expand(load_matrix(matrix_file), date or today())
    if out:
        plan_mod.write(p, out)
    if fmt == "json":
        click.echo(json.dumps(plan_mod.to_json(p), indent=2, sort_keys=True))
        return
    print_table(
        f"{len(p.targets)} targets from {matrix_file}",
        ["target", "parent", "torch", "vision", "cuda", "cudnn", "nccl", "py", "os", "base image", "torch index", "tag", "floating"],
        [[t.id, t.parent or "-", t.versions.torch, t.versions.torchvision or "-", t.versions.cuda,
          t.versions.cudnn or "-", t.versions.nccl or "-", t.versions.python, t.versions.os,
          t.base_image, t.pip.torch_index_url, t.tag, " ".join(t.floating) or "-"] for t in p.targets],
    )


@cli.command("render")
@MATRIX_OPTION
@click.option("--out", default="build", show_default=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if what is on disk differs (drift).")
def render_cmd(matrix_file: Path, out: Path, check: bool) -> None:
    """One build context per target (Dockerfile + files) under OUT/<target>/."""
    m = load_matrix(matrix_file)
    contexts = render_mod.render_all(plan_mod.expand(m, today()), m)
    if check:
        drift = render_mod.check(contexts, out)
        for line in drift:
            click.echo(f"drift: {line}", err=True)
        if drift:
            raise UserError(f"{len(drift)} rendered files differ from {matrix_file}; run imagesmith render --matrix {matrix_file} --out {out}")
        click.echo(f"OK: {len(contexts)} build contexts in {out} match {matrix_file}")
        return
    render_mod.write(contexts, out)
    click.echo(f"rendered {len(contexts)} build contexts into {out}/")


@cli.command("compat")
@click.option("--torch", "torch_filter", help="A release line (2.9) or exact version (2.9.1).")
@click.option("--cuda", "cuda_filter", help="Only variants for this CUDA version (or cpu).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def compat_cmd(torch_filter: str | None, cuda_filter: str | None, fmt: str) -> None:
    """The compatibility knowledge base as a table."""
    kb = compat.load()
    rows = compat_rows(kb, torch_filter, cuda_filter)
    if torch_filter and not rows:
        raise UserError(f"no torch {torch_filter} in the knowledge base; known: {', '.join(kb.torch_lines())}")
    if fmt == "json":
        keys = ["torch", "python", "variant", "cuda", "cudnn", "nccl", "torchvision", "torchaudio", "arch", "driver_min", "driver_toolkit", "index"]
        click.echo(json.dumps([dict(zip(keys, r)) for r in rows], indent=2))
        return
    print_table("PyTorch compatibility (Linux x86_64 wheels)",
                ["torch", "python", "variant", "cuda", "cudnn", "nccl", "vision", "audio", "arch", "min driver", "toolkit driver", "index"],
                rows)


def compat_rows(kb: compat.KnowledgeBase, torch_filter: str | None, cuda_filter: str | None) -> list[list[str]]:
    rows = []
    for version in kb.torch_versions():
        release = kb.torch[version]
        if torch_filter and not (version == torch_filter or release.line == torch_filter):
            continue
        for variant in release.variants.values():
            if cuda_filter and (variant.cuda or "cpu") != cuda_filter:
                continue
            cuda = kb.cuda.get(variant.cuda or "")
            rows.append([version, f"{release.python[0]}-{release.python[-1]}" if release.python else "-",
                         variant.name, variant.cuda or "cpu", variant.cudnn or "-", variant.nccl or "-",
                         release.torchvision or "-", release.torchaudio or "-", " ".join(variant.arch) or "-",
                         cuda.min_driver if cuda else "-", cuda.toolkit_driver if cuda else "-", variant.index])
    return rows


# -- entry point --------------------------------------------------------------------------------


def _crash_log() -> Path:
    folder = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "imagesmith"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        folder = Path(tempfile.gettempdir())
    return folder / f"crash-{dt.datetime.now():%Y%m%d-%H%M%S}.log"


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point: user errors exit 1 with one message; bugs exit 3."""
    try:
        code = cli.main(args=list(argv) if argv is not None else None, prog_name="imagesmith", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except ImagesmithError as exc:
        click.secho(f"error: {exc}" if "\n" not in str(exc) else str(exc), fg="red", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except Exception:  # a bug: keep the traceback, say where
        log = _crash_log()
        log.write_text(traceback.format_exc())
        click.secho(f"imagesmith hit a bug: {sys.exc_info()[1]!r}; traceback in {log}", fg="red", err=True)
        sys.exit(3)
    sys.exit(code if isinstance(code, int) else 0)

