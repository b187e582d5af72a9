"""``imagesmith evidence``: what is attached to a digest; and the evidence table ``verify IMAGE`` prints too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from imagesmith.cli.common import credential_store
from imagesmith.cli.options import CREDENTIALS_OPTION, PUBLIC_KEY_OPTION, REGISTRY_CA_OPTION
from imagesmith.errors import UserError
from imagesmith.inert import inert
from imagesmith.table import print_table


@click.command("evidence")
@click.argument("ref")
@PUBLIC_KEY_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the evidence as JSON (schema imagesmith.evidence/1).")
@CREDENTIALS_OPTION
@REGISTRY_CA_OPTION
def evidence_cmd(ref: str, public_keys: tuple[Path, ...], as_json: bool, credentials_file: Path | None, registry_ca: Path | None) -> None:
    """What is attached to REF's digest (host/repository:tag or @sha256:...): SBOM, verification
    attestations, signatures; with --key every signature is verified.

    Exit 0: everything matches; 1: a signature, a subject digest or a blob does not match."""
    from imagesmith.edges import signing
    from imagesmith.model.ref import ImageRef
    from imagesmith.stages.evidence import evidence

    image = ImageRef.parse(ref)  # REF, parsed once: text that is no reference fails here (exit 1)
    keys = [signing.load_public_key(k) for k in public_keys]
    found = evidence.read(image, keys, credential_store(image.registry, None, credentials_file), registry_ca)
    if as_json:
        click.echo(json.dumps(found.to_json(), indent=2, sort_keys=True))
    else:
        print_evidence(found)
    if not found.ok:
        raise UserError(f"evidence of {found.name}@{found.digest} does not check out: {len(found.all_problems())} mismatch(es)")
    if not found.attestations and not found.signatures and not found.cosign:
        click.echo(f"nothing is attached to {found.name}@{found.digest}", err=True)


def print_evidence(found: Any) -> None:
    """The artifacts attached to a digest, their signatures, the verification summary, SBOM counts."""
    from imagesmith.stages.evidence.sbom import counts

    data = found.to_json()
    checked = "checked against " + ", ".join(k[:12] for k in found.keys) if found.keys else "not checked (no --key)"
    rows = [[a.kind, a.digest[:19], a.predicate_type or a.artifact_type, _signed(a.signatures, a.signed_by, found.keys),
             "; ".join(a.problems)[:100] or "ok"] for a in found.attestations]
    rows += [["signature", s.layer[:19], f"cosign simple signing of {s.claims[:19]}", _signed(1, s.signed_by, found.keys),
              "; ".join(s.problems)[:100] or "ok"] for s in found.signatures]
    rows += [[f"{a.kind} (.att)", a.layer[:19], a.predicate_type or a.artifact_type, _signed(a.signatures, a.signed_by, found.keys),
              "; ".join(a.problems)[:100] or "ok"] for a in found.cosign]
    print_table(f"evidence of {found.name}@{found.digest} (found via {found.discovery}; signatures {checked})",
                ["artifact", "digest", "type", "signed", "check"], rows)
    for v in data["verification"]:
        gpu = v.get("gpu") or {}
        where = f"{gpu.get('count')} × {gpu.get('model')}, driver {v.get('driver')}" if gpu else "CPU mode (no GPU)"
        m, s = v.get("measured") or {}, v.get("summary") or {}
        versions = " ".join(f"{k} {m.get(k) or '-'}" for k in ("torch", "cuda", "cudnn", "nccl", "python", "os"))
        click.echo(inert(f"verification: {'PASSED' if v.get('passed') else 'FAILED'} ({v.get('gpu_verification') or 'GPU verification not stated'}) "
                         f"{v.get('tier')} tier on {where}, {v.get('ran')}, at "
                         f"{v.get('started_at')}: {versions}; {s.get('pass')} pass, {s.get('warn')} warn, {s.get('fail')} fail, "
                         f"{s.get('skip')} skip"
                         + (f"; failed: {', '.join(v['failed_checks'])}" if v.get("failed_checks") else ""), one_line=True))
    for a in found.of_kind("sbom"):
        c = counts(a.statement.predicate) if a.statement else {}
        click.echo(inert(f"sbom: CycloneDX {c.get('spec_version')}, {c.get('components')} components: {c.get('python')} Python "
                         f"distributions, {c.get('deb')} Debian packages; base image {c.get('base_image')}", one_line=True))
    for v in data.get("vulnerabilities") or []:
        by = ", ".join(f"{v.get(k, 0)} {k}" for k in ("critical", "high", "medium", "low", "unknown"))
        click.echo(f"vulnerabilities: {by} ({v.get('allowed', 0)} allowed by the matrix)")
    for problem in found.all_problems():
        click.secho(inert(f"MISMATCH: {problem}", one_line=True), fg="red", err=True)


def _signed(count: int, signed_by: Any, keys: Any) -> str:
    if not count:
        return "unsigned"
    if not keys:
        return f"{count} signature(s), not checked"
    return f"yes ({', '.join(k[:12] for k in signed_by)})" if signed_by else "NO"

