"""One OCI image index per tag of a multi-platform release, never a partial one.

When a matrix builds one cell for several platforms (``matrix.platform``), the targets of each platform share
the plan's immutable tag (:meth:`imagesmith.model.plan.Plan.index_groups`). The release then pushes each
platform's image under its own tag (``<tag>-amd64``, ``<tag>-arm64``, as jupyter/docker-stacks publishes its
architectures) and writes the tag itself as an image index of those digests, pinned (the registry client
reads each entry's media type, size and platform from the registry, writes the index and reads it back).

The index is written only when every platform of the tag was released (pushed, or already there unchanged).
A platform that failed to build, to verify or to push keeps the index out: the previous index under that tag,
if any, stays as it was, and the release says why. An index tag is immutable like any other: one already
holding other digests is never overwritten.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence, TypeVar

from imagesmith.edges.protocols import RegistryProtocol
from imagesmith.edges.registry import INDEXES, Manifest, entries, manifest_document
from imagesmith.model.platform import platform_tag
from imagesmith.model.releasereport import DONE

T = TypeVar("T")


class Member(Protocol):
    """A target of the release as the index sees it (``publish.TargetRelease``)."""

    target: str
    platform: str
    status: str
    tag: str
    reference: str
    digest: str | None
    error: str | None
    index: str
    index_digest: str | None


M = TypeVar("M", bound=Member)


class Retry(Protocol):
    """The release's retry (``Publisher._retry``): ``action`` with backoff on transient errors."""

    def __call__(self, what: str, action: Callable[[], T]) -> T: ...


@dataclass
class IndexRelease:
    """What became of one multi-platform tag: its index ``pushed``, ``unchanged`` (already there with these
    digests), ``held`` (a platform was not released: not written, the previous index stays) or ``failed``."""

    tag: str
    reference: str
    action: str
    platforms: dict[str, dict[str, Any]]  # platform -> {"target", "status", "tag" (its own, <tag>-<arch>), "digest"}
    digest: str | None = None
    previous: str | None = None  # what the tag held before this release (None: nothing)
    reason: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    floating: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"tag": self.tag, "reference": self.reference, "action": self.action, "digest": self.digest,
                "platforms": self.platforms, "previous": self.previous, "reason": self.reason,
                "evidence": self.evidence or None, "floating": self.floating}


def groups(members: Iterable[M], group_of: Mapping[str, str]) -> dict[str, list[M]]:
    """The members that form one index, by group (the plan's immutable tag of a target: ``group_of``), for the
    groups whose targets are of more than one platform; members in platform order as given."""
    by_group: dict[str, list[M]] = {}
    for m in members:
        by_group.setdefault(group_of.get(m.target, m.target), []).append(m)
    return {g: ms for g, ms in by_group.items() if len({m.platform for m in ms}) > 1}


def name_members(members: Sequence[M], fail: Callable[[M, str], object]) -> str | None:
    """Give the members of one group their platform tags; the index's tag (None: no member is being released).
    The platforms must agree on the tag their measured versions render (one index holds one set of versions):
    when they do not, every member still queued fails, saying which tag each measured."""
    queued = [m for m in members if m.status == "queued"]
    rendered = {m.tag for m in queued}
    if len(rendered) > 1:
        said = ", ".join(f"{m.platform} {m.tag!r}" for m in queued)
        for m in queued:
            fail(m, f"the platforms of one image index measured different versions ({said}); one tag, one set of versions")
        return None
    if not queued:
        return None
    tag = rendered.pop()
    for m in members:
        m.index = tag
        if m.status == "queued":
            m.tag = platform_tag(tag, m.platform)
            m.reference = f"{m.reference.rpartition(':')[0]}:{m.tag}"
    return tag


def write(registry: RegistryProtocol, repo: str, name: str, tag: str, members: Sequence[Member],
          retry: Retry) -> IndexRelease:
    """The index of ``tag`` over ``members``' digests: written only when every member was released."""
    platforms = {m.platform: {"target": m.target, "status": m.status, "tag": m.tag, "digest": m.digest} for m in members}
    out = IndexRelease(tag, f"{name}:{tag}", "held", platforms)
    have = retry(f"reading {out.reference}", lambda: registry.manifest(repo, tag))
    out.previous = have.digest if have else None
    missing = [m for m in members if m.status not in DONE or not m.digest]
    if missing:
        out.reason = "not written: " + "; ".join(f"{m.platform} ({m.target}) {m.status}: {m.error or 'not released'}"
                                                 for m in missing)
        out.reason += (f"; {tag} keeps its previous index {have.digest[:19]}" if have else
                       "; no index is published for it until every platform is released")
        return out
    digests = [str(m.digest) for m in members]
    if have is not None:
        if held_digests(have) == sorted(digests):
            out.action, out.digest, out.reason = "unchanged", have.digest, "already holds these digests"
        else:
            out.action = "failed"
            out.reason = (f"{out.reference} already exists with other images ({have.digest[:19]}); immutable tags are never "
                          "overwritten: release with another --date, or delete that tag in the registry if it is wrong")
        return _pinned(out, members)
    out.digest = retry(f"writing the image index {out.reference}", lambda: registry.push_index(repo, tag, digests))
    out.action = "pushed"
    return _pinned(out, members)


def _pinned(out: IndexRelease, members: Sequence[Member]) -> IndexRelease:
    if out.action in DONE:
        for m in members:
            m.index_digest = out.digest
    return out


def held_digests(found: Manifest) -> list[str] | None:
    """The digests an image index lists, sorted (None: ``found`` is one image manifest, not an index)."""
    doc = manifest_document(found.raw or b"{}", "the index")
    if found.media_type not in INDEXES and "manifests" not in doc:
        return None
    return sorted(str(m.get("digest")) for m in entries(doc, "manifests"))
