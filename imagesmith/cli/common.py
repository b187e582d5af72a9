"""What several commands share: the build date, the matrix as loaded (its warnings printed), the run's
credential store, the keys and the trust policy named on the command line, the release's vulnerability gate."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import click

from imagesmith.inert import inert
from imagesmith.model import matrix as matrix_mod
from imagesmith.model.ref import host_of

if TYPE_CHECKING:  # the stages import docker (through the engine) only when a command needs them
    from imagesmith.edges.credentials import CredentialStore
    from imagesmith.edges.signing import Key
    from imagesmith.stages.evidence.trust import TrustPolicy


def today() -> str:
    """The build date for tags: SOURCE_DATE_EPOCH if set (reproducible), else today (UTC)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    now = dt.datetime.fromtimestamp(int(epoch), dt.timezone.utc) if epoch else dt.datetime.now(dt.timezone.utc)
    return now.strftime("%Y%m%d")


def load_matrix(path: Path, allow_roots: Sequence[Path] = ()) -> matrix_mod.Matrix:
    m = matrix_mod.load(path, allowed_roots=allow_roots)
    for warning in m.warnings:
        click.secho(inert(str(warning)), fg="yellow", err=True)
    return m


def credential_store(release: str | None, stage: str | None, credentials_file: Path | None) -> CredentialStore:
    """The run's credential store, built once: ``release`` and ``stage`` are the registry hosts (or
    ``host/repo``) the operator declared; each credential is bound to its host."""
    from imagesmith.edges import credentials

    declared = credentials.Declared(host_of(release) if release else None, host_of(stage) if stage else None)
    return credentials.load_store(declared, os.environ, credentials_file)


def load_verifier_key(path: Path | None) -> Key | None:
    if path is None:  # no signing stack (cryptography) needed: verify --local runs on hosts without it
        return None
    from imagesmith.edges import signing

    return signing.load_signing_key(path, {})


def load_trust_policy(path: Path | None) -> TrustPolicy | None:
    from imagesmith.stages.evidence import trust

    return trust.load_policy(path) if path is not None else None


def load_signing_key(path: Path | None) -> Key | None:
    from imagesmith.edges import signing

    key = signing.load_signing_key(path, os.environ)
    if key is None:
        click.secho(f"warning: no signing key (--signing-key or {signing.ENV_KEY}): the evidence is attached unsigned", fg="yellow", err=True)
    return key


def vulnerability_gate(m: matrix_mod.Matrix) -> Any:
    """The release gate of sources.advisories (snapshots read once, before anything is pushed); None without one."""
    from imagesmith.stages.evidence import vulngate

    gate = vulngate.Gate.of(m)
    for s in gate.snapshots if gate else ():
        click.echo(inert(f"advisories: {s.location} ({s.digest}, {len(s.advisories)} records, newest {s.date or 'none'}); "
                   f"release threshold {m.vulnerabilities.threshold}"), err=True)
    for why in gate.stale() if gate else ():
        word = "error" if m.vulnerabilities.stale == "fail" else "warning"
        click.secho(inert(f"{word}: {why}" + (": no target is released" if word == "error" else "")), fg="red" if word == "error" else "yellow", err=True)
    return gate

