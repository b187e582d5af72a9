"""Known vulnerabilities: OSV advisories matched against packages, each ecosystem by its own rules.

Pure (no I/O): advisories (imagesmith.model.advisories) and packages in, findings out.

* PyPI: PEP 440 through ``packaging`` (names normalised per PEP 503; a local version such
  as ``2.5.1+cu124`` sorts after ``2.5.1`` and before ``2.5.2``, and matches ``2.5.1`` in an
  explicit ``versions`` list);
* Debian and Ubuntu: ``debian.debian_support.Version`` (dpkg's ordering: epochs, ``~``);
  advisories name source packages, so a binary package is matched by its source and
  source version (the ``upstream`` qualifier of the SBOM's package URL);
* SEMVER ranges through ``semver``.

OSV ranges are applied as the OSV schema describes (``introduced``, ``fixed``,
``last_affected``, ``limit``, and the explicit ``versions`` list); withdrawn advisories
are ignored. A range that names a package but cannot be judged for it (an event, or the
package's version, is not a version of its ecosystem) is an error naming the record: a
range dropped in silence could hide a critical finding. Severity is the highest of the record's CVSS vectors (scored by the ``cvss``
library) and its qualitative ``database_specific.severity``; a record with neither is
``unknown``, listed but never above a threshold.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import semver
from cvss import CVSS2, CVSS3, CVSS4
from cvss.exceptions import CVSSError
from debian.debian_support import Version as DebianVersion
from packageurl import PackageURL
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion
from packaging.version import Version as PypiVersion

from imagesmith.model.advisories import Advisory, Affected, Range, SnapshotError

SEVERITIES = ("unknown", "low", "medium", "high", "critical")
THRESHOLDS = ("critical", "high", "medium", "low")
LABELS = {"CRITICAL": "critical", "HIGH": "high", "MODERATE": "medium", "MEDIUM": "medium", "LOW": "low"}


def rank(severity: str) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else 0


# -- packages ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Package:
    """A package as advisories name it: ecosystem (PyPI, Debian:12, Ubuntu:22.04), name, version."""

    ecosystem: str
    name: str
    version: str
    ref: str = ""  # the SBOM component (bom-ref) or the matrix place it stands for


def package_from_purl(purl: str, ref: str = "") -> Package | None:
    """The Package a CycloneDX component's package URL stands for; None for kinds not matched
    (oci, generic, a deb without a distro qualifier)."""
    try:
        p = PackageURL.from_string(purl)
    except ValueError:
        return None
    if not p.version:
        return None
    if p.type == "pypi":
        return Package("PyPI", canonicalize_name(p.name), p.version, ref or purl)
    if p.type == "deb":
        return _deb_package(p, ref or purl)
    return None


def _deb_package(p: PackageURL, ref: str) -> Package | None:
    qualifiers = p.qualifiers if isinstance(p.qualifiers, dict) else {}
    distro = str(qualifiers.get("distro", ""))
    os_id, _, release = distro.partition("-")
    if os_id not in ("debian", "ubuntu") or not release:
        return None
    name, version = p.name, str(p.version)
    upstream = str(qualifiers.get("upstream", ""))
    if "@" in upstream:
        name, version = upstream.split("@", 1)
    ecosystem = f"Debian:{release.split('.')[0]}" if os_id == "debian" else f"Ubuntu:{release}"
    return Package(ecosystem, name, version, ref)


def packages_from_bom(bom: Mapping[str, Any]) -> list[Package]:
    """The matchable components of a CycloneDX JSON document (an SBOM imagesmith wrote)."""
    components = bom.get("components")
    out = []
    for c in components if isinstance(components, list) else []:
        if isinstance(c, Mapping) and isinstance(c.get("purl"), str):
            found = package_from_purl(c["purl"], str(c.get("bom-ref") or c["purl"]))
            if found is not None:
                out.append(found)
    return out


# -- versions per ecosystem ---------------------------------------------------------------------------


Key = Callable[[str], Any]  # a version's sort key in one ecosystem; ValueError when it is not one


def _pypi(v: str) -> PypiVersion:
    try:
        return PypiVersion(v)
    except InvalidVersion as exc:
        raise ValueError(str(exc)) from None


def _debian(v: str) -> DebianVersion:
    return DebianVersion(v)  # ValueError on a malformed version


def _semver(v: str) -> semver.Version:
    return semver.Version.parse(v[1:] if v.startswith("v") else v)


def ecosystem_family(ecosystem: str) -> str:
    return ecosystem.split(":", 1)[0]


def version_key(ecosystem: str, range_type: str = "ECOSYSTEM") -> Key | None:
    """How versions of ``ecosystem`` compare; None when imagesmith does not know its rules."""
    if range_type == "SEMVER":
        return _semver
    return {"PyPI": _pypi, "Debian": _debian, "Ubuntu": _debian}.get(ecosystem_family(ecosystem))


def same_ecosystem(advisory: str, package: str) -> bool:
    """``Ubuntu:22.04:LTS`` names the release ``Ubuntu:22.04``; ``Debian:12`` is bookworm; ``PyPI`` is PyPI."""
    if advisory == package:
        return True
    return ecosystem_family(package) == "Ubuntu" and advisory.startswith(package + ":")


def same_name(ecosystem: str, advisory: str, package: str) -> bool:
    if ecosystem_family(ecosystem) == "PyPI":
        return canonicalize_name(advisory) == package
    return advisory == package


# -- ranges ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    affected: bool
    fixed: str | None = None  # the version that fixes the interval the package is in


def in_range(version: str, r: Range, key: Key) -> Hit:
    """OSV's evaluation of one range: events in version order; ``introduced`` opens, ``fixed``
    closes (at the fix), ``last_affected`` closes (after it), ``limit`` bounds the range.
    Raises ValueError when an event or ``version`` is not a version of this ecosystem."""
    v = key(version)
    events = sorted(r.events, key=lambda e: (0,) if e.version == "0" else (1, key(e.version)))
    if any(e.kind == "limit" and v >= key(e.version) for e in events):
        return Hit(False)
    affected, fix = False, None
    for e in events:
        here = None if e.version == "0" else key(e.version)
        if e.kind == "introduced" and (here is None or v >= here):
            affected, fix = True, None
        elif e.kind == "fixed" and here is not None:
            if v >= here:
                affected = False
            elif affected and fix is None:
                fix = e.version
        elif e.kind == "last_affected" and here is not None and v > here:
            affected = False
    return Hit(affected, fix if affected else None)


def listed(version: str, versions: Sequence[str], key: Key | None, ecosystem: str) -> bool:
    """Is ``version`` in an explicit ``versions`` list (a PyPI local version matches its public one)?"""
    if version in versions:
        return True
    if key is None:
        return False
    try:
        want = key(version)
        if ecosystem_family(ecosystem) == "PyPI":
            want = PypiVersion(want.public)
        return any(_safe_equal(want, v, key) for v in versions)
    except ValueError:
        return False


def _safe_equal(want: Any, raw: str, key: Key) -> bool:
    try:
        return bool(key(raw) == want)
    except ValueError:
        return False


def affects(entry: Affected, package: Package) -> Hit | None:
    """Whether ``entry`` (one affected[] of an advisory) hits ``package``; None when it names another package."""
    if not same_ecosystem(entry.ecosystem, package.ecosystem) or not same_name(package.ecosystem, entry.name, package.name):
        return None
    key = version_key(package.ecosystem)
    if listed(package.version, entry.versions, key, package.ecosystem):
        return Hit(True, _first_fix(entry, package))
    for i, r in enumerate(entry.ranges):
        rkey = version_key(package.ecosystem, r.type)
        if rkey is None:
            continue
        try:
            hit = in_range(package.version, r, rkey)
        except (ValueError, TypeError):  # never guessed at: the range cannot be judged for this package
            raise Unjudged(i, _unparsed(r, rkey), package) from None
        if hit.affected:
            return hit
    return Hit(False)


class Unjudged(ValueError):
    """A range of an advisory that names a package but cannot be judged for it: an event (or the package's own
    version) is not a version in the range's ecosystem."""

    def __init__(self, index: int, why: str, package: Package) -> None:
        super().__init__(why)
        self.index, self.why, self.package = index, why, package


def _unparsed(r: Range, key: Key) -> str:
    """Which part of a range does not parse: its first event that is not a version, else the package's version."""
    for e in r.events:
        if e.version != "0" and not _parses(e.version, key):
            return f"its {e.kind} event {e.version[:80]!r} is not a {r.type} version of this ecosystem"
    return "the package's version is not one of this ecosystem"


def _parses(version: str, key: Key) -> bool:
    try:
        key(version)
    except (ValueError, TypeError):
        return False
    return True


def _first_fix(entry: Affected, package: Package) -> str | None:
    for r in entry.ranges:
        key = version_key(package.ecosystem, r.type)
        try:
            hit = in_range(package.version, r, key) if key else Hit(False)
        except (ValueError, TypeError):
            continue
        if hit.fixed:
            return hit.fixed
    return None


# -- severity ------------------------------------------------------------------------------------------


def vector_severity(vector: str) -> tuple[str, float] | None:
    """A CVSS vector's qualitative severity and base score (cvss library); None if it does not parse."""
    try:
        if vector.startswith("CVSS:4"):
            c4 = CVSS4(vector)
            return str(c4.severity).lower(), float(c4.base_score)
        if vector.startswith("CVSS:3"):
            c3 = CVSS3(vector)
            return str(c3.severities()[0]).lower(), float(c3.scores()[0])
        c2 = CVSS2(vector)
        return str(c2.severities()[0]).lower(), float(c2.scores()[0])
    except (CVSSError, ValueError, KeyError, IndexError):
        return None


def severity(advisory: Advisory) -> tuple[str, float | None]:
    """The highest of the record's CVSS ratings and its qualitative label; ("unknown", None) if none."""
    ratings = [r for r in (vector_severity(v) for v in advisory.cvss_vectors) if r is not None and r[0] in SEVERITIES]
    label = LABELS.get((advisory.severity_label or "").upper())
    best = max(ratings, key=lambda r: (rank(r[0]), r[1]), default=None)
    if best is None or (label and rank(label) > rank(best[0])):
        return (label, best[1] if best else None) if label else ("unknown", None)
    return best[0], best[1]


# -- findings --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    id: str
    aliases: tuple[str, ...]
    summary: str
    severity: str
    score: float | None
    ecosystem: str
    package: str
    version: str
    fixed: str | None
    refs: tuple[str, ...]  # the components (bom-refs) or matrix places it hits
    allowed: "Allowance | None" = None

    def names(self) -> tuple[str, ...]:
        return (self.id, *self.aliases)

    def label(self) -> str:
        fix = f"fixed in {self.fixed}" if self.fixed else "no fixed version"
        alias = f" ({', '.join(self.aliases[:2])})" if self.aliases else ""
        return f"{self.id}{alias} {self.severity}: {self.package} {self.version}, {fix}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "aliases": list(self.aliases), "summary": self.summary, "severity": self.severity,
               "score": self.score, "ecosystem": self.ecosystem, "package": self.package, "version": self.version,
               "fixed": self.fixed, "refs": list(self.refs)}
        if self.allowed:
            out["allowed"] = {"reason": self.allowed.reason, "expires": self.allowed.expires.isoformat()}
        return out


def match(advisories: Iterable[Advisory], packages: Sequence[Package]) -> list[Finding]:
    """Every (advisory, package) hit, one finding per advisory and package version (the binary
    packages of one Debian source are one finding with several refs); withdrawn ones skipped."""
    index: dict[tuple[str, str], list[Package]] = {}
    for p in packages:
        index.setdefault((ecosystem_family(p.ecosystem), p.name), []).append(p)
    found: dict[tuple[str, str, str, str], Finding] = {}
    for adv in advisories:
        if adv.withdrawn:
            continue
        for entry in adv.affected:
            name = canonicalize_name(entry.name) if ecosystem_family(entry.ecosystem) == "PyPI" else entry.name
            for p in index.get((ecosystem_family(entry.ecosystem), name), []):
                try:
                    hit = affects(entry, p)
                except Unjudged as exc:
                    j = adv.affected.index(entry)
                    raise SnapshotError(f"{adv.location + ': ' if adv.location else ''}{adv.origin}: {adv.id}: affected[{j}]"
                                        f".ranges[{exc.index}]: {exc.why}, so it cannot say whether {p.name} {p.version[:80]} "
                                        f"is affected; fix or drop this record (or mirror a fresh snapshot)") from None
                if hit and hit.affected:
                    _add(found, adv, p, hit)
    return sorted(found.values(), key=lambda f: (-rank(f.severity), f.package, f.id))


def _add(found: dict[tuple[str, str, str, str], Finding], adv: Advisory, p: Package, hit: Hit) -> None:
    key = (adv.id, p.ecosystem, p.name, p.version)
    if key in found:
        old = found[key]
        if p.ref not in old.refs:
            found[key] = dataclasses.replace(old, refs=(*old.refs, p.ref))
        return
    sev, score = severity(adv)
    found[key] = Finding(adv.id, adv.aliases, adv.summary, sev, score, p.ecosystem, p.name, p.version, hit.fixed, (p.ref,))


def counts(findings: Iterable[Finding]) -> dict[str, int]:
    out = dict.fromkeys(reversed(SEVERITIES), 0)
    for f in findings:
        out[f.severity] += 1
    return out


# -- the policy --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Allowance:
    id: str
    reason: str
    expires: dt.date


@dataclass(frozen=True)
class Policy:
    threshold: str = "critical"  # findings at or above it fail (validate: error; release: the target)
    allow: tuple[Allowance, ...] = ()
    max_age_days: int | None = None  # verify --reuse-evidence refuses a vulnerability result older than this

    def allowance(self, finding: Finding) -> Allowance | None:
        return next((a for a in self.allow if a.id in finding.names()), None)

    def blocks(self, finding: Finding) -> bool:
        return rank(finding.severity) >= rank(self.threshold) and finding.severity != "unknown"


@dataclass(frozen=True)
class Verdict:
    finding: Finding  # with its allowance attached, if one covers it
    failure: str | None = None  # why it blocks: at or above the threshold and not allowed, or allowed until a past date


def judge(findings: Iterable[Finding], policy: Policy, today: dt.date) -> list[Verdict]:
    """Each finding judged: one at or above the threshold blocks unless an allowance covers it
    and has not expired."""
    out = []
    for f in findings:
        allowed = policy.allowance(f)
        failure = None
        if allowed and allowed.expires < today and policy.blocks(f):
            failure = (f"{f.label()}: its allowance expired on {allowed.expires.isoformat()}; "
                       "upgrade the package, or renew the allowance with a reason (vulnerabilities.allow)")
            allowed = None
        elif not allowed and policy.blocks(f):
            failure = (f"{f.label()}: at or above the threshold {policy.threshold}; upgrade the package, or allow it "
                       "with a reason and an expiry date (vulnerabilities.allow)")
        out.append(Verdict(dataclasses.replace(f, allowed=allowed) if allowed else f, failure))
    return out


def expired(policy: Policy, today: dt.date) -> list[Allowance]:
    return [a for a in policy.allow if a.expires < today]
