"""What ``doctor --release`` reads from Harbor's REST API (v2.0).

* ``GET /api/v2.0/systeminfo`` answers (without login) with ``harbor_version``:
  that is how a registry is known to be Harbor;
* ``GET /api/v2.0/projects/{project}/immutabletagrules`` (with
  ``X-Is-Resource-Name: true``) lists the project's tag-immutability rules:
  ``tag_selectors`` (decoration ``matches`` / ``excludes``) and
  ``scope_selectors.repository`` (``repoMatches`` / ``repoExcludes``), doublestar
  patterns matched against the tag and the repository name without its project.

* ``GET /api/v2.0/projects/{project}`` (with ``X-Is-Resource-Name: true``) answers the
  project, whose ``metadata`` holds strings: ``auto_scan`` ("true": scan on push),
  ``prevent_vul`` ("true": Harbor refuses to pull an image with a vulnerability of
  ``severity`` or worse: none, low, medium, high, critical), and whose ``cve_allowlist.items``
  lists the CVEs it lets through (``cve_id``).

A rule that matches a floating tag makes Harbor refuse to move it; one that
matches ``sha256-*`` tags blocks the signature (``.sig``) and referrers tags.
Matching is wcmatch's glob with globstar and braces (Harbor uses Go's
doublestar: ``*`` stops at ``/``, ``**`` does not, ``{a,b}`` alternates).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import requests
from wcmatch import glob

from imagesmith.edges.registry import Credentials
from imagesmith.errors import RegistryError

FLAGS = glob.GLOBSTAR | glob.BRACE | glob.DOTGLOB


@dataclass(frozen=True)
class Selector:
    decoration: str  # matches | excludes | repoMatches | repoExcludes
    pattern: str

    def selects(self, name: str) -> bool:
        hit = glob.globmatch(name, self.pattern, flags=FLAGS)
        return not hit if self.decoration in ("excludes", "repoExcludes") else hit


@dataclass(frozen=True)
class ImmutableRule:
    id: int
    disabled: bool
    tags: tuple[Selector, ...]
    repositories: tuple[Selector, ...]

    def blocks(self, repository: str, tag: str) -> bool:
        """Does this rule make ``repository:tag`` immutable (``repository`` without its project)?"""
        return (not self.disabled and all(s.selects(repository) for s in self.repositories)
                and all(s.selects(tag) for s in self.tags) and bool(self.tags))

    def describe(self) -> str:
        tags = ", ".join(f"{s.decoration} {s.pattern}" for s in self.tags)
        repos = ", ".join(f"{s.decoration} {s.pattern}" for s in self.repositories)
        return f"rule {self.id} (tags {tags}; repositories {repos or 'all'})"


def rules_from(doc: Any) -> tuple[ImmutableRule, ...]:
    """Harbor's ImmutableRule list as records (unknown selector kinds are kept as patterns)."""
    return tuple(ImmutableRule(r["id"] if isinstance(r.get("id"), int) and not isinstance(r["id"], bool) else 0, r.get("disabled") is True,
                               _selectors(r.get("tag_selectors")),
                               _selectors(r["scope_selectors"].get("repository") if isinstance(r.get("scope_selectors"), Mapping) else None))
                 for r in doc if isinstance(r, Mapping)) if isinstance(doc, list) else ()


def _selectors(value: Any) -> tuple[Selector, ...]:
    return tuple(Selector(str(s.get("decoration") or "matches"), str(s.get("pattern") or ""))
                 for s in value if isinstance(s, Mapping)) if isinstance(value, list) else ()


def blocked(rules: Sequence[ImmutableRule], repository: str, tags: Sequence[str]) -> dict[str, ImmutableRule]:
    """Each of ``tags`` that a rule makes immutable, with the first such rule."""
    out: dict[str, ImmutableRule] = {}
    for tag in tags:
        rule = next((r for r in rules if r.blocks(repository, tag)), None)
        if rule is not None:
            out[tag] = rule
    return out


HARBOR_SEVERITIES = ("none", "low", "medium", "high", "critical")


@dataclass(frozen=True)
class ScanPolicy:
    """A project's vulnerability settings as Harbor's API returns them."""

    auto_scan: bool
    prevent_vul: bool
    severity: str  # one of HARBOR_SEVERITIES ("" when unset)
    allowlist: tuple[str, ...] = ()  # CVE ids of the project's CVE allowlist


def scan_policy_from(doc: Any) -> ScanPolicy:
    """A Project document's ``metadata`` (string values, as Harbor stores them) and ``cve_allowlist``."""
    doc = doc if isinstance(doc, Mapping) else {}
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), Mapping) else {}
    allow = doc.get("cve_allowlist") if isinstance(doc.get("cve_allowlist"), Mapping) else {}
    items: Any = allow.get("items") if isinstance(allow.get("items"), list) else []
    severity = str(meta.get("severity") or "").lower()
    return ScanPolicy(str(meta.get("auto_scan", "")).lower() == "true", str(meta.get("prevent_vul", "")).lower() == "true",
                      severity if severity in HARBOR_SEVERITIES else "",
                      tuple(str(i.get("cve_id")) for i in items if isinstance(i, Mapping) and i.get("cve_id")))


class Harbor:
    """A Harbor instance at ``base`` (``https://harbor.example.com``)."""

    def __init__(self, base: str, credentials: Credentials | None, session: requests.Session | None = None,
                 verify: bool | str = True, timeout: float = 15.0) -> None:
        self.base, self.credentials, self.verify, self.timeout = base.rstrip("/"), credentials, verify, timeout
        self.session = session or requests.Session()

    def version(self) -> str | None:
        """Harbor's version; None when the host is not Harbor."""
        try:
            resp = self._get("/api/v2.0/systeminfo")
            version = _json(resp, "systeminfo").get("harbor_version") if resp.status_code == 200 else None
        except (requests.RequestException, RegistryError, AttributeError):
            return None
        return str(version) if version else None

    def immutable_rules(self, project: str) -> tuple[ImmutableRule, ...]:
        resp = self._get(f"/api/v2.0/projects/{project}/immutabletagrules", {"X-Is-Resource-Name": "true"})
        if resp.status_code != 200:
            raise HarborError(f"reading the tag-immutability rules of project {project}: HTTP {resp.status_code} "
                              f"({_message(resp)}); the account needs read access to the project's immutable tag rules")
        return rules_from(_json(resp, f"the tag-immutability rules of project {project}"))

    def scan_policy(self, project: str) -> ScanPolicy:
        resp = self._get(f"/api/v2.0/projects/{project}", {"X-Is-Resource-Name": "true"})
        if resp.status_code != 200:
            raise HarborError(f"reading project {project}: HTTP {resp.status_code} ({_message(resp)}); "
                              "the account needs read access to the project")
        return scan_policy_from(_json(resp, f"project {project}"))

    def _get(self, path: str, headers: Mapping[str, str] | None = None) -> requests.Response:
        auth = (self.credentials.username, self.credentials.password) if self.credentials else None
        return self.session.get(self.base + path, headers=dict(headers or {}), auth=auth, timeout=self.timeout, verify=self.verify)


class HarborError(RegistryError):
    """Harbor answered, but not with what was asked."""


def _json(resp: requests.Response, what: str) -> Any:
    """Harbor's answer through the one strict reader (bounded, strict JSON); HarborError naming ``what`` otherwise."""
    from imagesmith.model import loader

    try:
        return loader.parse_json_line(resp.content, f"Harbor's answer for {what}")
    except loader.LoadError as exc:
        raise HarborError(str(exc)) from None


def _message(resp: requests.Response) -> str:
    try:
        errors = _json(resp, "an error").get("errors") or []
        return "; ".join(str(e.get("message", "")) for e in errors if isinstance(e, Mapping)) or resp.reason or ""
    except (RegistryError, AttributeError, TypeError):
        return resp.reason or ""
