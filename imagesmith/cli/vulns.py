"""``imagesmith vulns recheck``: the known vulnerabilities of every released tag, judged again after release."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Mapping

import click

from imagesmith.cli.common import credential_store, load_matrix, load_signing_key
from imagesmith.cli.options import ALLOW_ROOT_OPTION, CREDENTIALS_OPTION, MATRIX_OPTION, REGISTRY_CA_OPTION, SIGNING_KEY_OPTION
from imagesmith.errors import UsageError, UserError
from imagesmith.inert import inert
from imagesmith.table import print_table


@click.group("vulns")
def vulns_group() -> None:
    """Known vulnerabilities of what was released."""


@vulns_group.command("recheck")
@MATRIX_OPTION
@click.option("--advisories", "locations", multiple=True, metavar="SNAPSHOT",
              help="A newer OSV snapshot (an <ecosystem>/all.zip, a folder of OSV records, or an http(s) URL of a zip); "
                   "repeatable. Default: the matrix's sources.advisories.")
@click.option("--key", "public_keys", multiple=True, type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Public key (PEM) of the release: only an SBOM signed with it, on a digest signed with it, is read "
                   "(repeat for several signers). Required.")
@click.option("--hold-floating", is_flag=True,
              help="Move each floating tag off a digest now at or above the threshold to the newest clean release of its "
                   "line, signed with the release key (--signing-key), with this match's VEX attached to the held digest. "
                   "The one move backwards imagesmith makes, and only by this flag.")
@SIGNING_KEY_OPTION
@click.option("--out", default="build", show_default=True, type=click.Path(file_okay=False, path_type=Path),
              help="Where recheck.json, recheck.md and recheck.prom (Prometheus text format) go.")
@CREDENTIALS_OPTION
@REGISTRY_CA_OPTION
@ALLOW_ROOT_OPTION
def recheck_cmd(matrix_file: Path, locations: tuple[str, ...], public_keys: tuple[Path, ...], hold_floating: bool,
                signing_key: Path | None, out: Path, credentials_file: Path | None, registry_ca: Path | None,
                allow_roots: tuple[Path, ...]) -> None:
    """Match the SBOM attached to every released digest of the matrix's repository against newer advisories;
    write a report per released tag.

    Exit 0: no floating tag names a vulnerable (or unjudged) digest; 1: one does, or a snapshot is stale."""
    from imagesmith.edges import signing
    from imagesmith.edges.runcontext import RunContext
    from imagesmith.stages.evidence import vulngate
    from imagesmith.stages.release import recheck

    m = load_matrix(matrix_file, allow_roots)
    if not m.image.registry:
        raise UserError(f"{m.file.name}: image.registry is not set: recheck reads the release registry the matrix names")
    if not public_keys:
        raise UsageError("vulns recheck: give the release's public key (--key): only signed evidence is believed")
    key = load_signing_key(signing_key) if hold_floating else None
    if hold_floating and key is None:
        raise UsageError("--hold-floating moves floating tags: it signs with the release key (--signing-key or IMAGESMITH_SIGNING_KEY)")
    snapshots = vulngate.load_locations(locations or m.sources.advisories)
    if not snapshots:
        raise UsageError("vulns recheck: no advisories: give --advisories SNAPSHOT or set the matrix's sources.advisories")
    host = m.image.registry
    context = RunContext(credential_store(host, None, credentials_file))
    client = context.registry(host, context.store.for_host(host), ca_file=registry_ca)
    report = recheck.run(client, m.image.repository, m.tags, m.vulnerabilities, snapshots,
                         [signing.load_public_key(k) for k in public_keys], dt.datetime.now(dt.timezone.utc),
                         recheck.HoldOptions(key, m.tags) if key else None)
    paths = recheck.write(report, out)
    _print(report.to_json())
    click.echo(f"recheck report: {paths['json']} (summary: {paths['markdown']}, metrics: {paths['prometheus']})")
    if not report.ok:
        raise UserError("vulns recheck: " + "; ".join([*report.stale[:1], *report.unsafe()]))


def _print(doc: Mapping[str, Any]) -> None:
    rows = [[r["tag"], r["kind"], str(r["digest"])[:19], r["status"], "-" if r.get("blocking") is None else r["blocking"],
             (r.get("reason") or "")[:100]] for r in doc["tags"]]
    print_table(f"released tags of {doc['name']} against {len(doc['snapshots'])} snapshot(s)",
                ["tag", "kind", "digest", "status", "blocking", "why"], rows)
    for h in doc["floating"]:
        click.echo(inert(f"{h['tag']}: {h['action']}: {h['reason']}", one_line=True), err=True)
