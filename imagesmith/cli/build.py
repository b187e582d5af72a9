"""``imagesmith build``: render and build every target; with --verify/--push the release pipeline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from imagesmith.cli.common import credential_store, load_matrix, today
from imagesmith.cli.options import ALLOW_ROOT_OPTION, MATRIX_OPTION, ReleaseArgs, release_options
from imagesmith.cli.release import finish_release
from imagesmith.cli.verification import print_outcomes
from imagesmith.errors import UsageError
from imagesmith.inert import inert
from imagesmith.model import plan as plan_mod
from imagesmith.table import print_table
from imagesmith.units import gb

if TYPE_CHECKING:
    from imagesmith.model.buildreport import BuildReport, Staged
    from imagesmith.pipeline import RunOutcome
    from imagesmith.progress import Display


@click.command("build")
@MATRIX_OPTION
@click.option("--out", default="build", show_default=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--jobs", "-j", default=2, show_default=True, type=click.IntRange(1, 64), help="Targets built at once.")
@click.option("--only", multiple=True, help="Targets whose id contains this (with their ancestors); repeatable.")
@click.option("--layer", "layers", multiple=True, help="Only this layer (with its ancestors); repeatable.")
@click.option("--verify", "do_verify", is_flag=True, help="Verify each built image (the matrix's verify: settings).")
@click.option("--prune/--no-prune", default=True, show_default=True,
              help="After a fully successful build, remove builder stages and superseded cache entries of these targets.")
@click.option("--push", is_flag=True, help="Verify each built image, then tag and push those that passed.")
@click.option("--date", default=None, help="Build date for tags (YYYYMMDD); default today.")
@click.option("--stage", "stage_repo", default=None, metavar="REGISTRY/REPO",
              help="Push every image to this staging repository (content tag ctx-<context hash>, never a release tag) and "
                   "record its digest in OUT/<target>/build.json; ancestors come from their jobs' artifacts in OUT or from "
                   "staging (pulled by digest) instead of being rebuilt.")
@release_options(verifier_key=True)
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@click.option("--json", "as_json", is_flag=True, help="Print the build (or run) report as JSON on stdout.")
@ALLOW_ROOT_OPTION
def build_cmd(matrix_file: Path, out: Path, jobs: int, only: tuple[str, ...], layers: tuple[str, ...],
              do_verify: bool, prune: bool, push: bool, date: str | None, stage_repo: str | None, release_args: ReleaseArgs,
              quiet: bool, as_json: bool, allow_roots: tuple[Path, ...]) -> None:
    """Render and build every target, parents first, reusing what is cached;
    with --push also verify, tag and push (the release pipeline)."""
    from imagesmith import pipeline
    from imagesmith.edges.runcontext import RunContext

    if push and (release_args.verifier_key is None or release_args.trust_policy is None):
        raise UsageError(f"build --push: {pipeline.NEEDS_TRUST}")
    m, date = load_matrix(matrix_file, allow_roots), date or today()
    store = credential_store(m.image.registry, stage_repo, release_args.credentials_file)
    release = release_args.options(store, push and release_args.with_evidence, m if push else None)
    job = pipeline.BuildJob(m, plan_mod.expand(m, date), out, only, layers, jobs, prune, stage_repo, store, release_args.registry_ca)
    pipeline.run_build(RunContext(store), pipeline.BuildRun(job, date, do_verify, push, release), Printer(out, quiet, as_json))


class Printer:
    """A build as the command shows it (:class:`imagesmith.pipeline.build.BuildPrinter`)."""

    def __init__(self, out: Path, quiet: bool, as_json: bool) -> None:
        self.out, self.quiet, self.as_json = out, quiet, as_json

    def display(self, title: str) -> Display:
        from imagesmith.progress import make_display

        return make_display(title, self.quiet or self.as_json)

    def built(self, report: BuildReport, more: bool) -> None:
        _print_build(report, self.out, self.quiet, self.as_json and not more)

    def verified(self, done: RunOutcome) -> None:
        if self.as_json:
            click.echo(done.run_report.read_text())
        elif not self.quiet:
            print_outcomes(done.outcomes)
        if done.release is not None:
            finish_release(done.release, self.quiet or self.as_json)
        click.echo(f"run report: {done.run_report}", err=True)


def _print_build(report: "Any", out: Path, quiet: bool, as_json: bool) -> None:
    from imagesmith.stages.building import buildreport

    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
        return
    for line in buildreport.failure_summary(report):
        click.echo(inert(line), err=True)
    if not quiet:
        staged = any(r.staged for r in report.results)
        print_table(f"build: {report.seconds:.1f}s, report in {out / 'report.json'}",
                    ["target", "status", "seconds", "size", "image", *(["staged"] if staged else [])],
                    [[r.target, r.status, f"{r.seconds:.1f}", gb(r.size_bytes) if r.size_bytes else "-",
                      (r.image_id or "-")[:19], *([_staged_cell(r.staged)] if staged else [])] for r in report.results])


def _staged_cell(staged: Staged | None) -> str:
    if not staged:
        return "-"
    how = "from its job's artifact" if staged.adopted else "pushed" if staged.pushed else "already there"
    return f"{staged.digest[:19]} ({how})"

