"""What ``imagesmith verify`` shows, and the verification tables ``build --verify`` prints too: a table per image,
its verdict lines, every image's outcome of a build; :class:`Printer` shows a verify run as it goes on."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import click

from imagesmith.cli.evidence import print_evidence
from imagesmith.inert import inert
from imagesmith.table import print_table

if TYPE_CHECKING:
    from imagesmith.model.verifyreport import VerifyReport
    from imagesmith.pipeline.runreport import RunOutcome
    from imagesmith.pipeline.verify import AttachedEvidence
    from imagesmith.progress import Display
    from imagesmith.stages.verify.verify import VerifyOutcome


class Printer:
    """A verify run as the command shows it (:class:`imagesmith.pipeline.verify.VerifyPrinter`); ``quiet``: errors,
    notes and what decided a reuse only."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def note(self, line: str) -> None:
        click.secho(inert(f"note: {line}"), fg="yellow", err=True)

    def progress(self, local: bool) -> Callable[[str], None] | None:
        if self.quiet:
            return None
        return (lambda line: click.echo(line, err=True)) if local else (lambda line: click.echo(inert(line), err=True))

    def display(self, title: str) -> Display:
        from imagesmith.progress import make_display

        return make_display(title, self.quiet)

    def evidence(self, attached: AttachedEvidence, tier: str) -> None:
        if attached.note:
            self.note(attached.note)
        if attached.found is None:
            return
        if not self.quiet:
            print_evidence(attached.found)
        for reason in attached.why_not:
            click.echo(inert(f"not reused: {reason}; running again", one_line=True), err=True)
        if attached.reused is not None:
            found = attached.found
            click.echo(f"reusing the signed verification {attached.match.digest} of {found.name}@{found.digest} "
                       f"({tier} tier, {attached.gpu_model or 'CPU mode'}): not run again", err=True)

    def report(self, report: VerifyReport, json_out: Path | None) -> None:
        if not self.quiet:
            print_verify(report, json_out)

    def outcomes(self, done: RunOutcome) -> None:
        if not self.quiet:
            print_outcomes(done.outcomes)
            click.echo(f"run report: {done.run_report}", err=True)

    def signed(self, statement: Path) -> None:
        if not self.quiet:
            click.echo(f"signed statement: {statement}", err=True)


def print_outcomes(outcomes: Mapping[str, VerifyOutcome]) -> None:
    from imagesmith.model import policy
    from imagesmith.pipeline.verify import verify_failures

    rows = []
    for target, o in outcomes.items():
        s = o.report.summary
        rows.append([target, "passed" if o.ok else "FAILED", policy.how_verified(o.report), s.get("pass", 0), s.get("warn", 0),
                     s.get("fail", 0), s.get("skip", 0), verify_failures(o.report) if not o.ok else "-"])
    print_table("verification", ["target", "result", "mode", "pass", "warn", "fail", "skip", "failed checks"], rows)


def mode_line(report: VerifyReport) -> str:
    """Which mode ran and why, for the first line of the verify table."""
    from imagesmith.model import policy

    reason = (report.mode.reason if report.mode else None) or "mode unknown: the payload did not report"
    cuda = report.environment.cuda
    ev = policy.evidence(report)
    if cuda and not ev.gpu_verified and policy.NOT_GPU_VERIFIED not in reason:
        reason += f" ({policy.NOT_GPU_VERIFIED})"
    return reason


DETAIL_WIDTH = 110  # characters of a check's detail shown in the table


def print_verify(report: VerifyReport, json_out: Path | None) -> None:
    env, s = report.environment, report.summary
    image = report.image.ref if report.image and report.image.ref is not None else "this host"
    on = f" on {report.engine_name} {report.engine_version}" if report.engine_name else ""
    title = (f"verify {image}{on} ({report.tier or None}), {mode_line(report)}: torch {env.torch} cuda {env.cuda} "
             f"driver {env.driver} - {s.get('pass', 0)} pass, {s.get('warn', 0)} warn, {s.get('fail', 0)} fail, "
             f"{s.get('skip', 0)} skip, {s.get('inconclusive', 0)} inconclusive in {report.wall_s or 0:.1f}s"
             + (f"; report {json_out}" if json_out else ""))
    rows = [[c.id, c.status, _fmt(c.value), _fmt(c.threshold), c.unit, _fmt(c.percent_of_baseline), c.detail[:DETAIL_WIDTH]]
            for c in report.checks]
    print_table(title, ["check", "status", "value", "threshold", "unit", "% base", "detail"], rows)
    for c in report.checks:  # a failure's reason and fix in full: the table cuts them
        if c.status == "fail" and len(c.detail) > DETAIL_WIDTH:
            click.secho(inert(f"{c.id}: {c.detail}"), fg="red", err=True)
    print_verdict(report)
    for note in report.notes:
        click.secho(inert(f"note: {note}"), fg="yellow", err=True)


def print_verdict(report: VerifyReport) -> None:
    """The last lines: which digest passed or failed, and whether the GPUs were this run's alone."""
    from imagesmith.model import policy
    from imagesmith.stages.verify import verify

    passed = verify.VerifyOutcome(report).ok
    shared = policy.evidence(report).exclusive is False and not (report.sharing and report.sharing.allowed)
    word = "FAILED verification" if not passed else "NOT VERIFIED (the GPU was shared)" if shared else "verified"
    digests = report.image.digests if report.image else ()
    for digest in digests:
        click.echo(inert(f"{word}: {digest}" if word != "verified" else f"verified {digest}", one_line=True))
    sharing = policy.sharing_line(report) if policy.evidence(report).mode == "gpu" else ""  # CPU mode: no GPU to share
    if sharing:
        click.secho(inert(sharing, one_line=True), fg="yellow" if "not exclusive" in sharing else None)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)

