"""Known vulnerabilities as a gate: early (``matrix validate``: the pins of the plan) and at
release (every image's SBOM). The snapshots named in ``sources.advisories`` are read here;
matching and judging are imagesmith.model.vulns (pure).
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
    out = []
    for location in m.sources.advisories:
        if location.startswith(("http://", "https://")):
            out.append(advisories.from_zip_bytes(fetch(location, limits.zip_bytes), location, limits))
        else:
            out.append(advisories.load(location, limits))
    return out


def all_advisories(snapshots: Sequence[advisories.Snapshot]) -> list[advisories.Advisory]:
    return [a for s in snapshots for a in s.advisories]


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


def early(m: Matrix, p: Plan, today: dt.date, snapshots: Sequence[advisories.Snapshot]) -> Early:
    """``matrix validate``'s look: the advisories that hit the plan's pins, each located in the
    matrix (torch: matrix.torch; others: the layer's packages); at or above the threshold and not
    allowed: an error; an expired allowance: an error."""
    layer_of = {t.id: t.layer for t in p.targets}
    packages = [pkg for t in p.targets for pkg in target_packages(m, t)]
    verdicts = vulns.judge(vulns.match(all_advisories(snapshots), packages), m.vulnerabilities, today)
    errors, warnings = [], []
    for v in verdicts:
        f, targets = v.finding, f" (targets: {', '.join(v.finding.refs)})"
        where = _where(m, f, layer_of)
        if v.failure:
            errors.append(m.problem(where, v.failure + targets))
        else:
            note = f"; allowed until {f.allowed.expires.isoformat()}: {f.allowed.reason}" if f.allowed else ""
            warnings.append(_warning(m.problem(where, f.label() + targets + note)))
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
    findings: tuple[vulns.Finding, ...]
    failures: tuple[str, ...]  # why the target may not be released (empty: it may)
    snapshots: tuple[Mapping[str, Any], ...]
    matched_at: dt.datetime
    threshold: str

    def counts(self) -> dict[str, int]:
        return vulns.counts(self.findings)

    def predicate(self) -> dict[str, Any]:
        """The small, additive field of the verification predicate: which snapshots were matched
        and what was found, by severity."""
        return {"snapshots": [dict(s) for s in self.snapshots], "matched_at": self.matched_at.isoformat(timespec="seconds"),
                "threshold": self.threshold, "counts": self.counts(), "blocking": len(self.failures)}

    def reason(self) -> str | None:
        """Why the target is not released, in one line (None: it may be)."""
        if not self.failures:
            return None
        more = f" (and {len(self.failures) - 1} more)" if len(self.failures) > 1 else ""
        return f"known vulnerabilities at or above {self.threshold}: {self.failures[0]}{more}"


def image(bom: Mapping[str, Any], snapshots: Sequence[advisories.Snapshot], policy: vulns.Policy, now: dt.datetime) -> ImageResult:
    """The SBOM's components matched, judged by the matrix's policy."""
    verdicts = vulns.judge(vulns.match(all_advisories(snapshots), vulns.packages_from_bom(bom)), policy, now.date())
    return ImageResult(tuple(v.finding for v in verdicts), tuple(v.failure for v in verdicts if v.failure),
                       tuple(s.summary() for s in snapshots), now, policy.threshold)


class Gate:
    """The release gate of one run: the snapshots read once, every image's SBOM matched against them."""

    def __init__(self, snapshots: Sequence[advisories.Snapshot], policy: vulns.Policy,
                 clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc)) -> None:
        self.snapshots, self.policy, self.clock = tuple(snapshots), policy, clock

    def __call__(self, bom: Mapping[str, Any]) -> ImageResult:
        return image(bom, self.snapshots, self.policy, self.clock())

    @classmethod
    def of(cls, m: Matrix) -> "Gate | None":
        """The gate a matrix asks for (None: it names no advisory source)."""
        return cls(load_snapshots(m), m.vulnerabilities) if m.sources.advisories else None
