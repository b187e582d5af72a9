"""What ``build --push`` and ``publish`` share: the release table and its verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from imagesmith.errors import UserError
from imagesmith.inert import inert
from imagesmith.table import print_table

if TYPE_CHECKING:
    from imagesmith.stages.release.publish import ReleaseRun


def finish_release(rel: ReleaseRun, quiet: bool) -> None:
    """Print what was released and where the report is; exit 1 if any target was not released."""
    if not quiet:
        print_table(f"release to {rel.registry}/{rel.repository} ({rel.seconds:.1f}s)",
                    ["target", "status", "reference", "digest", "floating", "verified", "evidence"],
                    [[t.target, t.status, t.reference or "-", (t.digest or "-")[:19], " ".join(t.floating) or "-",
                      t.verified_how()[:90], _evidence_cell(t.evidence)] for t in rel.targets])
        unvetted = [t.reference for t in rel.targets if t.status in ("pushed", "unchanged") and t.gpu_verified is False]
        if unvetted:
            click.secho(f"{len(unvetted)} CUDA image(s) not GPU-verified (verified without a GPU): immutable tag only, "
                        f"no floating tag: {', '.join(unvetted)}", fg="yellow", err=True)
        for f in rel.floating:
            if f.action in ("kept", "failed"):
                click.echo(inert(f"{f.reference}: {f.action}: {f.reason}", one_line=True), err=True)
    click.echo(f"release report: {rel.paths['json']} (summary: {rel.paths['markdown']})")
    problems = rel.errors + [f"{t.target}: {t.error}" for t in rel.targets if t.error and t.status != "not-pushed"]
    stopped = sum(t.status == "not-pushed" for t in rel.targets)
    if stopped:
        problems.append(f"{stopped} verified targets were not pushed because the release stopped; fix the above and run it again")
    if not rel.ok:
        raise UserError("release incomplete:\n  " + "\n  ".join(problems or ["a floating tag could not be moved (see above)"]))


def _evidence_cell(attached: dict[str, Any]) -> str:
    artifacts = attached.get("artifacts") or []
    if not artifacts:
        return "-"
    pushed = sum(a["status"] == "pushed" for a in artifacts)
    signed = "signed" if any(a.get("kind") == "signature" for a in artifacts) else "UNSIGNED"
    return f"{pushed} pushed, {len(artifacts) - pushed} unchanged ({signed})"

