"""in-toto Statements (v1) about an image, and the verification predicate.

A Statement names its subject (the repository and the image manifest
digest) and carries a typed predicate: the SBOM (``https://cyclonedx.org/bom``)
or the verification result (:data:`VERIFICATION_PREDICATE`, schema in
``imagesmith/data/verification-predicate-v1.schema.json``). Pure: reports in,
canonical bytes out, and the reverse with every field checked (what comes
back from a registry is untrusted).

The ``in-toto`` package (3.x) models in-toto v0.9 links and layouts, not
Statement v1; ``in-toto-attestation`` models it through protobuf ``Struct``,
which turns every number into a double (a GPU count of 1 becomes 1.0, large
integers lose digits), so statements are written here as plain JSON and the
tests check them with ``in-toto-attestation``'s own validator.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping, Sequence

from imagesmith import __version__
from imagesmith.model import loader, policy
from imagesmith.model.verifyreport import Check, Gpu, Sharing, VerifyReport
from imagesmith.resources import data_file

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
# read as well: v0.1 is what `cosign attest-blob` writes; its subject/predicateType/predicate are v1's
READABLE_STATEMENT_TYPES = (STATEMENT_TYPE, "https://in-toto.io/Statement/v0.1")
PAYLOAD_TYPE = "application/vnd.in-toto+json"
SBOM_PREDICATE = "https://cyclonedx.org/bom"
VERIFICATION_PREDICATE = "https://imagesmith.dev/attestations/verification/v1"
VEX_PREDICATE = "https://cyclonedx.org/vex"  # a CycloneDX document of vulnerabilities (imagesmith.stages.evidence.vex)
SCHEMA_FILE = "verification-predicate-v1.schema.json"
MEASURED = ("torch", "cuda", "cudnn", "nccl", "python", "os")
CHECK_FIELDS = ("id", "status", "value", "threshold", "unit", "percent_of_baseline", "optional", "detail")


class StatementError(ValueError):
    """A statement that is not what it claims to be (the message says which field)."""


@dataclass(frozen=True)
class Statement:
    subject_name: str
    subject_digest: str  # sha256:<hex>
    predicate_type: str
    predicate: Mapping[str, Any]


# -- the verification predicate -----------------------------------------------------------------


def verification_predicate(report: VerifyReport, declared: Mapping[str, bool] | None = None) -> dict[str, Any]:
    """A verify report in brief: what ran where, what it measured, each check's verdict and detail.
    ``passed`` is judged again from the checks (:func:`imagesmith.model.policy.verdict` under ``declared``, the
    shipped check registry), never copied from the report's ``summary.ok``; ``gpu_verification`` says
    in plain words whether the image was GPU-verified."""
    env = report.environment
    ev = policy.evidence(report, declared)
    return {
        "verifier": {"name": "imagesmith", "version": __version__, "report_schema": report.payload_schema or report.schema},
        "tier": report.tier,
        "mode": "gpu" if env.gpus else "cpu",
        "platform": platform_record(report, ev),
        "passed": ev.ok,
        "gpu_verification": gpu_verification(ev, env.cuda),
        "started_at": report.started_at,
        "duration_s": _number(report.wall_s if report.wall_s is not None else report.duration_s),
        "gpu": gpu_summary(env.gpus),
        "driver": env.driver,
        "measured": {k: env.fact(k) for k in MEASURED},
        "summary": {k: policy.count(report.summary.counts.get(k)) for k in ("pass", "warn", "fail", "skip", "inconclusive")},
        "sharing": sharing_summary(report.sharing),
        "checks": [_check(c) for c in report.checks],
        "notes": list(report.notes),
    } | ({"vulnerabilities": dict(report.vulnerabilities)} if report.vulnerabilities is not None else {})


def platform_record(report: VerifyReport, ev: policy.Evidence) -> dict[str, Any]:
    """Where the verification ran: the image's platform, the engine's, whether it ran emulated and under what."""
    by = report.emulation.by if report.emulation else None
    return {"image": ev.platform or None, "host": ev.host or None, "emulated": bool(ev.emulated),
            "emulator": by[:256] if ev.emulated and by else None}


def sharing_summary(sharing: Sharing | None) -> dict[str, Any] | None:
    """Whether the GPUs were the run's alone (the report's sharing key, foreign processes counted); None when absent."""
    if sharing is None:
        return None
    return {"exclusive": sharing.exclusive, "allowed": sharing.allowed, "foreign": len(sharing.foreign)}


def gpu_verification(ev: policy.Evidence, cuda: Any) -> str:
    """'GPU-verified on 1 GPU', 'NOT GPU-verified: ...' (a CUDA image), or 'CPU-only image, verified on a CPU'."""
    if ev.gpu_verified:
        return ev.describe()
    if not cuda:
        return "CPU-only image (no CUDA), verified " + ("on a GPU host" if ev.mode == "gpu" else "on a CPU") + (
            f", emulated: {ev.emulated}" if ev.emulated else "")
    return "NOT " + ev.describe().removeprefix("not ")


def gpu_summary(gpus: Sequence[Gpu]) -> dict[str, Any] | None:
    if not gpus:
        return None
    return {"model": model_name(g.name or "" for g in gpus), "count": len(gpus),
            "capability": gpus[0].capability, "memory_gib": _number(gpus[0].memory_gib)}


def model_name(names: Any) -> str:
    """One GPU model ('NVIDIA H200'), or the distinct models joined (a mixed host)."""
    return " + ".join(sorted(set(names))) or "unknown"


def _check(c: Check) -> dict[str, Any]:
    return {"id": c.id, "status": c.status, "value": _scalar(c.value), "threshold": c.threshold, "unit": c.unit,
            "percent_of_baseline": c.percent_of_baseline, "optional": c.optional, "detail": c.detail[:2000]}


def _scalar(value: Any) -> Any:
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@lru_cache(maxsize=1)
def predicate_schema() -> dict[str, Any]:
    return dict(json.loads(data_file(SCHEMA_FILE).read_text()))


def predicate_problems(predicate: Any) -> list[str]:
    """Where ``predicate`` breaks the verification predicate schema (empty: it follows it)."""
    from jsonschema import Draft202012Validator  # jsonschema loads in ~2 s: only where a predicate is checked

    validator = Draft202012Validator(predicate_schema())
    return [f"predicate{''.join(f'[{p!r}]' for p in e.absolute_path)}: {e.message}"
            for e in sorted(validator.iter_errors(predicate), key=lambda e: list(e.absolute_path))]


# -- statements --------------------------------------------------------------------------------


def statement_bytes(st: Statement) -> bytes:
    """The in-toto Statement v1 as canonical JSON (sorted keys, no spaces)."""
    algo, _, hexdigest = st.subject_digest.partition(":")
    doc = {"_type": STATEMENT_TYPE, "subject": [{"name": st.subject_name, "digest": {algo: hexdigest}}],
           "predicateType": st.predicate_type, "predicate": st.predicate}
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def parse_statement(payload: bytes) -> Statement:
    """A Statement v1 (or v0.1) with exactly one sha256 subject; anything else is a StatementError."""
    try:
        doc = loader.parse_json_line(payload, "the statement")
    except loader.LoadError as exc:
        raise StatementError(exc.why) from None
    if not isinstance(doc, dict) or doc.get("_type") not in READABLE_STATEMENT_TYPES:
        raise StatementError(f"_type is not {' or '.join(READABLE_STATEMENT_TYPES)}")
    subjects = doc.get("subject")
    if not isinstance(subjects, list) or len(subjects) != 1 or not isinstance(subjects[0], dict):
        raise StatementError("subject: expected exactly one")
    digest = subjects[0].get("digest") or {}
    if not isinstance(digest, dict) or not isinstance(digest.get("sha256"), str):
        raise StatementError("subject[0].digest: no sha256")
    if not isinstance(doc.get("predicateType"), str) or not isinstance(doc.get("predicate"), dict):
        raise StatementError("predicateType or predicate missing")
    return Statement(str(subjects[0].get("name", "")), "sha256:" + digest["sha256"], doc["predicateType"], doc["predicate"])
