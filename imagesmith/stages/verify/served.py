"""Which image a verify report names: the repository digests its registry serves, read back; the platform's
entry of an image index; a reference pinned by digest."""

from __future__ import annotations

from typing import Any

from imagesmith.edges.protocols import RegistryProtocol
from imagesmith.model.buildreport import DIGEST
from imagesmith.model.engines import EngineKind
from imagesmith.model.ref import ImageRef


def served_digests(registry: RegistryProtocol | None, parsed: ImageRef, info: Any, kind: EngineKind) -> tuple[list[str], str]:
    """The repository digests a report names for the image verified: only ones its registry serves, read back
    (``host/repository@sha256:...``), and a note when the engine's own bookkeeping said otherwise.

    With a client for ``parsed``'s registry: the digest the registry serves for its tag when its config is the
    image verified (its ID), else the engine's digests of that repository the registry serves (an image index the
    engine pulled through the tag). Without one (Docker Hub; a local build): Docker's ``RepoDigests``, which Docker
    records only from a push or pull; none of Podman's, which it also makes up for images no registry has seen (a
    ``podman load``, a build)."""
    held = [d for d in info.repo_digests if (p := ImageRef.maybe(d)) is not None and p.pinned]
    if registry is None:
        if kind.podman and held:
            return [], (f"{kind.name} lists {len(held)} repository digest{'s' if len(held) > 1 else ''} for this image, none read "
                        "back from a registry (Podman makes its own for images no registry has seen): no digest recorded")
        return held, ""
    if parsed.pinned:
        return [str(parsed)], ""
    back = registry.manifest(parsed.repository, parsed.tag or "latest")
    if back is not None and back.config_digest == info.id:
        return [f"{parsed.name}@{back.digest}"], ""
    mine = [d for d in held if (p := ImageRef.maybe(d)) is not None and p.name == parsed.name]
    kept = [d for d in mine if registry.manifest(parsed.repository, str(ImageRef.parse(d).digest)) is not None]
    if kept or (back is None and not mine):
        return kept, ""
    served = f"serves {back.digest} (image {back.config_digest})" if back is not None else "serves nothing"
    return kept, (f"{parsed.name} {served} for {parsed.tag or 'latest'}, not this image ({info.id}); the engine's "
                  f"digests {', '.join(mine) or '(none)'} are not recorded")


def index_pick(registry: RegistryProtocol, parsed: ImageRef, info: Any) -> dict[str, str] | None:
    """``parsed`` (a tag) pulled through an image index: the index's digest (the engine's repo digest for its
    repository) and the digest of the entry for the image's own platform, read from the registry by the index's
    digest, which no later push can change (and the client checks that the bytes hash to it). None when ``ref``
    names a plain image manifest, or the index's entry names no sha256 digest."""
    from imagesmith.edges.registry import entries, manifest_document

    for held in info.repo_digests:
        pin = ImageRef.maybe(held)
        if pin is None or pin.name != parsed.name or not pin.pinned:
            continue
        digest, repo = str(pin.digest), parsed.repository
        found = registry.manifest(repo, digest)
        doc = manifest_document(found.raw, f"{parsed.host}/{repo}@{digest}") if found is not None else {}
        for entry in entries(doc, "manifests"):
            raw = entry.get("platform")
            plat: dict[str, Any] = raw if isinstance(raw, dict) else {}
            if "/".join(str(plat.get(k)) for k in ("os", "architecture", "variant") if plat.get(k)) == info.platform:
                entry_digest = str(entry.get("digest"))
                return {"index": digest, "digest": entry_digest, "platform": info.platform} if DIGEST.fullmatch(entry_digest) else None
    return None


def pinned(parsed: ImageRef) -> dict[str, str]:
    """``host/repo@sha256:…``: the digest verified, recorded as such (the engine resolved exactly that manifest)."""
    return {"digest": str(parsed.digest), "repository": parsed.name} if parsed.pinned else {}
