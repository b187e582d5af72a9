"""What ``imagesmith doctor --release`` asks the release registry itself: may the release's login push to the
repository (a blob upload started and cancelled), is it Harbor, and with which tag-immutability rules and scan
policy in the project."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

from imagesmith.edges import credentials
from imagesmith.edges import harbor as harbor_api
from imagesmith.errors import UserError


@dataclass(frozen=True)
class ReleaseFacts:
    """What ``doctor --release`` learnt from the registry itself."""

    push_error: str | None = None  # None: a blob upload was accepted (and cancelled)
    harbor: str | None = None  # Harbor's version; None: not Harbor
    rules: tuple[harbor_api.ImmutableRule, ...] = ()
    rules_error: str | None = None
    scan: harbor_api.ScanPolicy | None = None  # the project's scan-on-push and prevent-vulnerable settings
    scan_error: str | None = None


def probe_release(host: str, repository: str, environ: Mapping[str, str], credentials_file: Path | None = None) -> ReleaseFacts:
    """Ask the registry: may these credentials push to ``repository``? Is it Harbor, and
    with which tag-immutability rules in the project?"""
    from imagesmith.edges.runcontext import RunContext

    try:
        context = RunContext(credentials.release_store(host, environ, credentials_file))
        client = context.registry(host, context.store.for_host(host))
        client.check_push(repository)
        push_error = None
    except UserError as exc:
        return ReleaseFacts(push_error=str(exc))
    api = harbor_api.Harbor(client.url(""), client.credentials, client.session, client.verify)
    version = api.version()
    if version is None:
        return ReleaseFacts(push_error)
    project = repository.split("/", 1)[0]
    try:
        facts = ReleaseFacts(push_error, version, api.immutable_rules(project))
    except (UserError, ValueError, OSError) as exc:
        facts = ReleaseFacts(push_error, version, rules_error=str(exc))
    try:
        return replace(facts, scan=api.scan_policy(project))
    except (UserError, ValueError, OSError) as exc:  # requests' errors are OSErrors
        return replace(facts, scan_error=str(exc))
