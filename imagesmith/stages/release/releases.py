"""What a release works on and what it makes, as values: the verified items it takes (built records and their
verifications), the tag fields measured in each image, what a push sent, and the release as the publisher makes it
(:class:`ReleaseRun`: one entry per target, floating tag and image index, filled in step by step), which writes
release.json and gives the release report it holds (:class:`imagesmith.model.releasereport.ReleaseReport`) from its
own values. No engine, no registry: :mod:`imagesmith.stages.release.publish` acts on them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Protocol, Sequence

from imagesmith.edges.registry import entries, manifest_document
from imagesmith.errors import RegistryError
from imagesmith.model import policy, releasereport, tags
from imagesmith.model.buildreport import BuildRecord
from imagesmith.model.platform import DEFAULT as DEFAULT_PLATFORM
from imagesmith.model.platform import Platform
from imagesmith.model.releasereport import counts_of, evidence_of, findings_of, verified_how
from imagesmith.model.verifyreport import Image, VerifyReport
from imagesmith.model.versions import cuda_variant, major, minor
from imagesmith.stages.release.indexes import IndexRelease

RELEASE_SCHEMA = releasereport.SCHEMA


LABEL = "io.imagesmith."


DONE = releasereport.DONE


class Verified(Protocol):
    """What :func:`imagesmith.stages.verify.incontainer.verify_image` returns."""

    @property
    def ok(self) -> bool: ...
    @property
    def report(self) -> VerifyReport: ...


@dataclass(frozen=True)
class Item:
    """One target as the release sees it: built? verified? what it measured."""

    target: str
    layer: str
    cell: str
    image_id: str | None
    facts: Mapping[str, Any] | None
    built: bool
    verified: bool
    verification: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    evidence: policy.Evidence | None = None  # how it was verified (GPU or CPU mode)
    source: str | None = None  # the staged image (host/repository@digest): promoted through the registry, no engine
    platform: Platform = DEFAULT_PLATFORM
    group: str = ""  # the plan's immutable tag: the targets of several platforms sharing it form one image index


def items_from(records: Iterable[BuildRecord], outcomes: Mapping[str, Verified]) -> list[Item]:
    """What the build saved (``buildreport.BuildRecord``, each with its plan target) + verify outcomes by target id -> items."""
    return [_item(r, outcomes.get(r.target.id)) for r in records]


def _item(record: BuildRecord, outcome: Verified | None) -> Item:
    summary = verification_summary(outcome)
    staged = record.staged
    source = staged.reference if staged else None
    same_image = summary.get("image_id") in (None, record.image_id)
    same_digest = not staged or summary.get("digest") in (None, staged.digest)
    verified = bool(record.ok and outcome is not None and outcome.ok and same_image and same_digest)
    error = record.error if not record.ok else None
    if record.ok and outcome is not None and not same_image:
        error = f"verification ran on image {summary['image_id']}, not the built {record.image_id}"
    elif record.ok and outcome is not None and not same_digest:
        error = f"verification ran on {summary['digest']}, not the staged {source}"
    return Item(record.target.id, record.target.layer, record.target.cell, record.image_id, record.facts, record.ok,
                verified, summary, error, _evidence(outcome), source, record.target.platform, record.target.tag)


def _evidence(outcome: Verified | None) -> policy.Evidence | None:
    from imagesmith.stages.verify.verify import declared_checks

    return policy.evidence(outcome.report, declared_checks()) if outcome is not None else None


def verification_summary(outcome: Verified | None) -> dict[str, Any]:
    if outcome is None:
        return {"ok": False, "reason": "not verified"}
    rep = outcome.report
    ev = _evidence(outcome)
    assert ev is not None
    image = rep.image or Image()
    return {"ok": bool(outcome.ok), "tier": rep.tier, "summary": rep.summary.to_json(),
            "started_at": rep.started_at, "image_id": image.id, "digest": image.digest,
            "failed_checks": policy.failed_required(rep), "notes": list(rep.notes),
            "mode": ev.mode, "gpus": ev.gpus, "gpu_verified": ev.gpu_verified, "gpu": ev.describe(),
            "gpu_short": ev.short(), "platform": ev.platform or None, "host": ev.host or None,
            "emulated": ev.emulated or None}


def measured_versions(facts: Mapping[str, Any]) -> dict[str, str]:
    """The versions an image reported about itself (``facts.py``), as strings."""
    out = {k: str(facts.get(k) or "") for k in ("torch", "cuda", "cudnn", "nccl", "python", "os")}
    out["cuda"] = out["cuda"] or "cpu"
    vision = (facts.get("packages") or {}).get("torchvision")
    return out | ({"torchvision": str(vision)} if vision else {})


def tag_fields(facts: Mapping[str, Any], layer: str, cell: str, date: str) -> dict[str, str]:
    """Tag template fields from measured facts: torch without its local label
    (``2.14.1+cu130`` -> ``2.14.1``), cuda or ``cpu``, python major.minor."""
    m = measured_versions(facts)
    if not m["torch"] or "torch_error" in facts:
        raise ValueError(f"the image reports no torch version ({facts.get('torch_error', 'torch missing')})")
    cuda, cudnn = m["cuda"], m["cudnn"]
    accel = "cpu" if cuda == "cpu" else f"cuda{cuda}" + (f"-cudnn{major(cudnn)}" if cudnn else "")
    versions = {**m, "python": minor(m["python"]), "variant": cuda_variant(cuda)}
    return tags.facts(versions, layer, cell, accel) | {"date": date}


def label_fields(labels: Mapping[str, str]) -> dict[str, str] | None:
    """Tag fields of an image already in the registry, from its io.imagesmith.* labels."""
    torch = labels.get(LABEL + "torch", "")
    try:
        tags.to_semver(torch.split("+", 1)[0])
    except ValueError:
        return None
    facts = {k: labels.get(LABEL + k) or None for k in ("torch", "cudnn", "nccl", "python", "os")}
    facts["cuda"] = None if labels.get(LABEL + "cuda") in (None, "", "cpu") else labels[LABEL + "cuda"]
    created = labels.get("org.opencontainers.image.created", "")[:10].replace("-", "")
    return tag_fields(facts, labels.get(LABEL + "layer", ""), labels.get(LABEL + "cell", ""), created)


UPLOADED = "Pushed"


ALREADY_THERE = ("Layer already exists", "Mounted from")


@dataclass
class Traffic:
    """Layers (compressed bytes) one push uploaded, and those the registry already had."""

    pushed_bytes: int = 0
    pushed_layers: int = 0
    existing_bytes: int = 0
    existing_layers: int = 0

    def add(self, other: "Traffic") -> "Traffic":
        return Traffic(*(a + b for a, b in zip(self.__dict__.values(), other.__dict__.values())))


def traffic(manifest_raw: bytes, diff_ids: Sequence[str], lines: Iterable[str]) -> Traffic:
    """From the engine's push lines ("<12 hex of the diff ID> Pushed" / "Layer
    already exists" / "Mounted from ...") and the pushed manifest's layer sizes,
    which pair with the image's diff IDs in order."""
    status: dict[str, str] = {}
    for line in lines:
        short, _, text = line.partition(" ")
        if text == UPLOADED or text.startswith(ALREADY_THERE):
            status[short] = text
    try:
        layers = entries(manifest_document(manifest_raw or b"{}", "the pushed manifest"), "layers")
    except RegistryError:
        layers = []
    out = Traffic()
    for layer, diff_id in zip(layers, diff_ids):
        seen = status.get(diff_id.split(":", 1)[-1][:12], "")
        size = layer["size"] if isinstance(layer.get("size"), int) else 0
        if seen == UPLOADED:
            out.pushed_bytes, out.pushed_layers = out.pushed_bytes + size, out.pushed_layers + 1
        elif seen:
            out.existing_bytes, out.existing_layers = out.existing_bytes + size, out.existing_layers + 1
    return out


@dataclass
class TargetRelease:
    target: str
    image_id: str | None
    status: str  # pushed | unchanged | failed | not-built | not-verified | not-pushed | vulnerable
    tag: str = ""
    reference: str = ""
    digest: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    verification: dict[str, Any] = field(default_factory=dict)
    floating: list[str] = field(default_factory=list)
    error: str | None = None
    fields: dict[str, str] = field(default_factory=dict, repr=False)
    traffic: Traffic = field(default_factory=Traffic)
    evidence: dict[str, Any] = field(default_factory=dict)  # what imagesmith.stages.evidence.evidence attached to the digest
    source: str | None = None  # the staged image it was promoted from
    promotion: dict[str, Any] = field(default_factory=dict)  # promote.Promotion: blobs mounted/copied, bytes, seconds
    gpu_verified: bool | None = None  # None: a CPU-only image (vetted on a CPU)
    note: str = ""  # the release policy's word on it, e.g. "not GPU-verified: ..."
    may_float: bool = field(default=True, repr=False)
    vulnerabilities: dict[str, Any] = field(default_factory=dict)  # imagesmith.stages.evidence.vulngate: snapshots, counts, findings
    platform: str = DEFAULT_PLATFORM.value
    index: str = ""  # the tag of the image index this image is one platform of ("": a plain tag of its own)
    index_digest: str | None = None  # that index's digest, once written (or found unchanged)

    @property
    def floating_tag(self) -> str:
        """What this target's floating tags copy: its index when it is one platform of one, else its own tag."""
        return self.index or self.tag

    @property
    def floating_digest(self) -> str | None:
        return self.index_digest if self.index else self.digest

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "status": self.status, "image_id": self.image_id, "tag": self.tag,
                "platform": self.platform, "index": self.index or None, "index_digest": self.index_digest,
                "vulnerabilities": self.vulnerabilities or None,
                "reference": self.reference, "digest": self.digest, "versions": self.versions,
                "verification": self.verification, "floating": self.floating, "error": self.error,
                "evidence": self.evidence or None, "gpu_verified": self.gpu_verified, "note": self.note,
                "traffic": dict(self.traffic.__dict__), "source": self.source, "promotion": self.promotion or None}

    def verified_how(self) -> str:
        return verified_how(self.verification, self.gpu_verified)

    def model(self) -> releasereport.Released:
        """This target's part in the release as the record every renderer reads (what reading its release.json entry
        back gives), from its own values; the parts other stages hand over as objects (evidence, promotion,
        vulnerabilities) are read once here."""
        return releasereport.Released(
            status=self.status, reference=self.reference, digest=self.digest, floating=tuple(self.floating), error=self.error,
            note=self.note, target=self.target, versions=self.versions, verification=self.verification,
            gpu_verified=self.gpu_verified, evidence=evidence_of(self.evidence, at=f"{self.target}.evidence"),
            traffic=counts_of(vars(self.traffic), releasereport.Traffic), source=self.source or "",
            promotion=counts_of(self.promotion, releasereport.Promotion, at=f"{self.target}.promotion"),
            vulnerabilities=findings_of(self.vulnerabilities, at=f"{self.target}.vulnerabilities"), tag=self.tag)


@dataclass
class FloatingRelease:
    tag: str
    action: str  # moved | created | unchanged | kept | failed
    reference: str
    target: str | None = None
    torch: str = ""
    digest: str | None = None
    previous: str | None = None
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def model(self) -> releasereport.FloatingTag:
        return releasereport.FloatingTag(self.tag, self.action, self.target or "", self.torch, self.digest or "", self.reason)


@dataclass
class ReleaseRun:
    """The release as the publisher makes it: what it did with each target, floating tag and image index."""

    registry: str
    repository: str
    date: str
    started_at: str
    targets: list[TargetRelease]
    floating: list[FloatingRelease] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    paths: dict[str, str] = field(default_factory=dict)
    trust: Mapping[str, Any] | None = None  # the trust policy that judged the verifications, and who signed each
    indexes: list[IndexRelease] = field(default_factory=list)  # one per tag of several platforms

    @property
    def ok(self) -> bool:
        return (not self.errors and all(t.status in DONE for t in self.targets)
                and all(f.action != "failed" for f in self.floating) and all(i.action in DONE for i in self.indexes))

    def pushed(self) -> list[dict[str, Any]]:
        """Every reference this run wrote to the registry, with its digest."""
        return self._refs(("pushed",), ("moved", "created"))

    def unchanged(self) -> list[dict[str, Any]]:
        return self._refs(("unchanged",), ("unchanged",))

    def _refs(self, statuses: tuple[str, ...], actions: tuple[str, ...]) -> list[dict[str, Any]]:
        by_target = {t.target: t for t in self.targets}
        out = [self._ref(t.reference, t.digest, "immutable", t) for t in self.targets if t.status in statuses]
        out += [self._ref(i.reference, i.digest, "index", by_target[next(iter(i.platforms.values()))["target"]])
                for i in self.indexes if i.action in statuses]
        return out + [self._ref(f.reference, f.digest, "floating", by_target[f.target or ""])
                      for f in self.floating if f.action in actions]

    @staticmethod
    def _ref(reference: str, digest: str | None, kind: str, t: TargetRelease) -> dict[str, Any]:
        return {"reference": reference, "digest": digest, "kind": kind, "target": t.target,
                "versions": t.versions, "verification": t.verification, "gpu_verified": t.gpu_verified,
                "note": t.note}

    def traffic(self) -> Traffic:
        total = Traffic()
        for t in self.targets:
            total = total.add(t.traffic)
        return total

    def to_json(self) -> dict[str, Any]:
        return {"schema": RELEASE_SCHEMA, "ok": self.ok, "registry": self.registry, "repository": self.repository,
                "date": self.date, "started_at": self.started_at, "seconds": round(self.seconds, 2),
                "traffic": dict(self.traffic().__dict__),
                "pushed": self.pushed(), "unchanged": self.unchanged(),
                "floating": [f.to_json() for f in self.floating],
                "targets": [t.to_json() for t in self.targets], "errors": self.errors,
                "trust": dict(self.trust) if self.trust is not None else None,
                "indexes": [i.to_json() for i in self.indexes],
                "evidence": [t.evidence for t in self.targets if t.evidence]}

    def model(self, raw: Mapping[str, Any]) -> releasereport.ReleaseReport:
        """This release as the record release.md, the release tables and the HTML read, from its own values (never
        its JSON parsed back); ``raw``: the document its release.json holds (the HTML shows it whole)."""
        return releasereport.ReleaseReport(
            self.registry, self.repository, self.date, self.ok, tuple(self.errors), raw, tuple(t.model() for t in self.targets),
            tuple(f.model() for f in self.floating), len(self.pushed()), len(self.unchanged()),
            counts_of(vars(self.traffic()), releasereport.Traffic), tuple(_index_model(i) for i in self.indexes),
            releasereport.trust_of(self.trust))


def _index_model(i: IndexRelease) -> releasereport.ImageIndex:
    held = ", ".join(f"{p} {'-' if v.get('digest') is None else str(v['digest'])[:19]}" for p, v in sorted(i.platforms.items()))
    return releasereport.ImageIndex(i.tag, i.action, "-" if i.digest is None else i.digest, held, i.reason, tuple(i.floating))


class ReleaseStopped(RegistryError):
    """A registry-wide failure (auth, a registry that stays down, a digest mismatch): nothing more is pushed."""


@dataclass(frozen=True)
class RemoteImage:
    tag: str
    digest: str
    config_digest: str | None
    fields: Mapping[str, str] | None


def index_floating(report: ReleaseRun) -> None:
    """Each image index's floating tags: those this release left pointing at the index's digest (a floating tag of a
    multi-platform tag copies the index, never one platform's image)."""
    for i in report.indexes:
        members = {m["target"] for m in i.platforms.values()}
        i.floating = sorted(f.tag for f in report.floating if f.target in members and f.action in ("moved", "created", "unchanged")
                            and i.digest is not None and f.digest == i.digest)
