"""Immutable and floating tags (pure).

Immutable tags are rendered from facts (measured versions at release time);
floating tags (``v2.9``, ``latest``) move, by semver, to the newest verified
image of their line and never backwards.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import semver
from packaging.version import InvalidVersion, Version

from imagesmith.errors import Problem, ValidationError
from imagesmith.model.platform import DEFAULT as DEFAULT_PLATFORM
from imagesmith.model.platform import Platform
from imagesmith.model.versions import major, matches, minor


@dataclass(frozen=True)
class FloatingTag:
    template: str
    when: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class TagPolicy:
    immutable: str = "{torch}-{accel}-py{python}-{os}-{layer}-{date}"
    floating: tuple[FloatingTag, ...] = ()
    prerelease: bool = False


DOCKER_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
# What a tag template may use: the keys of facts(), and the build date.
TAG_FIELDS = (
    "torch", "torch_minor", "torch_major", "cuda", "cudnn", "cudnn_major", "nccl",
    "python", "os", "layer", "date", "accel", "variant", "cell", "arch",
)


def facts(versions: Mapping[str, Any], layer: str, cell: str, accel: str,
          platform: Platform = DEFAULT_PLATFORM) -> dict[str, str]:
    """The fields a tag template may use, from a versions record and the image's platform (``arch``: ``amd64``,
    ``arm64``; a caller that names none means linux/amd64, as every image before platforms was)."""
    torch = str(versions["torch"]).split("+", 1)[0]
    cudnn = versions.get("cudnn") or ""
    return {
        "torch": torch, "torch_minor": minor(torch), "torch_major": major(torch),
        "cuda": str(versions["cuda"]), "cudnn": cudnn, "cudnn_major": major(cudnn) if cudnn else "",
        "nccl": versions.get("nccl") or "", "python": str(versions["python"]),
        "os": str(versions["os"]), "layer": layer, "accel": accel,
        "variant": str(versions.get("variant", "")), "cell": cell, "arch": platform.arch,
    }


def render(template: str, fields: Mapping[str, str]) -> str:
    """``"{torch}-{layer}"`` -> ``"2.9.1-cv"``; unknown fields raise KeyError."""
    return re.sub(r"{([^{}]*)}", lambda m: str(fields[m.group(1)]), template)


def tag_problems(tag: str) -> list[str]:
    if len(tag) > 128:
        return [f"tag {tag!r} is {len(tag)} characters; Docker allows 128"]
    if not DOCKER_TAG.match(tag):
        return [f"tag {tag!r} is not a valid Docker tag ([A-Za-z0-9_.-], not starting with . or -)"]
    return []


def to_semver(version: str) -> semver.Version:
    """PEP 440 as torch writes it (parsed by ``packaging``) -> semver.

    ``2.10.0rc1`` -> ``2.10.0-rc.1``; ``2.12.0.dev20260101`` -> ``2.12.0-dev.20260101``;
    ``2.9`` -> ``2.9.0``. What semver cannot order goes into build metadata, which
    semver ignores when comparing: the local version (``2.9.1+cu128`` -> ``2.9.1+cu128``)
    and a post release (``2.9.1.post1`` -> ``2.9.1+post.1``). A release of more than
    three numbers, or with an epoch, is not a semver version."""
    try:
        v = Version(version)
    except InvalidVersion:
        raise ValueError(f"not a release version: {version!r}") from None
    if len(v.release) > 3 or v.epoch:
        raise ValueError(f"not a release version: {version!r} (semver has three numbers and no epoch)")
    x, y, z = (*v.release, 0, 0)[:3]
    pre = [*(f"{v.pre[0]}.{v.pre[1]}".split(".") if v.pre else ()), *(("dev", str(v.dev)) if v.dev is not None else ())]
    build = [*(("post", str(v.post)) if v.post is not None else ()), *((v.local,) if v.local else ())]
    return semver.Version(x, y, z, prerelease=".".join(pre) or None, build=".".join(build) or None)


def matches_when(when: Iterable[tuple[str, str]], fields: Mapping[str, str]) -> bool:
    return all(matches(v, fields.get(k, "")) if k == "torch" else fields.get(k) == v for k, v in when)


@dataclass(frozen=True)
class Candidate:
    """An image a floating tag may point at."""

    ref: str  # target id, or a registry reference for images already pushed
    fields: Mapping[str, str]
    verified: bool = True

    @property
    def version(self) -> semver.Version:
        return to_semver(self.fields["torch"])


def _eligible(c: Candidate, policy: "TagPolicy") -> bool:
    return c.verified and (policy.prerelease or c.version.prerelease is None)


def assign(policy: "TagPolicy", candidates: Sequence[Candidate]) -> dict[str, Candidate]:
    """For each floating tag, the newest eligible candidate (ties: first given).

    Pass images already in the registry as candidates too: then a tag never
    moves to an older version than the one it has."""
    best: dict[str, Candidate] = {}
    for ft in policy.floating:
        for c in candidates:
            if not _eligible(c, policy) or not matches_when(ft.when, c.fields):
                continue
            tag = render(ft.template, c.fields)
            if tag not in best or c.version > best[tag].version:
                best[tag] = c
    return best


def ambiguities(ft: "FloatingTag", items: Sequence[tuple[str, Mapping[str, str]]]) -> list[str]:
    """Floating tags that several targets of the same torch version and platform would claim (one target per
    platform is an image index, as for immutable tags)."""
    claims: dict[tuple[str, str, str], list[str]] = {}
    for ref, fields in items:
        if matches_when(ft.when, fields):
            claims.setdefault((render(ft.template, fields), fields["torch"], fields.get("arch", "")), []).append(ref)
    return [f"floating tag {tag!r} would point at {len(refs)} images of torch {torch} ({', '.join(refs[:3])}{', ...' if len(refs) > 3 else ''}); "
            f"add fields to the tag or narrow it with when: (e.g. when: {{cuda: ..., python: ..., os: ...}})"
            for (tag, torch, _), refs in sorted(claims.items()) if len(refs) > 1]


def plan_floating(policy: "TagPolicy", items: Sequence[tuple[str, Mapping[str, str]]]) -> dict[str, tuple[str, ...]]:
    """Target id -> the floating tags it would get if every target verified."""
    problems = [p for ft in policy.floating for p in ambiguities(ft, items)]
    if problems:
        raise ValidationError(problems=[Problem(p, path="tags.floating") for p in problems])
    won = [(tag, cand.ref) for arch in dict.fromkeys(f.get("arch", "") for _, f in items)
           for tag, cand in assign(policy, [Candidate(ref, f) for ref, f in items if f.get("arch", "") == arch]).items()]
    out: dict[str, list[str]] = {}
    for tag, ref in sorted(won):
        out.setdefault(ref, []).append(tag)
    return {ref: tuple(ts) for ref, ts in out.items()}
