"""The vulnerability document of an image: CycloneDX 1.6 JSON (VEX) built with
cyclonedx-python-lib's vulnerability model from the findings of imagesmith.stages.evidence.vulngate.

Pure. Each finding is one vulnerability (a group of OSV records, each named in an ``imagesmith:record``
property with its own severity): its id and source, the rating (severity, CVSS
score), the fixed version as the recommendation, and what it affects as BOM-Links into the
image's SBOM (``urn:cdx:<sbom serial>/1#<bom-ref>``, the SBOM's serial being derived from
the same name and digest). An allowed finding carries an analysis (``in_triage``, the
matrix's reason and expiry in its detail); a blocking one carries none. The snapshots that
were matched are named in the metadata's properties, with their digests and dates.
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any, Iterable, Mapping

from cyclonedx.contrib.this.builders import this_component
from cyclonedx.model import Property, XsUri
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.model.impact_analysis import ImpactAnalysisAffectedStatus, ImpactAnalysisState
from cyclonedx.model.vulnerability import (
    BomTarget,
    BomTargetVersionRange,
    Vulnerability,
    VulnerabilityAnalysis,
    VulnerabilityRating,
    VulnerabilitySeverity,
    VulnerabilitySource,
)
from cyclonedx.output.json import JsonV1Dot6

from imagesmith.model import vulns

PREFIX = "imagesmith:"
OSV_URL = "https://osv.dev/vulnerability/"


def sbom_link(name: str, digest: str) -> str:
    """The BOM-Link prefix of the SBOM imagesmith.stages.evidence.sbom writes for ``name@digest`` (its serial number, version 1)."""
    return f"urn:cdx:{uuid.uuid5(uuid.NAMESPACE_URL, f'{name}@{digest}')}/1#"


def document(name: str, digest: str, findings: Iterable[vulns.Finding], snapshots: Iterable[Mapping[str, Any]],
             matched_at: dt.datetime) -> bytes:
    """The VEX document (compact JSON) for the image ``name@digest``."""
    root = Component(type=ComponentType.CONTAINER, name=name, version=digest, bom_ref="image")
    props = [Property(name=f"{PREFIX}snapshot", value=f"{s['location']} {s['digest']} {s['date']}") for s in snapshots]
    meta = BomMetaData(component=root, timestamp=matched_at, properties=props)
    meta.tools.components.add(this_component())
    bom = Bom(serial_number=uuid.uuid5(uuid.NAMESPACE_URL, f"vex:{name}@{digest}"), metadata=meta)
    link = sbom_link(name, digest)
    for f in findings:
        bom.vulnerabilities.add(_vulnerability(f, link))
    return JsonV1Dot6(bom).output_as_string(indent=None).encode()


def _vulnerability(f: vulns.Finding, link: str) -> Vulnerability:
    rating = VulnerabilityRating(severity=VulnerabilitySeverity(f.severity),
                                 score=Decimal(str(f.score)) if f.score is not None else None)
    affects = [BomTarget(ref=link + ref, versions=[BomTargetVersionRange(version=f.version, status=ImpactAnalysisAffectedStatus.AFFECTED)])
               for ref in f.refs]
    analysis = None
    if f.allowed:
        analysis = VulnerabilityAnalysis(state=ImpactAnalysisState.IN_TRIAGE,
                                         detail=f"allowed by the matrix until {f.allowed.expires.isoformat()}: {f.allowed.reason}")
    return Vulnerability(
        bom_ref=f"{f.id}:{f.package}@{f.version}", id=f.id, source=VulnerabilitySource(name="OSV", url=XsUri(OSV_URL + f.id)),
        ratings=[rating], description=f.summary or None,
        recommendation=f"upgrade {f.package} to {f.fixed}" if f.fixed else "no fixed version is known",
        affects=affects, analysis=analysis,
        properties=[Property(name=f"{PREFIX}ecosystem", value=f.ecosystem), Property(name=f"{PREFIX}package", value=f.package)]
        + [Property(name=f"{PREFIX}alias", value=a) for a in f.aliases]
        + [Property(name=f"{PREFIX}record", value=f"{r.id} {r.severity}") for r in f.records],
    )


def counts(doc: Mapping[str, Any]) -> dict[str, int]:
    """What ``imagesmith evidence`` prints of a VEX document: vulnerabilities by severity, and how many are allowed."""
    out = dict.fromkeys(reversed(vulns.SEVERITIES), 0) | {"allowed": 0}
    entries: Any = doc.get("vulnerabilities")
    for v in entries if isinstance(entries, list) else []:
        if not isinstance(v, Mapping):
            continue
        ratings: Any = v.get("ratings") if isinstance(v.get("ratings"), list) else []
        severity = next((str(r.get("severity")) for r in ratings if isinstance(r, Mapping) and r.get("severity") in out), "unknown")
        out[severity] += 1
        out["allowed"] += isinstance(v.get("analysis"), Mapping) and v["analysis"].get("state") == "in_triage"
    return out
