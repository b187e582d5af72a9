"""``imagesmith fleet ...``: thin commands over the fleet stage (parse, call, print, exit code)."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import Any, Sequence

import click

from imagesmith.errors import UsageError
from imagesmith.inert import inert
from imagesmith.model import fleet as config
from imagesmith.model.matrix.records import TIERS
from imagesmith.table import print_table

FLEET_OPTION = click.option("--fleet", "fleet_file", default="fleet.yaml", show_default=True,
                            type=click.Path(dir_okay=False, path_type=Path), help="The fleet file.")


def load_fleet(path: Path) -> config.Fleet:
    fleet = config.load(path)
    for warning in fleet.warnings:
        click.secho(inert(str(warning)), fg="yellow", err=True)
    return fleet


@click.group("fleet")
def fleet_group() -> None:
    """Verify images on a GPU fleet (Slurm, Kubernetes) before floating tags move."""


@fleet_group.command("validate")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def validate_cmd(file: Path) -> None:
    """Check a fleet file: every error with file:line key.path, why, and what to write."""
    fleet = load_fleet(file)
    by = {s: [c.name for c in fleet.classes if c.scheduler == s] for s in config.SCHEDULERS}
    where = "; ".join(f"{s}: {', '.join(names)}" for s, names in by.items() if names)
    click.echo(f"OK: {len(fleet.classes)} classes ({where}); floating tags require {', '.join(fleet.require)}")


@fleet_group.command("render")
@click.argument("refs", nargs=-1, metavar="REF@sha256:...")
@FLEET_OPTION
@click.option("--tier", type=click.Choice(TIERS), default=None, help="Default: the class's, else the fleet file's tier.")
@click.option("--out", default="build/fleet", show_default=True, type=click.Path(file_okay=False, path_type=Path))
def render_cmd(refs: tuple[str, ...], fleet_file: Path, tier: str | None, out: Path) -> None:
    """Print what verify would submit, without submitting: each sbatch command
    line and batch script, each Kubernetes Job as YAML."""
    import os
    import shlex

    import yaml

    from imagesmith.pipeline.fleet import refs_of
    from imagesmith.stages.fleet import kubernetes, runner, slurm

    fleet = load_fleet(fleet_file)
    for job in runner.cell_jobs(fleet, refs_of(refs, None), out, "render", tier):
        click.echo(f"# --- {job.klass.name} x {job.ref}")
        if job.klass.slurm is not None:
            click.echo(shlex.join(slurm.sbatch_argv(job, os.environ)))
            click.echo(slurm.render_script(job, job.klass.slurm.imagesmith or slurm.default_imagesmith()))
        else:
            name = kubernetes.job_name(job, "xxxxxx")
            click.echo(yaml.safe_dump(kubernetes.to_dict(kubernetes.job_object(job, name)), sort_keys=False))


@fleet_group.command("verify")
@click.argument("refs", nargs=-1, metavar="REF@sha256:...")
@FLEET_OPTION
@click.option("--tier", type=click.Choice(TIERS), default=None, help="Default: the class's, else the fleet file's tier.")
@click.option("--class", "classes", multiple=True, help="Only this class (repeatable); default: every class.")
@click.option("--release", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Also verify every image this release report (release.json) pushed.")
@click.option("--out", default="build/fleet", show_default=True, type=click.Path(file_okay=False, path_type=Path),
              help="Job files, verify reports and fleet-report.json go here (on a filesystem the Slurm nodes share).")
@click.option("--registry", "registry", default=None, metavar="HOST",
              help="The registry the --release report's images are on: only then do their jobs get --credentials (a "
                   "report naming another host is refused); without it they pull without credentials.")
@click.option("--credentials", "credentials_file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Login file the Slurm jobs pull with (on the shared filesystem; as imagesmith verify --credentials: "
                   "each login for its host, a legacy user:password line for the REF's own host). Given to the jobs of "
                   "REFs named here, and of --release images only with --registry. Kubernetes uses the class's "
                   "image_pull_secret.")
@click.option("--poll", "poll_s", default=5.0, show_default=True, type=click.FloatRange(0.2, 300), help="Seconds between status polls.")
@click.option("--metrics", "metrics_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write every cell's figures as Prometheus metrics to this FILE.prom (atomically), for "
                   "node_exporter's textfile collector (docs/metrics.md).")
@click.option("--pushgateway", metavar="URL", default=None,
              help="Also push every cell's figures to this Prometheus Pushgateway, one group per class and image "
                   "(job=imagesmith, class=CLASS, digest=DIGEST).")
@click.option("--verifier-key", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="PEM ECDSA P-256 private key of this fleet's verifier: each cell's report is signed for its digest "
                   "and GPU class (verify.dsse.json beside its verify.json). publish believes a fleet result only when "
                   "signed by a verifier its trust policy names for that class; one key per class: --class C "
                   "--verifier-key C.key (docs/trust.md).")
@click.option("--run-id", "run_name", default=None, metavar="RUN",
              help="This run's id (letters, digits, '.', '_', '-'; e.g. the CI pipeline's), signed into every cell's "
                   "statement; publish --fleet-run RUN counts only its results. Default: the UTC time and a random suffix.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def verify_cmd(refs: tuple[str, ...], fleet_file: Path, tier: str | None, classes: tuple[str, ...], release: Path | None,
               out: Path, registry: str | None, credentials_file: Path | None, poll_s: float, metrics_file: Path | None,
               pushgateway: str | None, verifier_key: Path | None, run_name: str | None, quiet: bool) -> None:
    """Verify each REF@sha256:... on every GPU class of the fleet file: one
    job per (digest x class), progress as it goes, one fleet report at the end.
    Exit 0 only if every cell passed; Ctrl-C cancels every job (exit 130)."""
    from imagesmith.pipeline.fleet import FleetJob, check_outputs, run_fleet
    from imagesmith.stages.fleet import runner
    from imagesmith.stages.fleet.gate import RUN_ID

    check_outputs(metrics_file, pushgateway)
    fleet = load_fleet(fleet_file)
    if run_name is not None and not RUN_ID.fullmatch(run_name):
        raise UsageError(f"--run-id {run_name[:80]!r}: letters, digits, '.', '_' and '-' only, at most 64, e.g. 20261130T101500Z-1a2b3c")
    job = FleetJob(fleet, refs, out, release, tier, classes, registry, credentials_file, poll_s, metrics_file, pushgateway,
                   verifier_key, run_name)
    try:
        run_fleet(job, (lambda line: None) if quiet else _say, lambda cells: _finished(cells, quiet, out))
    except runner.Interrupted as stop:
        _print_cells(stop.report.cells, quiet)
        click.echo(f"interrupted: cancelled {len(stop.cancelled)} jobs ({', '.join(stop.cancelled) or 'none'}); "
                   f"fleet report {out / runner.REPORT_NAME}", err=True)
        sys.exit(130)


def _say(line: str) -> None:
    click.echo(f"{dt.datetime.now():%H:%M:%S} {inert(line, one_line=True)}", err=True)


def _finished(cells: Sequence[Any], quiet: bool, out: Path) -> None:
    from imagesmith.stages.fleet.runner import REPORT_NAME

    _print_cells(cells, quiet)
    click.echo(f"fleet report: {out / REPORT_NAME}")


def _print_cells(cells: Sequence[Any], quiet: bool) -> None:
    if quiet:
        return
    print_table("fleet verification", ["image", "class", "result", "job", "state", "queued", "ran", "detail"],
                [[c.digest[7:19], c.klass, c.status.upper(), c.job_id or "-", c.state or "-", _secs(c.queued_s),
                  _secs(c.ran_s), c.reason[:140]] for c in cells])


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}s"


# -- the publish gate's options (used by build --push and publish) -------------------------------------


def gate_options(command: Any) -> Any:
    """``--fleet`` (the rule), ``--fleet-report`` (the evidence) and ``--fleet-run`` (which runs count) for a command
    that moves floating tags."""
    command = click.option("--fleet-run-since", "fleet_since", default=None, metavar="RUN",
                           help="Also count the signed results of every fleet run whose id sorts at or after RUN (the last "
                                "run accepted; fleet verify's own ids begin with their UTC start time).")(command)
    command = click.option("--fleet-run", "fleet_runs", multiple=True, metavar="RUN",
                           help="The fleet run(s) whose signed results count (fleet verify prints its run; --run-id sets "
                                "it); needed with --fleet-report (or --fleet-run-since): a result signed for another run "
                                "is left out (repeatable).")(command)
    command = click.option("--fleet-report", "fleet_reports", multiple=True,
                           type=click.Path(dir_okay=False, exists=True, path_type=Path),
                           help="Fleet report(s) of imagesmith fleet verify: floating tags move only to digests whose "
                                "signed results passed on every required class (repeatable; the newest signed result "
                                "of each class wins).")(command)
    return click.option("--fleet", "gate_fleet", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
                        help="Fleet file whose floating.require classes (with each class's GPU model and count) a digest "
                             "must have passed (see --fleet-report); without it, the trust policy's fleet section; "
                             "without a report every floating tag is held back.")(command)


def floating_gate(fleet_file: Path | None, reports: Sequence[Path], policy: Any = None, runs: Sequence[str] = (),
                  since: str | None = None) -> Any:
    """The gate publish calls per digest, or None when no fleet option was given; with the release's trust
    ``policy`` it believes only signed fleet results of the ``runs`` named, or of a run since ``since`` (gate.believed)."""
    from imagesmith.stages.fleet.gate import load_gate

    gate = load_gate(fleet_file, reports, policy, runs, since=since)
    return gate.held_back if gate is not None else None
