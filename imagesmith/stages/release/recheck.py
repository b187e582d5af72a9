"""``imagesmith vulns recheck``: every released digest of a repository judged again against newer advisories.

Advisories appear after a release. This stage reads what the registry already holds, as any reader would:

1. every tag of the repository (the evidence tags ``sha256-…`` aside) and the digest it names, grouped by
   digest; each image's tag fields come from its config's labels (content the digest, and so its signature,
   covers). A tag is *floating* when the matrix's floating templates render it for an image of the repository
   (its *line*: every image that renders it), else *immutable*;
2. the evidence of each digest (:class:`imagesmith.stages.evidence.evidence.Reader`, signatures checked against the keys
   given): the SBOM statement signed by one of them, whose subject is the digest, is matched against the
   snapshots (:func:`imagesmith.stages.evidence.vulngate.image`) and judged by the matrix's policy; a digest whose
   evidence does not check out, or that has no signed SBOM, is *not judged* (and says why);
3. with ``hold`` (``--hold-floating``): a floating tag on a digest now at or above the threshold moves to the
   newest clean release of its line (clean: judged, nothing blocking; eligible as publish's semver: verified,
   no pre-release unless the matrix allows them), by a compare-and-swap on the registry. This is the one move
   "backwards" imagesmith makes, and only by that flag: the target digest is signed with the release key as
   any released digest is, and the held digest gets the vulnerability document (CycloneDX VEX) of this match,
   signed, so the reason travels with it. No clean release of the line: the tag stays, and the report says so.

An image index is judged through its platforms' images (each carries its own SBOM): vulnerable when one of
them is, clean when all are; its tag fields are its first platform's (as the registry client reads an index),
and a floating tag on an index moves only to another index (publish never floats a platform's image).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from securesystemslib.signer import SSlibKey

from imagesmith.atomic import write_bytes, write_json, write_text
from imagesmith.edges import signing
from imagesmith.edges.protocols import RegistryProtocol
from imagesmith.edges.registry import INDEXES, Manifest, entries, manifest_document
from imagesmith.errors import RegistryError
from imagesmith.model import advisories, policy, tags, vulns
from imagesmith.model.tags import TagPolicy
from imagesmith.report import recheck as recheck_report
from imagesmith.stages.evidence import evidence, vex, vulngate
from imagesmith.stages.release.releases import label_fields

SCHEMA = "imagesmith.recheck/1"
EVIDENCE_TAG = "sha256-"  # the referrers tag schema's index, cosign's .sig and .att: not releases


@dataclass
class Image:
    """One released digest: its tags, its tag fields and what the recheck found."""

    digest: str
    media_type: str
    fields: Mapping[str, str] | None
    tags: list[str] = field(default_factory=list)  # every tag on it, immutable and floating
    result: vulngate.ImageResult | None = None
    problem: str | None = None  # why it was not judged
    platforms: tuple[str, ...] = ()  # an image index: its images' digests

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEXES

    @property
    def status(self) -> str:
        if self.result is None:
            return "not-judged"
        return "vulnerable" if self.result.blocked() else "clean"

    def reason(self) -> str:
        if self.result is None:
            return self.problem or "not judged"
        return self.result.reason() or ""

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "tags": sorted(self.tags), "status": self.status, "problem": self.problem,
                "torch": (self.fields or {}).get("torch"), "vulnerabilities": self.result.to_json() if self.result else None,
                "reason": self.reason() or None}


@dataclass
class Hold:
    """A floating tag on a vulnerable digest, and what the recheck did about it."""

    tag: str
    action: str  # moved | kept (no clean release of its line) | would-move (no --hold-floating) | failed
    previous: str  # the digest it was on
    digest: str  # the digest it is on now
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)  # what was signed and attached (moved)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Recheck:
    """What one recheck found: every released image, every tag, and each floating tag it held back."""

    name: str  # registry/repository
    checked_at: dt.datetime
    snapshots: tuple[Mapping[str, Any], ...]
    threshold: str
    stale: tuple[str, ...]
    stale_fails: bool
    images: list[Image]
    floating_tags: frozenset[str]
    holds: list[Hold] = field(default_factory=list)

    def tag_rows(self) -> list[dict[str, Any]]:
        """One row per released tag: the digest it names now (after any move) and that digest's verdict."""
        now = {h.tag: h.digest for h in self.holds}
        by_digest = {i.digest: i for i in self.images}
        rows = []
        for image in self.images:
            for tag in image.tags:
                held = by_digest.get(now.get(tag, image.digest), image)
                rows.append(_row(tag, "floating" if tag in self.floating_tags else "immutable", held))
        return sorted(rows, key=lambda r: (r["kind"], r["tag"]))

    def unsafe(self) -> list[str]:
        """The floating tags that still name a digest that is vulnerable or could not be judged, and why."""
        return [f"{r['tag']} ({r['digest'][:19]}): {r['reason']}" for r in self.tag_rows()
                if r["kind"] == "floating" and r["status"] != "clean"]

    @property
    def ok(self) -> bool:
        return not self.unsafe() and not (self.stale and self.stale_fails)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "ok": self.ok, "name": self.name, "checked_at": self.checked_at.isoformat(timespec="seconds"),
                "snapshots": [dict(s) for s in self.snapshots], "threshold": self.threshold, "stale": list(self.stale),
                "tags": self.tag_rows(), "images": [i.to_json() for i in self.images],
                "floating": [h.to_json() for h in self.holds], "unsafe": self.unsafe()}


def _row(tag: str, kind: str, image: Image) -> dict[str, Any]:
    result = image.result
    return {"tag": tag, "kind": kind, "digest": image.digest, "status": image.status, "torch": (image.fields or {}).get("torch"),
            "counts": result.counts() if result else None, "blocking": len(result.failures) if result else None,
            "findings": len(result.findings) if result else None, "reason": image.reason() or None}


# -- reading the repository -------------------------------------------------------------------------------


def released(registry: RegistryProtocol, repo: str) -> list[Image]:
    """Every digest a release tag of ``repo`` names, with its tags and tag fields (config labels)."""
    images: dict[str, Image] = {}
    labels: dict[str, Mapping[str, str] | None] = {}
    for tag in sorted(registry.tags(repo)):
        if tag.startswith(EVIDENCE_TAG):
            continue
        found = registry.manifest(repo, tag)
        if found is None:
            continue
        if found.digest not in images:
            images[found.digest] = Image(found.digest, found.media_type, _fields(registry, repo, found, labels), [],
                                         platforms=_platforms(found))
        images[found.digest].tags.append(tag)
    return sorted(images.values(), key=lambda i: i.digest)


def _fields(registry: RegistryProtocol, repo: str, found: Manifest, cache: dict[str, Mapping[str, str] | None]) -> Mapping[str, str] | None:
    key = found.config_digest  # of an index: its first platform's (the registry client resolves it so)
    if not key:
        return None
    if key not in cache:
        cache[key] = label_fields(registry.labels_of_config(repo, key))
    return cache[key]


def _platforms(found: Manifest) -> tuple[str, ...]:
    if found.media_type not in INDEXES:
        return ()
    return tuple(str(e.get("digest")) for e in entries(manifest_document(found.raw, found.digest), "manifests"))


def lines(tag_policy: TagPolicy, images: Sequence[Image]) -> dict[str, list[Image]]:
    """Floating tag -> its line: the images of the repository the matrix's floating templates render it for."""
    out: dict[str, list[Image]] = {}
    for image in images:
        for tag in floating_of(tag_policy, image.fields):
            out.setdefault(tag, []).append(image)
    return out


def floating_of(tag_policy: TagPolicy, fields: Mapping[str, str] | None) -> list[str]:
    if fields is None:
        return []
    return [tags.render(ft.template, fields) for ft in tag_policy.floating if tags.matches_when(ft.when, fields)]


# -- judging ----------------------------------------------------------------------------------------------


Judge = Callable[[Mapping[str, Any]], vulngate.ImageResult]


def judge(registry: RegistryProtocol, repo: str, image: Image, keys: Sequence[SSlibKey], check: Judge) -> None:
    """The image's signed SBOM matched by ``check`` (an index: each platform's image's); else why it is not judged."""
    if not image.is_index:
        _judge_one(registry, repo, image, keys, check)
        return
    parts = [Image(d, "", None) for d in image.platforms]
    for part in parts:
        _judge_one(registry, repo, part, keys, check)
    index_verdict(image, parts)


def index_verdict(image: Image, parts: Sequence[Image]) -> None:
    """An index as its platforms' images say: not judged if one is not (or it has none); else their findings together."""
    missing = next((p for p in parts if p.result is None), None)
    if not parts or missing is not None:
        image.problem = f"its platform image {missing.digest[:19]}: {missing.problem}" if missing else "an image index without images"
        return
    image.result = vulngate.merged([p.result for p in parts if p.result is not None])


def _judge_one(registry: RegistryProtocol, repo: str, image: Image, keys: Sequence[SSlibKey], check: Judge) -> None:
    found = evidence.Reader(registry, repo, keys).read(image.digest)
    if not found.ok:
        image.problem = f"its evidence does not check out: {found.all_problems()[0]}"
        return
    signed = [a for a in found.of_kind("sbom") if a.signed_by and a.statement is not None]
    if not signed:
        image.problem = "no SBOM signed by the given key is attached to it"
        return
    statement = signed[0].statement
    assert statement is not None
    image.result = check(statement.predicate)


# -- holding floating tags back ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HoldOptions:
    """``--hold-floating``: move floating tags off vulnerable digests, signed with ``key`` (the release key)."""

    key: signing.Key
    tag_policy: TagPolicy


def holds(report: Recheck, line_of: Mapping[str, list[Image]], options: HoldOptions | None,
          move: Callable[[Hold, Image, Image], None]) -> list[Hold]:
    """For each floating tag on a vulnerable digest: the newest clean release of its line it moves to (``move``),
    or why it stays."""
    by_digest = {i.digest: i for i in report.images}
    out = []
    for image in (i for i in report.images if i.status == "vulnerable"):
        for tag in sorted(t for t in image.tags if t in report.floating_tags):
            hold = _hold(tag, image, line_of.get(tag, []), options, report.floating_tags)
            if hold.action == "moved":
                move(hold, image, by_digest[hold.digest])
            out.append(hold)
    return out


def _hold(tag: str, image: Image, line: Sequence[Image], options: HoldOptions | None, floating: frozenset[str]) -> Hold:
    why = image.reason()
    target = newest_clean(line, options.tag_policy if options else None, image)
    if target is None:
        return Hold(tag, "kept", image.digest, image.digest, f"no clean release of its line to move to; it stays on a digest that {why}")
    action = "moved" if options is not None else "would-move"
    verb = "moved" if options is not None else "would move (--hold-floating)"
    return Hold(tag, action, image.digest, target.digest if options is not None else image.digest,
                f"{verb} to the newest clean release of its line, {_name(target, floating)} ({target.digest[:19]}), off {image.digest[:19]}: {why}")


def newest_clean(line: Sequence[Image], tag_policy: TagPolicy | None, current: Image) -> Image | None:
    """The newest (semver of its torch, then its build date) clean, eligible image of ``line`` but ``current``, of
    its kind (an index for an index, an image for an image)."""
    allow_pre = tag_policy.prerelease if tag_policy else False
    eligible = [i for i in line if i.digest != current.digest and i.is_index == current.is_index and i.status == "clean" and i.fields
                and not all(policy.marked_unverified(t) for t in i.tags)
                and (allow_pre or tags.to_semver(i.fields["torch"]).prerelease is None)]
    return max(eligible, key=lambda i: (tags.to_semver((i.fields or {})["torch"]), (i.fields or {}).get("date", ""), i.digest),
               default=None)


def _name(image: Image, floating: frozenset[str]) -> str:
    """An image by its immutable tag (a floating one only when it has none)."""
    return next((t for t in sorted(image.tags) if t not in floating), sorted(image.tags)[0])


class Mover:
    """Moves one floating tag on the registry (compare-and-swap: read right before the PUT, read back after),
    signs the digest it moved to with the release key, and attaches this match's VEX, signed, to the one it left."""

    def __init__(self, registry: RegistryProtocol, repo: str, key: signing.Key) -> None:
        self.registry, self.repo, self.key = registry, repo, key
        self.name = f"{registry.host}/{repo}"

    def __call__(self, hold: Hold, held: Image, target: Image) -> None:
        try:
            self._swap(hold, target)
        except RegistryError as exc:
            hold.action, hold.digest, hold.reason = "failed", hold.previous, f"{hold.reason}; not moved: {exc}"
            return
        attacher = evidence.Attacher(self.registry, self.repo, self.key)
        signed = attacher.attach(target.digest, [])  # the release key's signature on the digest the tag names now
        hold.evidence = {"signature": signed.to_json(), "held": self._why(attacher, held)}

    def _swap(self, hold: Hold, target: Image) -> None:
        now = self.registry.manifest(self.repo, hold.tag)
        if now is None or now.digest != hold.previous:
            raise RegistryError(f"{self.name}:{hold.tag} changed while this recheck ran (now {now.digest[:19] if now else 'gone'}); "
                                f"run it again")
        source = self.registry.manifest(self.repo, target.digest)
        if source is None or source.digest != target.digest:
            raise RegistryError(f"{self.name}@{target.digest} is no longer in the registry")
        self.registry.put_manifest(self.repo, hold.tag, source)
        back = self.registry.manifest(self.repo, hold.tag)
        if back is None or back.digest != target.digest:
            raise RegistryError(f"{self.name}:{hold.tag} reads back as {back.digest[:19] if back else 'nothing'}, not {target.digest[:19]}")

    def _why(self, attacher: evidence.Attacher, held: Image) -> dict[str, Any]:
        """The VEX of this match, signed, as a referrer of the held digest (of an index: none; its images carry theirs)."""
        result = held.result
        assert result is not None
        if held.is_index:
            return {}
        doc = vex.document(self.name, held.digest, result.findings, result.snapshots, result.matched_at)
        created = result.matched_at.isoformat(timespec="seconds")
        return attacher.attach(held.digest, [evidence.vex_document(self.name, held.digest, doc, created)]).to_json()


# -- the whole recheck ------------------------------------------------------------------------------------


def run(registry: RegistryProtocol, repo: str, tag_policy: TagPolicy, vuln_policy: vulns.Policy,
        snapshots: Sequence[advisories.Snapshot], keys: Sequence[SSlibKey], now: dt.datetime,
        hold: HoldOptions | None = None) -> Recheck:
    """Judge every released digest of ``repo`` against ``snapshots``; with ``hold``, move floating tags off the
    vulnerable ones. A stale snapshot (``vuln_policy.stale: fail``) judges nothing and moves nothing."""
    stale = tuple(vulngate.stale(snapshots, vuln_policy, now))
    images = released(registry, repo)
    line_of = lines(tag_policy, images)
    report = Recheck(f"{registry.host}/{repo}", now, tuple(s.summary() for s in snapshots), vuln_policy.threshold, stale,
                     vuln_policy.stale == "fail", images, frozenset(t for i in images for t in i.tags if t in line_of))
    if stale and vuln_policy.stale == "fail":
        for image in images:
            image.problem = f"not judged: {stale[0]}"
        return report
    for image in images:
        judge(registry, repo, image, keys, lambda bom: vulngate.image(bom, snapshots, vuln_policy, now))
    mover = Mover(registry, repo, hold.key) if hold else None
    report.holds = holds(report, line_of, hold, mover or _no_move)
    return report


def _no_move(hold: Hold, held: Image, target: Image) -> None:
    raise AssertionError("nothing moves without --hold-floating")


def write(report: Recheck, out: Path) -> dict[str, Path]:
    """recheck.json, recheck.md and recheck.prom (Prometheus text format) in ``out``, each written atomically."""
    doc = report.to_json()
    paths = {"json": out / "recheck.json", "markdown": out / "recheck.md", "prometheus": out / "recheck.prom"}
    write_json(paths["json"], doc)
    write_text(paths["markdown"], recheck_report.to_markdown(doc))
    write_bytes(paths["prometheus"], recheck_report.to_prometheus(doc))
    return paths
