"""Publish verified images: immutable tags from measured versions, push with
the docker engine, digests read back from the registry, floating tags moved
by semver, and a release manifest (release.json + release.md).

Only targets that built *and* passed verification (of that very image ID) are
tagged and pushed. An immutable tag already in the registry with the same
image (manifest config digest == image ID) is "unchanged" and not pushed
again; with a different image it is never overwritten.

Floating tags are registry-side retags of the pushed, digest-checked
manifest (GET the manifest, PUT it under the floating tag), so a floating tag
is byte-for-byte the verified immutable one and no layer is sent twice. A
floating tag moves only to an image of this release whose torch is at least
as new (semver) as the newest eligible image of its line already in the
registry: never backwards, never to an unverified image, pre-releases only
when ``tags.prerelease`` says so. On a tie (same torch, rebuilt) the new
build takes it.

After the digest check, an optional ``evidence`` step (:mod:`imagesmith.stages.evidence`)
attaches an SBOM, a verification attestation and signatures to every released
digest; what it attached is recorded per target in the release report.

Side effects are constructor parameters with real defaults (engine, registry
client, sleep, a before-push hook, the evidence step), so tests pass doubles.
This module never imports docker.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol, Sequence, TypeVar

import tenacity

from imagesmith import runstate
from imagesmith.atomic import write_text
from imagesmith.edges.credentials import RELEASE_FLAG, CredentialStore
from imagesmith.edges.protocols import EngineProtocol, RegistryProtocol
from imagesmith.edges.registry import Credentials, Manifest, entries, manifest_document, redact
from imagesmith.errors import ImagesmithError, RegistryError, UserError
from imagesmith.model import platform as platforms
from imagesmith.model import policy, schemas, tags
from imagesmith.model.matrix.records import ImageSpec, Matrix
from imagesmith.model.platform import DEFAULT as DEFAULT_PLATFORM
from imagesmith.model.platform import Platform
from imagesmith.model.ref import ImageRef
from imagesmith.model.tags import TagPolicy
from imagesmith.model.versions import cuda_variant, major, minor
from imagesmith.progress import Display, QuietDisplay
from imagesmith.report import markdown as release_markdown
from imagesmith.report.model import verified_how
from imagesmith.stages import indexes, push
from imagesmith.stages.artifacts import BuildRecord, Release
from imagesmith.stages.indexes import IndexRelease
from imagesmith.stages.push import Backoff as Backoff  # re-exported: the release's retry schedule is the one push path's
from imagesmith.stages.push import message_of as message_of
from imagesmith.stages.push import transient as transient

if TYPE_CHECKING:
    from imagesmith.edges.signing import Key

RELEASE_SCHEMA = schemas.RELEASE
LABEL = "io.imagesmith."
DONE = ("pushed", "unchanged")
SWAP_ROUNDS = 5  # a floating tag rewritten this often under one release: stop, say so
T = TypeVar("T")


# -- seams ------------------------------------------------------------------------------------


class Verified(Protocol):
    """What :func:`imagesmith.stages.verify.verify_image` returns."""

    @property
    def ok(self) -> bool: ...
    @property
    def report(self) -> Mapping[str, Any]: ...


# -- input ------------------------------------------------------------------------------------


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
    """What the build saved (``artifacts.BuildRecord``, each with its plan target) + verify outcomes by target id -> items."""
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
    from imagesmith.stages.verify import declared_checks

    return policy.evidence(outcome.report, declared_checks()) if outcome is not None else None


def verification_summary(outcome: Verified | None) -> dict[str, Any]:
    if outcome is None:
        return {"ok": False, "reason": "not verified"}
    rep = outcome.report
    ev = _evidence(outcome)
    assert ev is not None
    return {"ok": bool(outcome.ok), "tier": rep.get("tier"), "summary": rep.get("summary"),
            "started_at": rep.get("started_at"), "image_id": (rep.get("image") or {}).get("id"),
            "digest": (rep.get("image") or {}).get("digest"),
            "failed_checks": policy.failed_required(rep), "notes": list(rep.get("notes") or []),
            "mode": ev.mode, "gpus": ev.gpus, "gpu_verified": ev.gpu_verified, "gpu": ev.describe(),
            "gpu_short": ev.short(), "platform": ev.platform or None, "host": ev.host or None,
            "emulated": ev.emulated or None}


def platform_refusal(item: Item) -> str | None:
    """Why ``item`` is not released on its verification: the verify report (the signed one, where publish reads a
    statement) ran an image of another platform than the target's. None when they agree, or when the report does
    not say (written before imagesmith recorded it: its mode still decides, and emulation is always CPU mode)."""
    said = item.evidence.platform if item.evidence is not None else ""
    os_name, _, rest = said.partition("/")
    arch, _, variant = rest.partition("/")
    found = platforms.foreign(item.platform, os_name, arch, variant) if said else None
    if found is None:
        return None
    return (f"its verification ran a {found} image, but {item.target} is built for {item.platform}; not released: "
            f"verify the {item.platform} image")


# -- pure: fields, tags, retries -----------------------------------------------------------------


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


# -- what a push sent ---------------------------------------------------------------------------

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


# -- output -----------------------------------------------------------------------------------


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
    evidence: dict[str, Any] = field(default_factory=dict)  # what imagesmith.stages.evidence attached to the digest
    source: str | None = None  # the staged image it was promoted from
    promotion: dict[str, Any] = field(default_factory=dict)  # promote.Promotion: blobs mounted/copied, bytes, seconds
    gpu_verified: bool | None = None  # None: a CPU-only image (vetted on a CPU)
    note: str = ""  # the release policy's word on it, e.g. "not GPU-verified: ..."
    may_float: bool = field(default=True, repr=False)
    vulnerabilities: dict[str, Any] = field(default_factory=dict)  # imagesmith.stages.vulngate: snapshots, counts, findings
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


@dataclass
class ReleaseReport:
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


def index_floating(report: ReleaseReport) -> None:
    """Each image index's floating tags: those this release left pointing at the index's digest (a floating tag of a
    multi-platform tag copies the index, never one platform's image)."""
    for i in report.indexes:
        members = {m["target"] for m in i.platforms.values()}
        i.floating = sorted(f.tag for f in report.floating if f.target in members and f.action in ("moved", "created", "unchanged")
                            and i.digest is not None and f.digest == i.digest)


# -- the publisher --------------------------------------------------------------------------------


class ReleaseStopped(RegistryError):
    """A registry-wide failure (auth, a registry that stays down, a digest mismatch): nothing more is pushed."""


@dataclass(frozen=True)
class RemoteImage:
    tag: str
    digest: str
    config_digest: str | None
    fields: Mapping[str, str] | None


class Publisher:
    def __init__(self, engine: EngineProtocol, registry: RegistryProtocol, image: ImageSpec, policy: TagPolicy, date: str,
                 out_dir: Path, display: Display | None = None, credentials: Credentials | None = None,
                 backoff: Backoff = Backoff(), sleep: Callable[[float], None] = time.sleep,
                 before_push: Callable[[str], None] | None = None,
                 evidence: Callable[[TargetRelease], dict[str, Any]] | None = None,
                 promote: Callable[[str, str, str], Any] | None = None,
                 floating_gate: Callable[[str | None], str | None] | None = None, allow_cpu_verification: bool = False,
                 clock: Callable[[], float] = time.monotonic,
                 vulnerability_gate: Callable[[TargetRelease], str | None] | None = None,
                 trust: Mapping[str, Any] | None = None, index_evidence: Callable[[str], dict[str, Any]] | None = None) -> None:
        if not image.registry:
            raise UserError("image.registry is not set in the matrix: a release needs the registry to push to (e.g. harbor.example.com)")
        self.engine, self.registry, self.policy, self.date, self.out = engine, registry, policy, date, out_dir
        self.repo, self.name = image.repository, image.name
        self.display = display or QuietDisplay()
        self.credentials, self.backoff, self.sleep, self.clock = credentials, backoff, sleep, clock
        self.before_push = before_push or (lambda ref: None)
        self.evidence, self.promote = evidence, promote
        self.index_evidence = index_evidence  # an image index's digest -> what was attached to it (its signature)
        self.floating_gate = floating_gate  # digest -> why its floating tags are held back (None: they may move)
        self.allow_cpu = allow_cpu_verification
        self.vulnerability_gate = vulnerability_gate  # a target -> why its known vulnerabilities keep it back (None: release)
        self.trust = trust
        self._uploads_checked = False
        self._indexes: dict[str, list[TargetRelease]] = {}  # index tag -> its platforms' targets
        self.log: list[str] = []

    # -- public ---------------------------------------------------------------------
    def run(self, items: Sequence[Item]) -> ReleaseReport:
        """Release ``items``; release.json says ``running`` from the start, ``complete`` at
        the end, ``interrupted`` when a signal or an error ends the run early."""
        t0 = time.monotonic()
        report = ReleaseReport(self.registry.host, self.repo, self.date,
                               dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                               [self._prepare(i) for i in items], trust=self.trust)
        tracked = runstate.Tracked(self.out / "release.json", report.to_json(), lambda doc: doc | {"ok": False})
        self._indexes = {}
        try:
            self._name_indexes(report.targets, {i.target: i.group for i in items})
            self._check_unique(report.targets)
            self._release(report)
        except BaseException as exc:
            report.seconds = time.monotonic() - t0
            for r in report.targets:
                if r.status == "queued":
                    r.status, r.error = "not-pushed", f"not pushed: the release was interrupted ({runstate.stopped_by(exc)})"
            tracked.stop(exc, report.to_json())
            raise
        report.seconds = time.monotonic() - t0
        self._write(report)
        return report

    def _release(self, report: ReleaseReport) -> None:
        try:
            remote = self._remote()
            self._release_all(report)
            report.indexes = [self._write_index(tag, members) for tag, members in self._indexes.items()]
            report.floating = self._floating(report.targets, remote)
            self._attach_evidence(report)
            self._settle(report)
            index_floating(report)
        except ReleaseStopped as exc:
            report.errors.append(self._clean(str(exc)))
            for r in report.targets:
                if r.status == "queued":
                    self._fail(r, "not-pushed", "not pushed: the release stopped before it (see errors)")

    # -- preparation ------------------------------------------------------------------
    def _prepare(self, item: Item) -> TargetRelease:
        r = TargetRelease(item.target, item.image_id, "queued", verification=dict(item.verification),
                          versions=measured_versions(item.facts or {}), source=item.source, platform=item.platform.value)
        if not item.built or not item.image_id:
            return self._fail(r, "not-built", f"not built: {item.error or 'no image'}")
        if not item.verified:
            return self._fail(r, "not-verified", "verification failed; not tagged, not pushed" + (f" ({item.error})" if item.error else ""))
        refused = platform_refusal(item)
        if refused:
            return self._fail(r, "not-verified", refused)
        grant = self._grant(item, r)
        if not grant.release:
            return self._fail(r, "not-gpu-verified", grant.note)
        try:
            blocked = self.vulnerability_gate(r) if self.vulnerability_gate else None
        except UserError as exc:  # the image's inventory could not be measured: not released blind
            return self._fail(r, "failed", f"not released: its known vulnerabilities could not be matched ({exc})")
        if blocked:
            return self._fail(r, "vulnerable", f"not released: {blocked}")
        try:
            r.fields = tag_fields(item.facts or {}, item.layer, item.cell, self.date)
            r.tag = tags.render(self.policy.immutable, r.fields) + grant.suffix
        except (ValueError, KeyError) as exc:
            return self._fail(r, "failed", f"no immutable tag from the measured versions: {exc}")
        problems = tags.tag_problems(r.tag)
        if problems:
            return self._fail(r, "failed", "; ".join(problems) + " (tags.immutable in the matrix)")
        r.reference = f"{self.name}:{r.tag}"
        return r

    def _grant(self, item: Item, r: TargetRelease) -> policy.Grant:
        """The release policy for this target: a CUDA image needs GPU verification for floating tags."""
        cuda_image = r.versions.get("cuda", "cpu") != "cpu"
        ev = item.evidence or policy.Evidence(item.verified, "cpu", 0, "no verify report says how it ran", None, {})
        grant = policy.grant(cuda_image, ev, self.allow_cpu)
        r.gpu_verified = ev.gpu_verified if cuda_image else None
        r.note, r.may_float = grant.note, grant.floating
        return grant

    def _name_indexes(self, releases: list[TargetRelease], group_of: Mapping[str, str]) -> None:
        """The targets of one plan tag on several platforms become one image index (:mod:`imagesmith.stages.indexes`):
        each platform's image gets its own tag, and only the first platform's target carries the index's floating
        tags (when every platform may float)."""
        for members in indexes.groups(releases, group_of).values():
            tag = indexes.name_members(members, lambda m, why: self._fail(m, "failed", why))
            if tag is None:
                continue
            self._indexes[tag] = members
            for m in (m for m in members if m.status == "queued" and tags.tag_problems(m.tag)):  # "-arm64" made it too long
                self._fail(m, "failed", "; ".join(tags.tag_problems(m.tag)) + " (tags.immutable in the matrix, with the "
                           "platform's suffix)")
            first, rest = members[0], members[1:]
            first.may_float = all(m.may_float for m in members)
            for m in rest:
                m.may_float = False

    def _check_unique(self, releases: list[TargetRelease]) -> None:
        """One target per immutable tag: a second is failed before anything is pushed (it would replace the first)."""
        seen: dict[str, str] = {}
        for r in releases:
            if r.status == "queued" and r.tag in seen:
                self._fail(r, "failed", f"immutable tag {r.tag!r} is also {seen[r.tag]}'s; add fields to tags.immutable")
            seen.setdefault(r.tag, r.target)

    def _fail(self, r: TargetRelease, status: str, error: str) -> TargetRelease:
        r.status, r.error = status, self._clean(error)
        self.display.update(r.target, "skipped" if status.startswith("not-") else "failed", r.error[:120])
        return r

    # -- what the registry has ----------------------------------------------------------
    def _remote(self) -> dict[str, RemoteImage]:
        """Every tag of the repository with its digest, image ID and label fields."""
        names = self._retry(f"listing tags of {self.name}", lambda: self.registry.tags(self.repo))
        cache: dict[str, Mapping[str, str] | None] = {}
        out: dict[str, RemoteImage] = {}
        for tag in names:
            found = self._retry(f"reading {self.name}:{tag}", partial(self.registry.manifest, self.repo, tag))
            if found is None:
                continue
            key = found.config_digest or ""
            if key and key not in cache:
                labels = self._retry(f"reading the config of {self.name}:{tag}", partial(self.registry.labels_of_config, self.repo, key))
                cache[key] = label_fields(labels)
            out[tag] = RemoteImage(tag, found.digest, found.config_digest, cache.get(key))
        return out

    # -- immutable tags ----------------------------------------------------------------
    def _release_all(self, report: ReleaseReport) -> None:
        for r in report.targets:
            if r.status != "queued":
                continue
            try:
                self._release_one(r)
            except ReleaseStopped as exc:
                self._fail(r, "failed", str(exc))
                raise

    def _release_one(self, r: TargetRelease) -> None:
        assert r.image_id
        have = self._retry(f"reading {r.reference}", lambda: self.registry.manifest(self.repo, r.tag))
        if have is not None and have.config_digest == r.image_id:
            r.status, r.digest = "unchanged", have.digest
            self.display.update(r.target, "done", f"unchanged {r.tag}")
            return
        if have is not None:
            self._fail(r, "failed", f"{r.reference} already exists with another image ({have.config_digest}, this build "
                                    f"{r.image_id}); immutable tags are never overwritten: release with another --date, "
                                    f"or delete that tag in the registry if it is wrong")
            return
        if r.source:
            r.digest = self._promote(r)
        else:
            r.digest, r.traffic = self._push(r.image_id, r.tag, r.target)
        r.status = "pushed"
        self.display.update(r.target, "pushed", f"{r.tag} {r.digest[:19]}")

    def _push(self, image_id: str, tag: str, target: str) -> tuple[str, Traffic]:
        """Tag, push (with retries), then read the digest back and compare; what the push
        sent. A push that fails (or is interrupted) removes the engine-side tag it created."""
        ref = f"{self.name}:{tag}"
        self.display.update(target, "pushing", tag)
        self.before_push(ref)
        self._check_uploads()
        created = self.engine.image(ref) is None
        self._retry(f"tagging {image_id[:19]} as {ref}", lambda: self.engine.tag(image_id, self.name, tag))
        auth = self.credentials.auth_config() if self.credentials else None
        lines: list[str] = []
        log = self._logger(ref)

        def on_line(line: str) -> None:
            lines.append(line)
            log(line)
        try:
            digest = self._retry(f"push {ref}", lambda: self._push_once(tag, auth, ref, on_line))
        except BaseException:
            if created:
                self._untag(ref)
            raise
        back = self._check_digest(ref, tag, digest, image_id)
        config = self._retry(f"reading the config of {ref}", lambda: self.registry.config(self.repo, image_id))
        return back.digest, traffic(back.raw, (config.get("rootfs") or {}).get("diff_ids") or [], lines)  # the registry's, read back

    def _promote(self, r: TargetRelease) -> str:
        """Registry to registry, no engine (:mod:`imagesmith.stages.promote`); the release digest is the staged one."""
        assert r.source and r.image_id
        ref, promote, source = f"{self.name}:{r.tag}", self.promote, r.source
        if promote is None:
            raise ReleaseStopped(f"{r.target} is staged ({r.source}) but this release cannot promote (no registry client for it)")
        self.display.update(r.target, "pushing", f"promoting {str(ImageRef.parse(source).digest)[:19]} to {r.tag}")
        self.before_push(ref)
        done = self._retry(f"promote {source} to {ref}", lambda: promote(source, self.repo, r.tag))
        r.promotion = done.to_json()
        self._check_digest(ref, r.tag, done.digest, r.image_id)
        return str(done.digest)

    def _push_once(self, tag: str, auth: Mapping[str, str] | None, ref: str, on_line: Callable[[str], None]) -> str:
        return push.push_once(self.engine, self.registry, self.repo, self.name, tag, auth, on_line)

    def _check_uploads(self) -> None:
        """Once per release, before the first push: does the registry take uploads? A full
        or read-only registry answers at once, with its reason, instead of after the
        engine's own minute of retrying every layer."""
        if not self._uploads_checked:
            self._retry(f"starting an upload to {self.name}", lambda: self.registry.check_upload(self.repo))
            self._uploads_checked = True

    def _untag(self, ref: str) -> None:
        try:
            self.engine.untag(ref)
        except (ImagesmithError, OSError) as exc:
            self.display.note(f"could not remove the engine-side tag {ref}: {exc}")

    def _check_digest(self, ref: str, tag: str, digest: str, image_id: str) -> Manifest:
        back = self._retry(f"reading {ref} back", lambda: self.registry.manifest(self.repo, tag))
        if back is None or back.digest != digest or (back.config_digest and back.config_digest != image_id):
            seen = f"{back.digest} (image {back.config_digest})" if back else "nothing"
            raise ReleaseStopped(f"digest mismatch for {ref}: the push reported {digest} (image {image_id}) but the "
                                 f"registry serves {seen}; something else writes to this repository: stop it and run the release again")
        return back

    def _write_index(self, tag: str, members: list[TargetRelease]) -> IndexRelease:
        """The image index of one multi-platform tag, when every platform was released; else why not."""
        try:
            out = indexes.write(self.registry, self.repo, self.name, tag, members, self._retry)
        except ReleaseStopped as exc:
            out = indexes.IndexRelease(tag, f"{self.name}:{tag}", "failed", {}, reason=self._clean(str(exc)))
        out.reason = self._clean(out.reason)
        self.display.note(f"{out.reference}: image index {out.action}" + (f" ({out.reason})" if out.reason else "")
                          + (f" {out.digest[:19]}" if out.digest else ""))
        return out

    def _logger(self, ref: str) -> Callable[[str], None]:
        return lambda line: self.log.append(self._clean(f"{ref}: {line}"))

    # -- floating tags -------------------------------------------------------------------
    def _floating(self, releases: list[TargetRelease], remote: Mapping[str, RemoteImage]) -> list[FloatingRelease]:
        done = {r.target: r for r in releases if r.status in DONE and r.may_float and r.floating_digest}
        held = self._held_back(done)
        mine = tags.assign(self.policy, [tags.Candidate(r.target, r.fields) for r in done.values() if r.target not in held])
        theirs = tags.assign(self.policy, self._remote_candidates(remote))
        moved = [self._float(ftag, done[c.ref], theirs.get(ftag), remote.get(ftag)) for ftag, c in sorted(mine.items())]
        return moved + self._kept_by_gate(done, held, set(mine), remote)

    # -- the fleet gate (imagesmith.stages.fleet.gate): floating tags only for digests every required GPU class passed
    def _held_back(self, done: Mapping[str, TargetRelease]) -> dict[str, str]:
        gate = self.floating_gate
        if gate is None:
            return {}
        reasons = {t: next(filter(None, (gate(m.digest) for m in self._indexes.get(r.index, [r]))), None) for t, r in done.items()}
        return {t: why for t, why in reasons.items() if why}

    def _kept_by_gate(self, done: Mapping[str, TargetRelease], held: Mapping[str, str], taken: set[str],
                      remote: Mapping[str, RemoteImage]) -> list[FloatingRelease]:
        """The floating tags a held-back image would have taken and nobody else did: kept, with the reason."""
        would = tags.assign(self.policy, [tags.Candidate(t, done[t].fields) for t in held])
        out = []
        for ftag, c in sorted(would.items()):
            if ftag in taken:
                continue
            current = remote.get(ftag)
            out.append(FloatingRelease(ftag, "kept", f"{self.name}:{ftag}", None, done[c.ref].fields["torch"],
                                       current.digest if current else None, current.digest if current else None,
                                       f"{c.ref} ({(done[c.ref].floating_digest or '')[:19]}) {held[c.ref]}"))
            self.display.note(f"{self.name}:{ftag}: kept ({held[c.ref]})")
        return out

    def _remote_candidates(self, remote: Mapping[str, RemoteImage]) -> list[tags.Candidate]:
        """Images in the registry, immutable tags before floating ones (so a
        reason names ``2.9.1-...-20261115`` rather than ``latest``)."""
        cands = [tags.Candidate(t, img.fields, verified=not policy.marked_unverified(t))
                 for t, img in sorted(remote.items()) if img.fields]
        floating = set(tags.assign(self.policy, cands))
        return sorted(cands, key=lambda c: c.ref in floating)

    def _float(self, ftag: str, r: TargetRelease, rival: tags.Candidate | None, current: RemoteImage | None) -> FloatingRelease:
        f = FloatingRelease(ftag, "kept", f"{self.name}:{ftag}", r.target, r.fields["torch"], r.floating_digest,
                            current.digest if current else None)
        if rival is not None and rival.version > tags.to_semver(r.fields["torch"]):
            f.target, f.torch, f.digest = None, rival.fields["torch"], f.previous
            f.reason = f"the registry has newer torch {rival.fields['torch']} ({self.name}:{rival.ref}); a floating tag never moves back"
            return f
        if current is not None and current.digest == r.floating_digest:
            f.action, f.reason = "unchanged", "already points at this image"
        else:
            f.action = self._retag(f, r)
        if f.action not in ("failed", "kept"):
            r.floating.append(ftag)
        self.display.note(f"{f.reference}: {f.action}{' (' + f.reason + ')' if f.reason else ''}")
        return f

    def _retag(self, f: FloatingRelease, r: TargetRelease) -> str:
        """PUT the immutable tag's manifest (or image index) under the floating tag; check the digest."""
        ref = f"{self.name}:{r.floating_tag}"
        try:
            source = self._retry(f"reading {ref}", lambda: self.registry.manifest(self.repo, r.floating_tag))
            if source is None or source.digest != r.floating_digest:
                raise ReleaseStopped(f"{ref} no longer has digest {r.floating_digest}; run the release again")
            self.before_push(f.reference)
            swapped = self._swap(f, r, source)
        except RegistryError as exc:
            f.reason = self._clean(str(exc))
            return "failed"
        return swapped or ("created" if f.previous is None else "moved")

    def _swap(self, f: FloatingRelease, r: TargetRelease, source: Manifest) -> str | None:
        """Compare-and-swap on the registry (which has no conditional PUT): the floating tag is read
        again right before the PUT, and when another release moved it since this one looked, semver
        decides again (a newer torch there: kept); after the PUT it is read back, and a write that raced
        in between is judged the same way. None: written; "kept" or "unchanged": not written."""
        wrote = False
        for _ in range(SWAP_ROUNDS):
            now = self._retry(f"reading {f.reference}", lambda: self.registry.manifest(self.repo, f.tag))
            if now is not None and now.digest == source.digest:
                return None if wrote else "unchanged"
            if now is not None and now.digest != f.previous and self._newer_there(f, r, now):
                return "kept"
            f.previous = now.digest if now else None
            self._retry(f"tagging {f.reference}", lambda: self.registry.put_manifest(self.repo, f.tag, source))
            wrote = True
            back = self._retry(f"reading {f.reference} back", lambda: self.registry.manifest(self.repo, f.tag))
            if back is not None and back.digest == source.digest:
                return None
        raise ReleaseStopped(f"{f.reference} changed {SWAP_ROUNDS} times while this release wrote it: other releases are "
                             f"moving it at the same time; run one release at a time (a CI resource group) and run this again")

    def _newer_there(self, f: FloatingRelease, r: TargetRelease, now: Manifest) -> bool:
        """Another release moved ``f`` meanwhile: is what it holds now newer than ``r``? (Then ``f`` is kept.)"""
        fields = self._holder(f, now)
        if fields is None or tags.to_semver(fields["torch"]) <= tags.to_semver(r.fields["torch"]):
            return False
        f.action, f.target, f.torch, f.digest, f.previous = "kept", None, fields["torch"], now.digest, now.digest
        f.reason = (f"another release moved it to newer torch {fields['torch']} ({now.digest[:19]}) while this one ran; "
                    f"a floating tag never moves back")
        return True

    def _holder(self, f: FloatingRelease, now: Manifest) -> dict[str, str] | None:
        """Tag fields of the image a floating tag holds now (its config labels)."""
        if not now.config_digest:
            return None
        config = now.config_digest
        return label_fields(self._retry(f"reading the config of {f.reference}", lambda: self.registry.labels_of_config(self.repo, config)))

    def _settle(self, report: ReleaseReport) -> None:
        """A last look at every floating tag this release wrote (after the evidence, seconds later): a
        concurrent release that moved one to an *older* torch in the instant between its own check and
        its write is undone here; a newer one stays (the tag is then reported kept)."""
        targets = {t.target: t for t in report.targets}
        for f in [f for f in report.floating if f.action in ("moved", "created", "unchanged") and f.target]:
            r = targets[f.target or ""]
            self._settle_one(f, r)
            if f.action in ("kept", "failed"):
                r.floating = [t for t in r.floating if t != f.tag]

    def _settle_one(self, f: FloatingRelease, r: TargetRelease) -> None:
        now = self._retry(f"reading {f.reference}", lambda: self.registry.manifest(self.repo, f.tag))
        if now is None or now.digest == f.digest or self._newer_there(f, r, now):
            return
        held = self._holder(f, now)
        if held is not None and tags.to_semver(held["torch"]) == tags.to_semver(r.fields["torch"]):
            return  # the same torch, rebuilt by another release: either is right, no tug of war
        self.display.note(f"{f.reference}: moved back to {now.digest[:19]} by another release; moving it forward again")
        f.previous, f.action = now.digest, self._retag(f, r)

    # -- evidence ------------------------------------------------------------------------
    def _attach_evidence(self, report: ReleaseReport) -> None:
        """After the digest check: SBOM, attestation and signature for each released digest."""
        attach = self.evidence
        for r in (t for t in report.targets if t.status in DONE and t.digest and attach is not None):
            assert attach is not None
            self.display.update(r.target, "pushing", f"evidence for {(r.digest or '')[:19]}")
            try:
                r.evidence = self._retry(f"attaching evidence to {r.reference}", partial(attach, r))
            except ReleaseStopped as exc:
                report.errors.append(f"{r.target}: evidence not attached: {exc}")
                continue
            pushed = sum(a["status"] == "pushed" for a in r.evidence.get("artifacts", []))
            self.display.update(r.target, "done", f"evidence: {pushed} pushed, {len(r.evidence.get('artifacts', [])) - pushed} unchanged")
        sign_index = self.index_evidence
        for i in (i for i in report.indexes if i.action in DONE and i.digest and sign_index is not None):
            assert i.digest and sign_index is not None
            sign = partial(sign_index, i.digest)
            try:
                i.evidence = self._retry(f"signing the image index {i.reference}", sign)
            except ReleaseStopped as exc:
                report.errors.append(f"{i.reference}: the image index's signature not attached: {exc}")

    # -- retries, redaction, files ----------------------------------------------------------
    def _retry(self, what: str, action: Callable[[], T]) -> T:
        """``action`` with backoff (tenacity) on :func:`transient` errors; a permanent or final one stops the release."""
        t0, tries = self.clock(), max(1, self.backoff.tries)

        def note(state: tenacity.RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            wait = state.next_action.sleep if state.next_action else 0.0
            self.display.note(f"{what}: {self._clean(message_of(exc or Exception()))}; "
                              f"retry {state.attempt_number} of {tries - 1} in {wait:g}s")

        retrying = push.retrying(self.backoff, self.sleep, note)
        try:
            return retrying(action)
        except (ImagesmithError, OSError) as exc:
            last = self._clean(message_of(exc))
            if not transient(exc):
                raise ReleaseStopped(self._with_source(last if what in last else f"{what}: {last}")) from None
            waited = float(retrying.statistics.get("idle_for", 0.0))
        last = last.removeprefix(f"{what} failed: ")
        raise ReleaseStopped(f"{what} failed {tries} times in {self.clock() - t0:.1f}s "
                             f"({waited:g}s of it waiting between tries); last error: {last}. "
                             f"The registry {self.registry.host} looks down or overloaded: check it, then run the release again "
                             f"(what was pushed stays; a re-run pushes only the rest)")

    def _with_source(self, message: str) -> str:
        """A login failure also says which credentials were tried (never their value)."""
        if not re.search(r"\b(?:docker|podman) login\b", message) or "[credentials used:" in message:
            return message
        return f"{message} [credentials used: {self.credentials.source if self.credentials else 'none given (the engine used its own)'}]"

    def _clean(self, text: str) -> str:
        return redact(text, self.credentials)

    def _write(self, report: ReleaseReport) -> None:
        paths = {"json": self.out / "release.json", "markdown": self.out / "release.md", "log": self.out / "push.log"}
        write_text(paths["json"], json.dumps(report.to_json() | {"state": runstate.COMPLETE}, indent=2, sort_keys=True) + "\n")
        write_text(paths["markdown"], release_markdown.release_document(report.to_json()))
        write_text(paths["log"], "\n".join(self.log) + ("\n" if self.log else ""))
        report.paths = {k: str(v) for k, v in paths.items()}


def publish(engine: EngineProtocol, registry: RegistryProtocol, matrix: Matrix, items: Sequence[Item], date: str, out_dir: Path,
            display: Display | None = None, credentials: Credentials | None = None, **seams: Any) -> ReleaseReport:
    """Tag, push and record every verified item of ``items``; see :class:`Publisher` (``seams``:
    backoff, sleep, before_push, allow_cpu_verification)."""
    return Publisher(engine, registry, matrix.image, matrix.tags, date, out_dir, display, credentials, **seams).run(items)


def release_to(engine: EngineProtocol, spec: Release, records: Sequence[BuildRecord], outcomes: Mapping[str, Verified],
               out_dir: Path, display: Display | None = None, date: str | None = None, store: CredentialStore | None = None,
               ca_file: Path | None = None, signing_key: Key | None = None,
               with_evidence: bool = True, inventory: Callable[[str], Mapping[str, Any]] | None = None,
               floating_gate: Callable[[str | None], str | None] | None = None,
               allow_cpu_verification: bool = False, client: RegistryProtocol | None = None,
               vulnerabilities: Any = None, trust: Mapping[str, Any] | None = None) -> ReleaseReport:
    """Release what the build saved (its records carry the plan's targets; ``spec`` the registry, repository,
    tag policy and build date, ``date`` overriding the latter): the store's login for the release registry when
    the operator declared that host (``store.declared.release``; anonymous when nothing was declared, refused when
    another was), a registry client, then :class:`Publisher`. Staged items are promoted registry to registry
    (:mod:`imagesmith.stages.promote`) under the same release policy as pushed ones (GPU-verified CUDA images only
    float; ``floating_gate`` holds back digests the fleet did not pass). With ``with_evidence`` each released
    digest gets its SBOM, attestation and (with ``signing_key``) signatures (:mod:`imagesmith.stages.evidence`);
    ``inventory`` (image ID -> inventory) replaces running the image for the SBOM; ``client`` replaces the
    registry client made for ``spec``'s registry (a test's double); ``vulnerabilities`` (an imagesmith.stages.vulngate.Gate)
    matches every image's SBOM before it is pushed: findings at or above the matrix's threshold keep the target back
    (status ``vulnerable``), and each released digest gets the CycloneDX vulnerability document as evidence; ``trust``
    (the trust policy and who signed each accepted verification, :class:`imagesmith.pipeline.Signed`) is recorded in
    release.json and release.md."""
    from imagesmith.edges.registry import Registry
    from imagesmith.stages.promote import registry_promoter

    image, store = spec.image, store or CredentialStore()
    if not image.registry:
        raise UserError(f"{spec.matrix}: image.registry is not set; a release needs the registry to push to")
    credentials = store.for_artifact(image.registry, store.declared.release, f"the release of {spec.matrix}",
                                     "release registry", RELEASE_FLAG)
    client = client or Registry(image.registry, credentials, ca_file=ca_file,
                               anonymous_hint=store.anonymous_hint(image.registry, store.declared.release, RELEASE_FLAG))
    items = items_from(records, outcomes)
    signers = (trust or {}).get("targets") or {}
    items = [replace(i, verification=dict(i.verification) | {"signed": signers[i.target]}) if i.target in signers else i
             for i in items]
    bases = {r.target.id: r.target.base_image for r in records}
    reports = {t: o.report for t, o in outcomes.items()}
    measure = _once(inventory or partial(_run_inventory, engine))  # the gate and the evidence ask for the same image
    step = evidence_step(engine, client, image.repository, bases, reports, signing_key, out_dir, measure, vulnerabilities) if with_evidence else None
    sign_index = index_evidence_step(client, image.repository, signing_key) if with_evidence else None
    gate = vulnerability_step(vulnerabilities, image.name, bases, measure, out_dir) if vulnerabilities is not None else None
    promote = registry_promoter(client, store, ca_file)
    return Publisher(engine, client, image, spec.tags, date or spec.date, out_dir, display, credentials, evidence=step,
                     promote=promote, floating_gate=floating_gate, allow_cpu_verification=allow_cpu_verification,
                     vulnerability_gate=gate, trust=trust, index_evidence=sign_index).run(items)


def _once(measure: Callable[[str], Mapping[str, Any]]) -> Callable[[str], Mapping[str, Any]]:
    """``measure`` asked at most once per image ID."""
    seen: dict[str, Mapping[str, Any]] = {}

    def inventory(image_id: str) -> Mapping[str, Any]:
        if image_id not in seen:
            seen[image_id] = measure(image_id)
        return seen[image_id]
    return inventory


def _run_inventory(engine: EngineProtocol, image_id: str) -> Mapping[str, Any]:
    from imagesmith.stages import verify

    return verify.run_facts(engine, image_id, args=["--inventory"])


def vulnerability_step(check: Any, name: str, base_images: Mapping[str, str], inventory: Any,
                       out_dir: Path) -> Callable[[TargetRelease], str | None]:
    """Before a target is pushed: its image's SBOM (from the inventory measured once per image ID,
    the same one the evidence uses) matched by ``check``; the result lands in the release record."""
    from imagesmith.stages import sbom

    def gate(r: TargetRelease) -> str | None:
        assert r.image_id
        inv = sbom.inventory_from(inventory(r.image_id))  # as the evidence gets it: signed, or measured here; never a file in OUT
        identity = sbom.ImageIdentity(name, r.image_id, r.image_id, base_images.get(r.target, ""), "", r.versions)
        found = check(json.loads(sbom.build_bom(inv, identity)))
        r.vulnerabilities = found.to_json()
        return found.reason()  # type: ignore[no-any-return]
    return gate


def index_evidence_step(client: Any, repo: str, key: Any) -> Callable[[str], dict[str, Any]]:
    """What an image index gets (its platforms' images carry their SBOM and verification): the release key's
    signature on the index digest, as ``cosign sign`` signs an index; nothing without a key."""
    from imagesmith.stages import evidence

    return lambda digest: evidence.Attacher(client, repo, key).attach(digest, []).to_json()


def evidence_step(engine: EngineProtocol, client: Any, repo: str, base_images: Mapping[str, str], reports: Mapping[str, Mapping[str, Any]],
                  key: Any, out_dir: Path, inventory: Any = None, vulnerabilities: Any = None) -> Callable[[TargetRelease], dict[str, Any]]:
    """The evidence stage for one released target: its digest, image, base image and verify report
    (and, with ``vulnerabilities``, the CycloneDX vulnerability document of its SBOM)."""
    from imagesmith.stages import evidence, verify

    step = evidence.ReleaseEvidence(client, repo, key, inventory or partial(verify.run_facts, engine, args=["--inventory"]), out_dir,
                                    vulnerabilities)

    def attach(r: TargetRelease) -> dict[str, Any]:
        assert r.digest and r.image_id
        created = str(client.config(repo, r.image_id).get("created") or "")
        return step(evidence.Subject(r.target, r.digest, r.image_id, base_images.get(r.target, ""), created, r.versions,
                                     reports.get(r.target)))
    return attach
