"""The release report (``imagesmith.release/1``, OUT/release.json) as one typed value, parsed once where it enters.

``publish`` writes it: the publisher makes the release step by step (``stages.release.releases.ReleaseRun``) and, at
its end, writes the document and gives this value from its own values (release.md is rendered from it, never from
the JSON read back). Where a release report enters from disk (``imagesmith report`` on release.json or on a run
report's release part, release.md again from release.json, ``fleet verify --release``), the loader lets the file in
(confined, bounded, strict JSON, schema ``release-1``) and :func:`parse` takes its values out with the reader kit
(:mod:`imagesmith.model.fields`): a value of the wrong kind is a :class:`~imagesmith.model.loader.LoadError` naming
the file and the key path (``release.targets[0].traffic``). The renderers (Markdown, JUnit, HTML) and the fleet read
only these records, the trust part included (:class:`ReleaseTrust`: the policy that judged the verifications and who
signed each target); the document as read stays with the value (:attr:`ReleaseReport.raw`, the page shows it whole).

The parts another stage hands the publisher as objects (the evidence attached to a digest, a promotion's counts, the
vulnerability gate's findings) are read by the same functions: :func:`evidence_of`, :func:`counts_of`,
:func:`findings_of`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, TypeVar

from imagesmith.model import policy, schemas
from imagesmith.model.fields import Fields

SCHEMA = schemas.RELEASE
DONE = ("pushed", "unchanged")  # a target (or an image index) the release left in the registry


@dataclass(frozen=True)
class Traffic:
    """Compressed layer bytes a push sent, and those the registry already had (publish.Traffic)."""

    pushed_bytes: float = 0
    pushed_layers: float = 0
    existing_bytes: float = 0
    existing_layers: float = 0


@dataclass(frozen=True)
class Promotion:
    """What moved registry to registry for one promoted target (promote.Promotion)."""

    mounted: float = 0
    copied: float = 0
    present: float = 0
    bytes_moved: float = 0
    seconds: float = 0


@dataclass(frozen=True)
class VulnFinding:
    """One known vulnerability in a released (or held back) image (imagesmith.model.vulns.Finding)."""

    id: str
    severity: str
    package: str
    version: str
    fixed: str  # "" when no fixed version is known
    allowed: str  # "" or "until YYYY-MM-DD: reason"


@dataclass(frozen=True)
class Attached:
    """One evidence artifact attached to a released digest (SBOM, attestation, signature)."""

    kind: str
    digest: str
    size: str
    status: str
    signed: bool


@dataclass(frozen=True)
class Released:
    """One target in release.json (the publisher's TargetRelease)."""

    status: str  # pushed | unchanged | failed | not-built | not-verified | not-pushed | vulnerable
    reference: str = ""
    digest: str | None = None
    floating: tuple[str, ...] = ()
    error: str | None = None
    note: str = ""  # the release policy's word, e.g. "not GPU-verified: ..."
    target: str = ""
    versions: Mapping[str, Any] = field(default_factory=dict)
    verification: Mapping[str, Any] = field(default_factory=dict)
    gpu_verified: bool | None = None
    evidence: tuple[Attached, ...] = ()
    traffic: Traffic | None = None  # what its push sent, and what the registry already had
    source: str = ""  # the staged image it was promoted from
    promotion: Promotion | None = None
    vulnerabilities: tuple[VulnFinding, ...] = ()  # what the release gate found in its SBOM
    tag: str = ""  # its immutable tag ("" in a release.json written before the field)

    @property
    def ok(self) -> bool:
        return self.status in DONE

    @property
    def short_tag(self) -> str:
        """The immutable tag without the repository the release names once (or the reference, when no tag is known)."""
        return self.tag or self.reference or "-"

    @property
    def remark(self) -> str:
        """The error, else the policy's note (one cell of the release tables)."""
        return self.error or self.note

    @property
    def how(self) -> str:
        return verified_how(self.verification, self.gpu_verified)


def verified_how(verification: Mapping[str, Any], gpu_verified: bool | None) -> str:
    """For tables: 'GPU-verified on 1 GPU', 'not GPU-verified: ...', 'passed (CPU image)', 'passed (CPU image, emulated
    linux/arm64)', 'failed'."""
    if not verification.get("ok"):
        return "failed" if verification else "-"
    if gpu_verified is None:
        emulated = verification.get("emulated") and verification.get("platform")
        return f"passed (CPU image, emulated {emulated})" if isinstance(emulated, str) else "passed (CPU image)"
    return str(verification.get("gpu_short") or ("GPU-verified" if gpu_verified else policy.NOT_GPU_VERIFIED))


@dataclass(frozen=True)
class FloatingTag:
    """What the release did with one floating tag."""

    tag: str
    action: str  # moved | created | unchanged | kept | failed
    target: str
    torch: str
    digest: str
    reason: str


@dataclass(frozen=True)
class ImageIndex:
    """One multi-platform tag's image index as release.json records it (publish's IndexRelease)."""

    tag: str
    action: str  # pushed | unchanged | held | failed
    digest: str
    platforms: str  # "linux/amd64 sha256:…, linux/arm64 sha256:…"
    reason: str
    floating: tuple[str, ...] = ()  # the floating tags that serve this index


@dataclass(frozen=True)
class TrustedVerifier:
    """One verifier of the trust policy a release judged by: its name and its key's ID."""

    name: str
    keyid: str


@dataclass(frozen=True)
class ReleaseTrust:
    """The trust policy that judged a release's verifications (release.json's ``trust``): the policy file and its
    sha256, its verifiers, and the verifier whose signed statement the release believed for each target."""

    file: str
    sha256: str
    verifiers: tuple[TrustedVerifier, ...]
    signers: Mapping[str, str]  # target id -> verifier name


@dataclass(frozen=True)
class ReleaseReport:
    """One release: where it went, each target's part in it, the floating tags and image indexes it wrote."""

    registry: str
    repository: str
    date: str
    ok: bool
    errors: tuple[str, ...]
    raw: Mapping[str, Any]  # the document as written (or read)
    targets: tuple[Released, ...] = ()
    floating: tuple[FloatingTag, ...] = ()
    pushed: int = 0  # references written
    unchanged: int = 0
    traffic: Traffic | None = None
    indexes: tuple[ImageIndex, ...] = ()
    trust: ReleaseTrust | None = None  # None: released without a trust policy (one job built, verified and published)

    def by_target(self) -> dict[str, Released]:
        """Each target's part, by target id."""
        return {t.target: t for t in self.targets}


# -- reading (untrusted) ---------------------------------------------------------------------------


C = TypeVar("C", Traffic, Promotion)


def parse(raw: Any, source: str = "release.json", where: str = "release") -> ReleaseReport:
    """release.json (``imagesmith.release/1``), or a run report's release part at ``where``: the release and each
    target's part in it."""
    r = Fields(source)
    doc = r.mapping(raw, where)
    targets = [_released(r, item, f"{where}.targets[{i}]") for i, item in enumerate(r.items(doc.get("targets"), f"{where}.targets"))]
    floating = [_floating(r, item, f"{where}.floating[{i}]") for i, item in enumerate(r.items(doc.get("floating"), f"{where}.floating"))]
    errors = tuple(str(e) for e in r.items(doc.get("errors"), f"{where}.errors"))
    ok = bool(doc.get("ok", not errors and all(x.ok for x in targets)))
    return ReleaseReport(r.text(doc, "registry", where), r.text(doc, "repository", where), r.text(doc, "date", where),
                         ok, errors, doc, tuple(targets), tuple(floating), len(r.items(doc.get("pushed"), f"{where}.pushed")),
                         len(r.items(doc.get("unchanged"), f"{where}.unchanged")), _counts(r, doc.get("traffic"), f"{where}.traffic", Traffic),
                         tuple(_index(r, item, f"{where}.indexes[{i}]") for i, item in enumerate(r.items(doc.get("indexes"), f"{where}.indexes"))),
                         _trust(r, doc.get("trust"), f"{where}.trust"))


def trust_of(raw: Mapping[str, Any] | None, source: str = "release.json", at: str = "trust") -> ReleaseTrust | None:
    """The trust part of a release (the publisher's ``{"policy": ..., "targets": ...}``); None when absent."""
    return _trust(Fields(source), raw, at)


def _trust(r: Fields, raw: Any, at: str) -> ReleaseTrust | None:
    if raw is None:
        return None
    doc = r.mapping(raw, at)
    pol = r.mapping(doc.get("policy"), f"{at}.policy")
    verifiers = []
    for i, item in enumerate(r.listed(pol, "verifiers", f"{at}.policy")):
        v = r.mapping(item, f"{at}.policy.verifiers[{i}]")
        verifiers.append(TrustedVerifier(r.text(v, "name", f"{at}.policy.verifiers[{i}]"), r.text(v, "keyid", f"{at}.policy.verifiers[{i}]")))
    targets = r.mapping(doc.get("targets") or {}, f"{at}.targets")
    signers = {str(t): r.text(r.mapping(a, f"{at}.targets.{t}"), "verifier", f"{at}.targets.{t}") for t, a in targets.items()}
    return ReleaseTrust(r.text(pol, "file", f"{at}.policy"), r.text(pol, "sha256", f"{at}.policy"), tuple(verifiers),
                        {t: name for t, name in signers.items() if name})


def _released(r: Fields, raw: Any, at: str) -> Released:
    t = r.mapping(raw, at)
    attached = evidence_of(t.get("evidence"), r.source, f"{at}.evidence")
    gpu_verified = t.get("gpu_verified")
    return Released(
        status=r.text(t, "status", at, "unknown"), reference=r.text(t, "reference", at), digest=t.get("digest"),
        floating=tuple(str(f) for f in r.items(t.get("floating"), f"{at}.floating")), error=t.get("error"),
        note=r.text(t, "note", at), target=r.text(t, "target", at),
        versions=r.mapping(t.get("versions") or {}, f"{at}.versions"),
        verification=r.mapping(t.get("verification") or {}, f"{at}.verification"),
        gpu_verified=gpu_verified if isinstance(gpu_verified, bool) else None, evidence=attached,
        traffic=_counts(r, t.get("traffic"), f"{at}.traffic", Traffic), source=r.text(t, "source", at),
        promotion=_counts(r, t.get("promotion"), f"{at}.promotion", Promotion), vulnerabilities=_findings(r, t.get("vulnerabilities"), f"{at}.vulnerabilities"),
        tag=r.text(t, "tag", at))


def evidence_of(raw: Any, source: str = "release.json", at: str = "evidence") -> tuple[Attached, ...]:
    """What a release attached to one digest (a release target's ``evidence``: its ``artifacts``)."""
    r = Fields(source)
    evidence = r.mapping(raw or {}, at)
    return tuple(_attached(r, a, f"{at}.artifacts[{i}]") for i, a in enumerate(r.items(evidence.get("artifacts"), f"{at}.artifacts")))


def findings_of(raw: Any, source: str = "release.json", at: str = "vulnerabilities") -> tuple[VulnFinding, ...]:
    """The release gate's findings for one target (a release target's ``vulnerabilities``)."""
    return _findings(Fields(source), raw, at)


def counts_of(raw: Mapping[str, Any] | None, kind: type[C], source: str = "release.json", at: str = "release") -> C | None:
    """An object of numbers (``traffic``, ``promotion``) as its record; None when absent or empty."""
    return _counts(Fields(source), raw, at, kind)


def _findings(r: Fields, raw: Any, at: str) -> tuple[VulnFinding, ...]:
    """The findings of the release gate (publish.vulnerability_step), each text checked."""
    d = r.mapping(raw or {}, at)
    out = []
    for i, item in enumerate(r.items(d.get("findings"), f"{at}.findings")):
        f = r.mapping(item, f"{at}.findings[{i}]")
        allowed = r.mapping(f.get("allowed") or {}, f"{at}.findings[{i}].allowed")
        until = f"until {r.text(allowed, 'expires', at)}: {r.text(allowed, 'reason', at)}" if allowed else ""
        get = [r.text(f, k, f"{at}.findings[{i}]") for k in ("id", "severity", "package", "version", "fixed")]
        out.append(VulnFinding(get[0], get[1], get[2], get[3], get[4], until))
    return tuple(out)


def _counts(r: Fields, raw: Any, at: str, kind: type[C]) -> C | None:
    """An object of numbers (traffic, promotion) at ``at``; None when absent."""
    if not raw:
        return None
    d = r.mapping(raw, at)
    return kind(**{f.name: r.number(d, f.name, at) or 0 for f in dataclasses.fields(kind)})


def _attached(r: Fields, raw: Any, at: str) -> Attached:
    a = r.mapping(raw, at)
    return Attached(r.text(a, "kind", at), r.text(a, "digest", at), r.text(a, "size", at, "-"), r.text(a, "status", at),
                    bool(a.get("signed")))


def _floating(r: Fields, raw: Any, at: str) -> FloatingTag:
    f = r.mapping(raw, at)
    return FloatingTag(*(r.text(f, key, at) for key in ("tag", "action", "target", "torch", "digest", "reason")))


def _index(r: Fields, raw: Any, at: str) -> ImageIndex:
    i = r.mapping(raw, at)
    platforms = r.mapping(i.get("platforms") or {}, f"{at}.platforms")
    held = ", ".join(f"{p} {r.text(r.mapping(v, f'{at}.platforms'), 'digest', at, '-')[:19]}" for p, v in sorted(platforms.items()))
    floating = tuple(str(f) for f in r.items(i.get("floating"), f"{at}.floating"))
    return ImageIndex(r.text(i, "tag", at), r.text(i, "action", at), r.text(i, "digest", at, "-"), held, r.text(i, "reason", at), floating)
