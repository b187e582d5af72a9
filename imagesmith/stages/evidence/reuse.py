"""Whether signed evidence attached to a digest stands for a fresh run (``imagesmith verify IMAGE --reuse-evidence``):
what the run is asked (:class:`Wanted`), why an attestation does or does not answer it, and the verify report it
then stands for."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Mapping

from imagesmith.model import policy, verifyreport
from imagesmith.model.verifyreport import VerifyReport
from imagesmith.stages.evidence import attestation
from imagesmith.stages.evidence.evidence import Attestation, Evidence
from imagesmith.stages.evidence.referrers import ran_on


@dataclass(frozen=True)
class Wanted:
    """What ``imagesmith verify REF`` is asked, as far as attached evidence can answer it."""

    tier: str
    gpu_model: str | None  # this host's GPUs as --gpus selects them; None: CPU mode
    gpu_count: int = 0
    expect: Mapping[str, str] = field(default_factory=dict)
    require_gpu: bool = False
    require_non_root: bool = False
    narrowed: bool = False  # --only / --skip given: another set of checks than the attested run's
    max_age_days: int | None = None  # the matrix's vulnerabilities.max_age_days: how old its vulnerability match may be
    now: dt.datetime | None = None


def why_not_reused(p: Mapping[str, Any], wanted: Wanted, declared: Mapping[str, bool]) -> str | None:
    """Why the verification predicate ``p`` cannot stand for a fresh run with ``wanted`` (None: it can): it must
    pass judged again from its checks, on this tier and GPU model, with every --expect met by what it measured,
    a GPU run where --require-gpu asks for one, and a non-root user (security.user passed, uid not 0) where
    --require-non-root does."""
    if p.get("passed") is not True or not policy.predicate_verdict(p, declared).ok:
        return "it did not pass (judged again from its checks)"
    if p.get("tier") != wanted.tier:
        return f"it ran the {p.get('tier')} tier, not {wanted.tier}"
    raw = p.get("gpu")
    gpu: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    if gpu.get("model") != wanted.gpu_model or (wanted.gpu_model is not None and gpu.get("count") != wanted.gpu_count):
        here = f"{wanted.gpu_count} x {wanted.gpu_model}" if wanted.gpu_model else "CPU mode"
        there = f"{gpu.get('count')} x {gpu.get('model')}" if gpu else "CPU mode"
        return f"it ran on {there}, this run would use {here}"
    if wanted.narrowed:
        return "--only/--skip ask for another set of checks"
    sharing = p.get("sharing")
    if isinstance(sharing, Mapping) and sharing.get("exclusive") is False:
        return "it ran on a GPU another process shared (no evidence of this image's own figures)"
    if wanted.max_age_days is not None:
        stale = stale_vulnerabilities(p, wanted.max_age_days, wanted.now or dt.datetime.now(dt.timezone.utc))
        if stale is not None:
            return stale
    if wanted.require_gpu and (p.get("mode") != "gpu" or not gpu):
        return "--require-gpu: it ran without a GPU"
    return _unmet_expect(p, wanted.expect) or (_root(p) if wanted.require_non_root else None)


def _unmet_expect(p: Mapping[str, Any], expect: Mapping[str, str]) -> str | None:
    from imagesmith.resources import payload_module

    judge = payload_module("judge")
    raw = p.get("measured")
    measured: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    for key, want in expect.items():
        if key not in attestation.MEASURED:
            return f"--expect {key}={want}: the attestation does not record {key}"
        have = measured.get(key)
        if key == "cuda" and want == "cpu":
            met = not have or have == "cpu"
        else:
            met = bool(have) and judge.version_matches(want, have)
        if not met:
            return f"--expect {key}={want}: it measured {have or 'none'}"
    return None


def _root(p: Mapping[str, Any]) -> str | None:
    user = next((c for c in p.get("checks") or () if isinstance(c, Mapping) and c.get("id") == "security.user"), None)
    if user is None or user.get("status") != "pass" or user.get("value") in (0, None):
        return "--require-non-root: it did not show a non-root user (security.user)"
    return None


def reusable(found: Evidence, wanted: Wanted) -> tuple[Attestation | None, list[str]]:
    """A verification of this digest, signed by a given key, that stands for a fresh run asked ``wanted``
    (:func:`why_not_reused`); else None and why each signed one does not."""
    from imagesmith.stages.verify.verify import declared_checks

    declared, why = declared_checks(), []
    for a in found.of_kind("verification"):
        if not a.signed_by or a.problems or a.statement is None:
            continue
        reason = why_not_reused(a.statement.predicate, wanted, declared)
        if reason is None:
            return a, []
        why.append(f"{a.digest[:19]}: {reason}")
    return None, why


def reused_report(found: Evidence, a: Attestation, ref: str) -> VerifyReport:
    """The verify report (``--json``) of a run that reused ``a``: its checks with their details, what it measured,
    how it ran, the image, and which attestation stood in for the run."""
    from imagesmith.stages.verify import verify

    assert a.statement is not None
    p = a.statement.predicate
    checks = [dict(c) | {"title": c.get("id"), "baseline": None, "duration_s": 0.0} for c in p.get("checks") or []
              if isinstance(c, Mapping)]
    counts = {s: sum(c.get("status") == s for c in checks) for s in policy.STATUSES}
    gpu = p.get("gpu") if isinstance(p.get("gpu"), Mapping) else None
    return verifyreport.parse({"schema": verify.REPORT_SCHEMA, "state": "complete", "tier": p.get("tier"), "started_at": p.get("started_at"),
            "environment": dict(p.get("measured") or {}) | {"driver": p.get("driver"), "gpus": []},
            "mode": {"mode": p.get("mode"), "gpus": gpu.get("count") if gpu else 0, "reason": p.get("gpu_verification") or ""},
            "checks": checks, "summary": counts | {"ok": policy.predicate_verdict(p, verify.declared_checks()).ok},
            "image": {"ref": ref, "digest": found.digest, "repository": found.name},
            "reused": {"attestation": a.digest, "signed_by": list(a.signed_by), "gpu": gpu},
            **where_from(p),
            "notes": [f"not run again: the signed verification {a.digest} of {found.name}@{found.digest} stands for it"]}, f"the signed verification {a.digest}")


def where_from(p: Mapping[str, Any]) -> dict[str, Any]:
    """A verify report's ``platform`` (and ``emulation``) blocks from what the predicate ``p`` states; none from a
    statement written before imagesmith recorded them."""
    image, emulated = ran_on(p)
    if emulated is None:
        return {}
    host, by = p["platform"].get("host"), p["platform"].get("emulator")
    out: dict[str, Any] = {"platform": {"image": image or "", "host": host if isinstance(host, str) else ""}}
    if emulated:
        out["emulation"] = {"image": image or "", "host": host if isinstance(host, str) else "", "by": by if isinstance(by, str) else ""}
    return out


def stale_vulnerabilities(predicate: Mapping[str, Any], max_age_days: int, now: dt.datetime) -> str | None:
    """Why a verification's vulnerability match is too old to reuse (None: recent enough)."""
    field_ = predicate.get("vulnerabilities")
    stamp = field_.get("matched_at") if isinstance(field_, Mapping) else None
    if not isinstance(stamp, str):
        return "it carries no known-vulnerability match"
    try:
        when = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return f"its vulnerability match time {stamp[:40]!r} is not a time"
    when = when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)
    age = now - when
    if age > dt.timedelta(days=max_age_days):
        return f"its vulnerabilities were matched {age.days} days ago, more than the {max_age_days} the matrix allows (vulnerabilities.max_age_days)"
    return None
