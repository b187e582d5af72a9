"""The pure part of a release: which immutable tag each verified item gets (rendered from the versions measured in
the image), which targets may take floating tags (the release policy, the fleet gate), one image index per plan tag
built on several platforms, and which images the registry holds as candidates for floating tags. No engine, no
registry: :class:`imagesmith.stages.release.publish.Publisher` pushes what this plans."""

from __future__ import annotations

from typing import Callable, Mapping

from imagesmith.errors import UserError
from imagesmith.model import platform as platforms
from imagesmith.model import policy, tags
from imagesmith.model.tags import TagPolicy
from imagesmith.stages.release import indexes
from imagesmith.stages.release.releases import Item, RemoteImage, TargetRelease, measured_versions, tag_fields

Fail = Callable[[TargetRelease, str, str], TargetRelease]  # marks a target (status, why) and shows it


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


class TagPlanner:
    def __init__(self, name: str, policy: TagPolicy, date: str, fail: Fail, allow_cpu_verification: bool = False,
                 vulnerability_gate: Callable[[TargetRelease], str | None] | None = None,
                 floating_gate: Callable[[str | None], str | None] | None = None) -> None:
        self.name, self.policy, self.date, self.fail = name, policy, date, fail
        self.allow_cpu = allow_cpu_verification
        self.vulnerability_gate = vulnerability_gate  # a target -> why its known vulnerabilities keep it back (None: release)
        self.floating_gate = floating_gate  # digest -> why its floating tags are held back (None: they may move)

    def prepare(self, item: Item) -> TargetRelease:
        r = TargetRelease(item.target, item.image_id, "queued", verification=dict(item.verification),
                          versions=measured_versions(item.facts or {}), source=item.source, platform=item.platform.value)
        if not item.built or not item.image_id:
            return self.fail(r, "not-built", f"not built: {item.error or 'no image'}")
        if not item.verified:
            return self.fail(r, "not-verified", "verification failed; not tagged, not pushed" + (f" ({item.error})" if item.error else ""))
        refused = platform_refusal(item)
        if refused:
            return self.fail(r, "not-verified", refused)
        grant = self.grant(item, r)
        if not grant.release:
            return self.fail(r, "not-gpu-verified", grant.note)
        try:
            blocked = self.vulnerability_gate(r) if self.vulnerability_gate else None
        except UserError as exc:  # the image's inventory could not be measured: not released blind
            return self.fail(r, "failed", f"not released: its known vulnerabilities could not be matched ({exc})")
        if blocked:
            return self.fail(r, "vulnerable", f"not released: {blocked}")
        try:
            r.fields = tag_fields(item.facts or {}, item.layer, item.cell, self.date)
            r.tag = tags.render(self.policy.immutable, r.fields) + grant.suffix
        except (ValueError, KeyError) as exc:
            return self.fail(r, "failed", f"no immutable tag from the measured versions: {exc}")
        problems = tags.tag_problems(r.tag)
        if problems:
            return self.fail(r, "failed", "; ".join(problems) + " (tags.immutable in the matrix)")
        r.reference = f"{self.name}:{r.tag}"
        return r

    def grant(self, item: Item, r: TargetRelease) -> policy.Grant:
        """The release policy for this target: a CUDA image needs GPU verification for floating tags."""
        cuda_image = r.versions.get("cuda", "cpu") != "cpu"
        ev = item.evidence or policy.Evidence(item.verified, "cpu", 0, "no verify report says how it ran", None, {})
        grant = policy.grant(cuda_image, ev, self.allow_cpu)
        r.gpu_verified = ev.gpu_verified if cuda_image else None
        r.note, r.may_float = grant.note, grant.floating
        return grant

    def name_indexes(self, releases: list[TargetRelease], group_of: Mapping[str, str]) -> dict[str, list[TargetRelease]]:
        """The targets of one plan tag on several platforms become one image index (:mod:`imagesmith.stages.release.indexes`):
        each platform's image gets its own tag, and only the first platform's target carries the index's floating
        tags (when every platform may float). The indexes by tag."""
        found: dict[str, list[TargetRelease]] = {}
        for members in indexes.groups(releases, group_of).values():
            tag = indexes.name_members(members, lambda m, why: self.fail(m, "failed", why))
            if tag is None:
                continue
            found[tag] = members
            for m in (m for m in members if m.status == "queued" and tags.tag_problems(m.tag)):  # "-arm64" made it too long
                self.fail(m, "failed", "; ".join(tags.tag_problems(m.tag)) + " (tags.immutable in the matrix, with the "
                          "platform's suffix)")
            first, rest = members[0], members[1:]
            first.may_float = all(m.may_float for m in members)
            for m in rest:
                m.may_float = False
        return found

    def check_unique(self, releases: list[TargetRelease]) -> None:
        """One target per immutable tag: a second is failed before anything is pushed (it would replace the first)."""
        seen: dict[str, str] = {}
        for r in releases:
            if r.status == "queued" and r.tag in seen:
                self.fail(r, "failed", f"immutable tag {r.tag!r} is also {seen[r.tag]}'s; add fields to tags.immutable")
            seen.setdefault(r.tag, r.target)

    def held_back(self, done: Mapping[str, TargetRelease], indexes_of: Mapping[str, list[TargetRelease]]) -> dict[str, str]:
        """The fleet gate (:mod:`imagesmith.stages.fleet.gate`): floating tags only for digests every required GPU class
        passed; the targets held back, with why."""
        gate = self.floating_gate
        if gate is None:
            return {}
        reasons = {t: next(filter(None, (gate(m.digest) for m in indexes_of.get(r.index, [r]))), None) for t, r in done.items()}
        return {t: why for t, why in reasons.items() if why}

    def remote_candidates(self, remote: Mapping[str, RemoteImage]) -> list[tags.Candidate]:
        """Images in the registry, immutable tags before floating ones (so a
        reason names ``2.9.1-...-20261115`` rather than ``latest``)."""
        cands = [tags.Candidate(t, img.fields, verified=not policy.marked_unverified(t))
                 for t, img in sorted(remote.items()) if img.fields]
        floating = set(tags.assign(self.policy, cands))
        return sorted(cands, key=lambda c: c.ref in floating)
