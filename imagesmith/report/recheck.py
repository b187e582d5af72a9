"""``vulns recheck``'s report as Markdown (a CI job summary) and as Prometheus series, from its JSON
(``imagesmith.recheck/1``, :mod:`imagesmith.stages.release.recheck`). Pure.

Every text in it came from a registry or a snapshot another party wrote: Markdown cells go through
:func:`imagesmith.report.markdown.cell`; label values are bounded here and escaped by prometheus-client.

Series (one set per released tag, labels ``repository``, ``tag``, ``kind`` = immutable | floating, ``digest``):

* ``imagesmith_vulnerabilities{…, severity}``: the vulnerabilities (findings: one per vulnerability, however many
  records name it) of the digest the tag names, by severity;
* ``imagesmith_vulnerabilities_blocking{…}``: how many of them are at or above the threshold and not allowed;
* ``imagesmith_vulnerabilities_judged{…}``: 1 when the digest's signed SBOM was matched, 0 when it could not be;
* ``imagesmith_vulnerabilities_snapshot_age_seconds{snapshot}``: how old each snapshot's newest record was;
* ``imagesmith_vulnerabilities_recheck_timestamp_seconds``: when the recheck ran.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Mapping

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from imagesmith.report.markdown import Code, cell, section, table

SEVERITIES = ("critical", "high", "medium", "low", "unknown")
MAX_LABEL = 200
ICONS = {"clean": "✅", "vulnerable": "❌", "not-judged": "⚠️"}


def to_markdown(doc: Mapping[str, Any]) -> str:
    """The recheck as a CI job summary: each released tag with its verdict, the floating tags held back, the findings."""
    icon = "✅" if doc.get("ok") else "❌"
    lines = [f"## {icon} imagesmith vulns recheck: {cell(doc.get('name'))}", "",
             cell(f"checked at {doc.get('checked_at')} against " + ", ".join(
                 f"{s.get('location')} ({s.get('advisories')} records, newest {s.get('date')})" for s in doc.get("snapshots") or [])
                  + f"; threshold {doc.get('threshold')}"), ""]
    lines += [f"**stale:** {cell(s)}" for s in doc.get("stale") or []] + ([""] if doc.get("stale") else [])
    lines += [*table(["tag", "kind", "digest", "status", "vulnerabilities", "blocking", "why"],
                     [[Code(r["tag"]), r["kind"], Code(str(r["digest"])[:19]), f"{ICONS.get(r['status'], '')} {r['status']}",
                       _counts(r.get("counts")), "-" if r.get("blocking") is None else r["blocking"], r.get("reason") or ""]
                      for r in doc.get("tags") or []]), ""]
    lines += section("Floating tags", ["tag", "action", "from", "to", "why"],
                     [[Code(h["tag"]), h["action"], Code(h["previous"][:19]), Code(h["digest"][:19]), h["reason"]]
                      for h in doc.get("floating") or []])
    lines += section("Findings", ["image", "vulnerability", "records", "severity", "package", "version", "fixed", "allowed"],
                     [row for image in doc.get("images") or [] for row in _findings(image)])
    lines += section("Not judged", ["image", "why"], [[Code(i["digest"][:19]), i.get("problem")] for i in doc.get("images") or []
                                                       if i.get("status") == "not-judged"])
    return "\n".join(lines).rstrip() + "\n"


def _counts(counts: Mapping[str, int] | None) -> str:
    if counts is None:
        return "-"
    return ", ".join(f"{counts.get(s, 0)} {s}" for s in SEVERITIES if counts.get(s)) or "none"


def _findings(image: Mapping[str, Any]) -> list[list[Any]]:
    found = (image.get("vulnerabilities") or {}).get("findings") or []
    name = next(iter(image.get("tags") or []), image["digest"][:19])
    return [[Code(name), f["id"], ", ".join(r["id"] for r in f.get("records") or []), f["severity"], f["package"], f["version"],
             f.get("fixed") or "-", (f.get("allowed") or {}).get("expires", "-")] for f in found]


def to_prometheus(doc: Mapping[str, Any]) -> bytes:
    """The series above, in Prometheus' text format (node-exporter's textfile collector reads it)."""
    registry = CollectorRegistry()
    labels = ("repository", "tag", "kind", "digest")
    found = Gauge("imagesmith_vulnerabilities", "Known vulnerabilities of the digest a released tag names, by severity.",
                  [*labels, "severity"], registry=registry)
    blocking = Gauge("imagesmith_vulnerabilities_blocking", "Vulnerabilities at or above the threshold and not allowed.",
                     labels, registry=registry)
    judged = Gauge("imagesmith_vulnerabilities_judged", "1: the digest's signed SBOM was matched; 0: it could not be.",
                   labels, registry=registry)
    repository = _label(doc.get("name"))
    for r in doc.get("tags") or []:
        base = (repository, _label(r["tag"]), _label(r["kind"]), _label(r["digest"]))
        judged.labels(*base).set(0 if r.get("counts") is None else 1)
        if r.get("counts") is not None:
            blocking.labels(*base).set(r.get("blocking") or 0)
            for severity in SEVERITIES:
                found.labels(*base, severity).set(r["counts"].get(severity, 0))
    _snapshots(doc, registry)
    return generate_latest(registry)


def _snapshots(doc: Mapping[str, Any], registry: CollectorRegistry) -> None:
    age = Gauge("imagesmith_vulnerabilities_snapshot_age_seconds", "How old the snapshot's newest record was at the recheck.",
                ["snapshot"], registry=registry)
    when = _time(doc.get("checked_at"))
    for s in doc.get("snapshots") or []:
        newest = _time(s.get("date"))
        if when is not None and newest is not None:
            age.labels(_label(s.get("location"))).set((when - newest).total_seconds())
    stamp = Gauge("imagesmith_vulnerabilities_recheck_timestamp_seconds", "When the recheck ran (Unix time).", registry=registry)
    if when is not None:
        stamp.set(when.timestamp())


def _time(text: Any) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None


def _label(value: Any) -> str:
    return str(value)[:MAX_LABEL]
