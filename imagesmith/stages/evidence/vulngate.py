"""Known vulnerabilities as a gate: early (``matrix validate``: the pins of the plan), at
release (every image's SBOM) and after it (``vulns recheck``). The snapshots named in
``sources.advisories`` are read here, and judged by their age (``vulnerabilities.max_age``: a
snapshot whose newest record is older is stale, and fails the gate unless ``vulnerabilities.stale:
warn``); matching and judging are imagesmith.model.vulns (pure).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from imagesmith.errors import Problem
from imagesmith.model import advisories, vulns
from imagesmith.model.matrix import Matrix
from imagesmith.model.plan import Plan, Target

PREDICATE_KEY = "vulnerabilities"  # the field of the verification predicate that names the snapshots and counts

Fetch = Callable[[str, int], bytes]


def _http_fetch(url: str, limit: int) -> bytes:
    from imagesmith.edges.registry import fetch_limited

    return fetch_limited(url, limit)


def load_snapshots(m: Matrix, fetch: Fetch = _http_fetch, limits: advisories.Limits = advisories.DEFAULT_LIMITS) -> list[advisories.Snapshot]:
    """Every snapshot of ``sources.advisories``: a URL is downloaded (bounded) and read as a zip."""
    return load_locations(m.sources.advisories, fetch, limits)


def load_locations(locations: Sequence[str], fetch: Fetch = _http_fetch,
                   limits: advisories.Limits = advisories.DEFAULT_LIMITS) -> list[advisories.Snapshot]:
    """Snapshots at ``locations`` (a zip, a folder of OSV records, or an http(s) URL of a zip)."""
    out = []
    for location in locations:
        if location.startswith(("http://", "https://")):
            out.append(advisories.from_zip_bytes(fetch(location, limits.zip_bytes), location, limits))
        else:
            out.append(advisories.load(location, limits))
    return out


def all_advisories(snapshots: Sequence[advisories.Snapshot]) -> list[advisories.Advisory]:
    return [a for s in snapshots for a in s.advisories]


# -- how old the data is ---------------------------------------------------------------------------


def stale(snapshots: Sequence[advisories.Snapshot], policy: vulns.Policy, now: dt.datetime) -> list[str]:
    """Why each snapshot is too old to trust at ``now`` (its newest record older than ``policy.max_age``); a record
    modified in the future is a SnapshotError (:meth:`advisories.Snapshot.age`)."""
    out = []
    for s in snapshots:
        age = s.age(now)
        if vulns.stale(age, policy):
            out.append(f"the advisory snapshot {s.location} is {duration(age)} old (its newest record was modified at "
                       f"{s.date}), older than vulnerabilities.max_age ({duration(dt.timedelta(seconds=policy.max_age))}): "
                       f"advisories published since are not in it; mirror a fresh one (OSV's <ecosystem>/all.zip)"
                       + (", or set vulnerabilities.stale: warn to release on it anyway" if policy.stale == "fail"
                          else " (vulnerabilities.stale: warn: judged on it anyway)"))
    return out


def duration(age: dt.timedelta) -> str:
    """``5d``, ``36h``, ``90m``: how scanners write an age (grype: max-allowed-built-age: 120h)."""
    seconds = int(age.total_seconds())
    if seconds >= 2 * 86400 or (seconds >= 86400 and seconds % 86400 == 0):
        return f"{seconds // 86400}d"
    return f"{seconds // 3600}h" if seconds >= 3600 else f"{seconds // 60}m"


# -- early: the plan's pins ------------------------------------------------------------------------


def target_packages(m: Matrix, t: Target) -> list[vulns.Package]:
    """What a target pins on PyPI: torch (base), its layer's pinned packages (torchvision and
    torchaudio pinned from the knowledge base) and its requirements file's pins."""
    specs = list(t.packages) + list(m.layer(t.layer).requirements_pins)
    if t.layer == "base":
        specs.append(f"torch=={t.versions.torch}")
    out = []
    for spec in specs:
        pin = _pin(spec)
        if pin:
            out.append(vulns.Package("PyPI", pin[0], pin[1], t.id))
    return out


def _pin(spec: str) -> tuple[str, str] | None:
    try:
        req = Requirement(spec)
    except InvalidRequirement:
        return None
    exact = [s.version for s in req.specifier if s.operator in ("==", "===") and "*" not in s.version]
    return (canonicalize_name(req.name), exact[0]) if exact else None


@dataclass(frozen=True)
class Early:
    snapshots: tuple[advisories.Snapshot, ...]
    findings: tuple[vulns.Finding, ...]
    errors: tuple[Problem, ...]
    warnings: tuple[Problem, ...]


def early(m: Matrix, p: Plan, today: dt.date, snapshots: Sequence[advisories.Snapshot], now: dt.datetime | None = None) -> Early:
    """``matrix validate``'s look: the advisories that hit the plan's pins, each located in the
    matrix (torch: matrix.torch; others: the layer's packages); at or above the threshold and not
    allowed: an error; an expired allowance: an error; a stale snapshot (at ``now``, default the end of
    ``today``): an error, or a warning where the matrix says ``stale: warn``."""
    layer_of = {t.id: t.layer for t in p.targets}
    packages = [pkg for t in p.targets for pkg in target_packages(m, t)]
    verdicts = vulns.judge(vulns.match(all_advisories(snapshots), packages), m.vulnerabilities, today)
    errors, warnings = [], []
    moment = now or dt.datetime.combine(today, dt.time.max, dt.timezone.utc)
    for why in stale(snapshots, m.vulnerabilities, moment):
        problem = m.problem(("sources", "advisories"), why)
        if m.vulnerabilities.stale == "fail":
            errors.append(problem)
        else:
            warnings.append(_warning(problem))
    for v in verdicts:
        f, targets = v.finding, f" (targets: {', '.join(v.finding.refs)})"
        where = _where(m, f, layer_of)
        if v.failure:
            errors.append(m.problem(where, v.failure + targets))
        else:
            note = f"; allowed until {f.allowed.expires.isoformat()}: {f.allowed.reason}" if f.allowed else ""
            warnings.append(_warning(m.problem(where, f.label() + targets + note)))
        warnings += [_warning(m.problem(("vulnerabilities", "allow"), n + targets)) for n in v.notes]
    for a in vulns.expired(m.vulnerabilities, today):
        errors.append(m.problem(("vulnerabilities", "allow"), f"the allowance of {a.id} expired on {a.expires.isoformat()}; "
                                "renew it (a new expires, the reason still true) or remove it"))
    return Early(tuple(snapshots), tuple(v.finding for v in verdicts), tuple(dict.fromkeys(errors)), tuple(warnings))


def _where(m: Matrix, f: vulns.Finding, layer_of: Mapping[str, str]) -> tuple[str, ...]:
    layer = layer_of.get(f.refs[0], "base")
    if f.package == "torch" and layer == "base":
        return ("matrix", "torch")
    return ("layers", layer, "requirements" if m.layer(layer).requirements_pins and not _in_packages(m, layer, f.package) else "packages")


def _in_packages(m: Matrix, layer: str, package: str) -> bool:
    return any((_pin(s) or ("", ""))[0] == package or canonicalize_name(s.strip()) == package for s in m.layer(layer).packages)


def _warning(p: Problem) -> Problem:
    return Problem(p.message, p.file, p.line, p.path, "warning")


# -- release: an image's SBOM ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageResult:
    findings: tuple[vulns.Finding, ...]  # one per vulnerability (a group of records)
    failures: tuple[str, ...]  # the findings that keep the target back (empty: none does)
    snapshots: tuple[Mapping[str, Any], ...]
    matched_at: dt.datetime
    threshold: str
    notes: tuple[str, ...] = ()  # expired allowances another one outlives
    stale: tuple[str, ...] = ()  # snapshots older than vulnerabilities.max_age
    stale_fails: bool = True  # vulnerabilities.stale: fail (a stale snapshot keeps the target back) or warn

    def counts(self) -> dict[str, int]:
        return vulns.counts(self.findings)

    def predicate(self) -> dict[str, Any]:
        """The small, additive field of the verification predicate: which snapshots were matched
        and what was found, by severity."""
        return {"snapshots": [dict(s) for s in self.snapshots], "matched_at": self.matched_at.isoformat(timespec="seconds"),
                "threshold": self.threshold, "counts": self.counts(), "blocking": len(self.failures)}

    def blocked(self) -> bool:
        return bool(self.failures) or (bool(self.stale) and self.stale_fails)

    def to_json(self) -> dict[str, Any]:
        """What release.json and recheck.json record: the predicate's field, every finding, notes, stale snapshots."""
        return self.predicate() | {"findings": [f.to_json() for f in self.findings], "notes": list(self.notes),
                                   "stale": list(self.stale)}

    def reason(self) -> str | None:
        """Why the target is not released, in one line (None: it may be)."""
        if self.stale and self.stale_fails:
            return f"known vulnerabilities not judged: {self.stale[0]}"
        if not self.failures:
            return None
        more = f" (and {len(self.failures) - 1} more)" if len(self.failures) > 1 else ""
        return f"known vulnerabilities at or above {self.threshold}: {self.failures[0]}{more}"


def merged(results: Sequence[ImageResult]) -> ImageResult:
    """The results of an image index's platforms as one: every finding once (per package version), every failure."""
    first = results[0]
    findings = {(f.id, f.ecosystem, f.package, f.version): f for r in results for f in r.findings}
    return ImageResult(tuple(findings.values()), tuple(dict.fromkeys(x for r in results for x in r.failures)), first.snapshots,
                       first.matched_at, first.threshold, tuple(dict.fromkeys(n for r in results for n in r.notes)), first.stale,
                       first.stale_fails)


def image(bom: Mapping[str, Any], snapshots: Sequence[advisories.Snapshot], policy: vulns.Policy, now: dt.datetime) -> ImageResult:
    """The SBOM's components matched, judged by the matrix's policy, and the snapshots by their age at ``now``."""
    verdicts = vulns.judge(vulns.match(all_advisories(snapshots), vulns.packages_from_bom(bom)), policy, now.date())
    return ImageResult(tuple(v.finding for v in verdicts), tuple(v.failure for v in verdicts if v.failure),
                       tuple(s.summary() for s in snapshots), now, policy.threshold,
                       tuple(n for v in verdicts for n in v.notes), tuple(stale(snapshots, policy, now)), policy.stale == "fail")


class Gate:
    """The release gate of one run: the snapshots read once, every image's SBOM matched against them."""

    def __init__(self, snapshots: Sequence[advisories.Snapshot], policy: vulns.Policy,
                 clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc)) -> None:
        self.snapshots, self.policy, self.clock = tuple(snapshots), policy, clock

    def __call__(self, bom: Mapping[str, Any]) -> ImageResult:
        return image(bom, self.snapshots, self.policy, self.clock())

    def stale(self) -> list[str]:
        """The snapshots too old to trust now (a record from the future: a SnapshotError, before anything is pushed)."""
        return stale(self.snapshots, self.policy, self.clock())

    @classmethod
    def of(cls, m: Matrix) -> "Gate | None":
        """The gate a matrix asks for (None: it names no advisory source)."""
        return cls(load_snapshots(m), m.vulnerabilities) if m.sources.advisories else None
