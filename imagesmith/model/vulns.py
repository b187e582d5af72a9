"""Known vulnerabilities: OSV advisories matched against packages, each ecosystem by its own rules.

Pure (no I/O): advisories (imagesmith.model.advisories) and packages in, findings out.

* PyPI: PEP 440 through ``packaging`` (names normalised per PEP 503). A range compares public versions:
  PEP 440 ignores a local label (``+cpu``, ``+cu128``) when it matches a version against a specifier, so
  ``2.13.0+cpu`` is in ``<=2.13.0`` (``last_affected: 2.13.0``), outside ``<2.13.0`` (``limit``, ``fixed``)
  and matches ``2.13.0`` in an explicit ``versions`` list; pre-releases sort before their release, as OSV's
  ordering says (``2.6.0rc1 < 2.6.0``);
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

One vulnerability is one finding, as osv-scanner counts (internal/grouper): the records that hit one package
version are grouped when they share an identifier (id, aliases, upstream; DSA/DLA/USN also their related),
transitively; the group's severity is its most severe record's, which an alias without a severity of its own
takes too; the finding lists every record. Counts, the gate and the reports count findings.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import operator
import re
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
    """A PyPI version as ranges compare it: its public part (PEP 440 ignores the local label against a specifier)."""
    try:
        return PypiVersion(PypiVersion(v).public)
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
        want = key(version)  # a PyPI key is the public version: 2.5.1+cu124 matches 2.5.1
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
class Record:
    """One advisory record of a finding, with its own rating and fix (an alias without a rating shows ``unknown``
    here, while the finding carries the group's)."""

    id: str
    severity: str
    score: float | None
    fixed: str | None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "severity": self.severity, "score": self.score, "fixed": self.fixed}


@dataclass(frozen=True)
class Finding:
    """One vulnerability of one package version: the group of records that name it (:func:`match`)."""

    id: str  # the group's most severe record
    aliases: tuple[str, ...]  # every other identifier of the group: CVEs first, then the other records' ids, then the rest
    summary: str
    severity: str  # the most severe record's: the group's
    score: float | None
    ecosystem: str
    package: str
    version: str
    fixed: str | None  # the highest fix among the records: the version that clears every one of them
    refs: tuple[str, ...]  # the components (bom-refs) or matrix places it hits
    allowed: "Allowance | None" = None
    records: tuple[Record, ...] = ()  # every record of the group, the finding's own id first

    def names(self) -> tuple[str, ...]:
        return (self.id, *self.aliases)

    def record_ids(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.records) or (self.id,)

    def label(self) -> str:
        fix = f"fixed in {self.fixed}" if self.fixed else "no fixed version"
        alias = f" ({', '.join(self.aliases[:2])})" if self.aliases else ""
        return f"{self.id}{alias} {self.severity}: {self.package} {self.version}, {fix}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "aliases": list(self.aliases), "summary": self.summary, "severity": self.severity,
               "score": self.score, "ecosystem": self.ecosystem, "package": self.package, "version": self.version,
               "fixed": self.fixed, "refs": list(self.refs), "records": [r.to_json() for r in self.records]}
        if self.allowed:
            out["allowed"] = self.allowed.to_json()
        return out


Hits = dict[str, tuple[Advisory, Hit, list[str]]]  # record id -> the record, its hit, the refs it hits


def match(advisories: Iterable[Advisory], packages: Sequence[Package]) -> list[Finding]:
    """Every vulnerability of every package version, one finding each: the records that hit one package version
    (the binary packages of one Debian source are one package version with several refs), grouped by the
    identifiers they share (:func:`group`); withdrawn records skipped."""
    index: dict[tuple[str, str], list[Package]] = {}
    for p in packages:
        index.setdefault((ecosystem_family(p.ecosystem), p.name), []).append(p)
    hits: dict[tuple[str, str, str], Hits] = {}
    for adv in advisories:
        if adv.withdrawn:
            continue
        for j, entry in enumerate(adv.affected):
            name = canonicalize_name(entry.name) if ecosystem_family(entry.ecosystem) == "PyPI" else entry.name
            for p in index.get((ecosystem_family(entry.ecosystem), name), []):
                hit = _judged(adv, j, entry, p)
                if hit and hit.affected:
                    _add(hits.setdefault((p.ecosystem, p.name, p.version), {}), adv, p, hit)
    found = [f for (eco, name, version), records in hits.items() for f in group(eco, name, version, records)]
    return sorted(found, key=lambda f: (-rank(f.severity), f.package, f.id))


def _judged(adv: Advisory, j: int, entry: Affected, p: Package) -> Hit | None:
    try:
        return affects(entry, p)
    except Unjudged as exc:
        raise SnapshotError(f"{adv.location + ': ' if adv.location else ''}{adv.origin}: {adv.id}: affected[{j}]"
                            f".ranges[{exc.index}]: {exc.why}, so it cannot say whether {p.name} {p.version[:80]} "
                            f"is affected; fix or drop this record (or mirror a fresh snapshot)") from None


def _add(records: Hits, adv: Advisory, p: Package, hit: Hit) -> None:
    if adv.id not in records:  # the same record in two snapshots counts once
        records[adv.id] = (adv, hit, [])
    refs = records[adv.id][2]
    if p.ref not in refs:
        refs.append(p.ref)


def group(ecosystem: str, package: str, version: str, records: Hits) -> list[Finding]:
    """The records that hit one package version, grouped as osv-scanner groups them: two records are one
    vulnerability when they share an identifier (id or alias), and so is every record sharing one with either
    (a disjoint-set over the records, in id order)."""
    ordered = sorted(records.values(), key=lambda r: r[0].id)
    leader = list(range(len(ordered)))

    def find(i: int) -> int:
        while leader[i] != i:
            leader[i] = leader[leader[i]]
            i = leader[i]
        return i

    claimed: dict[str, int] = {}
    for i, (adv, _, _) in enumerate(ordered):
        for name in adv.names():
            if name in claimed:
                a, b = find(i), find(claimed[name])
                leader[max(a, b)] = min(a, b)
            else:
                claimed[name] = i
    groups: dict[int, list[tuple[Advisory, Hit, list[str]]]] = {}
    for i, member in enumerate(ordered):
        groups.setdefault(find(i), []).append(member)
    return [_finding(ecosystem, package, version, members) for _, members in sorted(groups.items())]


def _finding(ecosystem: str, package: str, version: str, members: list[tuple[Advisory, Hit, list[str]]]) -> Finding:
    """One group as a finding: led by its most severe record (ties: the first id), whose rating the group takes."""
    rated = [(adv, hit, refs, *severity(adv)) for adv, hit, refs in members]
    lead = max(rated, key=lambda r: (rank(r[3]), r[4] if r[4] is not None else -1.0))  # max keeps the first of equals
    records = [Record(adv.id, sev, score, hit.fixed) for adv, hit, _, sev, score in rated]
    records.sort(key=lambda r: r.id != lead[0].id)
    return Finding(lead[0].id, _aliases(lead[0].id, [adv for adv, *_ in rated]), lead[0].summary or next(
        (adv.summary for adv, *_ in rated if adv.summary), ""), lead[3], lead[4], ecosystem, package, version,
        _highest_fix(ecosystem, [r.fixed for r in records], lead[1].fixed),
        tuple(dict.fromkeys(ref for _, _, refs, *_ in rated for ref in refs)), None, tuple(records))


def _aliases(lead: str, advisories: Sequence[Advisory]) -> tuple[str, ...]:
    ids = {a.id for a in advisories}
    names = {n for a in advisories for n in a.names()} - {lead}
    return tuple(sorted(names, key=lambda n: (not n.startswith("CVE-"), n not in ids, n)))


def _highest_fix(ecosystem: str, fixes: Sequence[str | None], fallback: str | None) -> str | None:
    key = version_key(ecosystem)
    known = [f for f in fixes if f is not None and key is not None and _parses(f, key)]
    return max(known, key=key) if known and key is not None else fallback


def counts(findings: Iterable[Finding]) -> dict[str, int]:
    """Findings (vulnerabilities, not records) by severity."""
    out = dict.fromkeys(reversed(SEVERITIES), 0)
    for f in findings:
        out[f.severity] += 1
    return out


# -- the policy --------------------------------------------------------------------------------------------

DEFAULT_MAX_AGE = 5 * 86400  # seconds: Grype's default (db.max-allowed-built-age: 120h)
STALE = ("fail", "warn")  # what a snapshot older than max_age does to the gate
OPERATORS = ("<=", ">=", "==", "!=", "<", ">")
CLAUSE = re.compile(r"\s*(<=|>=|==|!=|<|>)\s*([A-Za-z0-9.+~:!_-]{1,128})\s*")


def version_clauses(text: str) -> list[tuple[str, str]] | None:
    """An allowance's ``versions``: comparisons joined by commas (``>=2.5, <2.6.0``); None when it is not that."""
    out = []
    for part in text.split(","):
        m = CLAUSE.fullmatch(part)
        if m is None:
            return None
        out.append((m.group(1), m.group(2)))
    return out or None


def versions_problem(text: str) -> str | None:
    """Why ``text`` is no allowance ``versions`` (None: it is one): each version must be a PEP 440 or a Debian version."""
    clauses = version_clauses(text)
    if clauses is None:
        return (f"{text[:80]!r} is not a version range; write comparisons joined by commas, e.g. '<2.6.0' or "
                f"'>=1:1.2.13, <1:1.3' ({', '.join(OPERATORS)})")
    for _, v in clauses:
        if not (_parses(v, _pypi) or _parses(v, _debian)):
            return f"{v[:80]!r} is neither a PEP 440 nor a Debian version"
    return None


def in_versions(version: str, text: str, ecosystem: str) -> bool:
    """Does ``text`` (:func:`version_clauses`) hold ``version``, in its ecosystem's order (a PyPI local version as
    its public one, as ranges compare it)? A version either side that does not parse there: no."""
    key, clauses = version_key(ecosystem), version_clauses(text)
    if key is None or clauses is None:
        return False
    try:
        v = key(version)
        return all(_compare(v, op, key(bound)) for op, bound in clauses)
    except (ValueError, TypeError):
        return False


COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}


def _compare(v: Any, op: str, bound: Any) -> bool:
    return bool(COMPARE[op](v, bound))


@dataclass(frozen=True)
class Allowance:
    """An accepted risk: an advisory id (or alias), optionally only for one package and a version range."""

    id: str
    reason: str
    expires: dt.date
    package: str | None = None  # only this package (its PyPI name, normalised; a Debian source package)
    versions: str | None = None  # only these versions (:func:`version_clauses`), in the finding's ecosystem's order

    def covers(self, f: Finding) -> bool:
        if self.id not in f.names():
            return False
        if self.package is not None and not same_name(f.ecosystem, self.package, f.package):
            return False
        return self.versions is None or in_versions(f.version, self.versions, f.ecosystem)

    def describe(self) -> str:
        """``GHSA-53q9-r3pm-6pq6 for torch <2.6.0``: what it covers."""
        return self.id + (f" for {self.package}" if self.package else "") + (f" {self.versions}" if self.versions else "")

    def to_json(self) -> dict[str, Any]:
        out = {"id": self.id, "reason": self.reason, "expires": self.expires.isoformat()}
        return out | {k: v for k, v in (("package", self.package), ("versions", self.versions)) if v is not None}


@dataclass(frozen=True)
class Policy:
    threshold: str = "critical"  # findings at or above it fail (validate: error; release: the target)
    allow: tuple[Allowance, ...] = ()
    max_age_days: int | None = None  # verify --reuse-evidence refuses a vulnerability result older than this
    max_age: int = DEFAULT_MAX_AGE  # seconds: a snapshot whose newest record is older is stale
    stale: str = "fail"  # a stale snapshot fails the gate (fail) or is a warning (warn)

    def allowances(self, finding: Finding) -> list[Allowance]:
        """Every allowance that covers ``finding`` (its id or alias, its package, its version)."""
        return [a for a in self.allow if a.covers(finding)]

    def blocks(self, finding: Finding) -> bool:
        return rank(finding.severity) >= rank(self.threshold) and finding.severity != "unknown"


@dataclass(frozen=True)
class Verdict:
    finding: Finding  # with its allowance attached, if one covers it
    failure: str | None = None  # why it blocks: at or above the threshold and not allowed, or allowed until a past date
    notes: tuple[str, ...] = ()  # what a person should still hear: an expired allowance another one outlives


def judge(findings: Iterable[Finding], policy: Policy, today: dt.date) -> list[Verdict]:
    """Each finding judged: one at or above the threshold blocks unless an allowance covers it and has not
    expired. Every expired allowance covering a finding is reported: the failure when none other covers it,
    a note when one does (the one that expires last is the finding's)."""
    return [_verdict(f, policy, today) for f in findings]


def _verdict(f: Finding, policy: Policy, today: dt.date) -> Verdict:
    covering = policy.allowances(f)
    valid = sorted((a for a in covering if a.expires >= today), key=lambda a: a.expires, reverse=True)
    expired_ = [a for a in covering if a.expires < today]
    if valid:
        notes = tuple(f"{f.label()}: the allowance {a.describe()} expired on {a.expires.isoformat()}; "
                      f"{valid[0].describe()} covers it until {valid[0].expires.isoformat()}: remove the expired one"
                      for a in expired_)
        return Verdict(dataclasses.replace(f, allowed=valid[0]), None, notes)
    if not policy.blocks(f):
        return Verdict(f, None, tuple(f"{f.label()}: the allowance {a.describe()} expired on {a.expires.isoformat()}"
                                      for a in expired_))
    if expired_:
        last = max(expired_, key=lambda a: a.expires)
        return Verdict(f, f"{f.label()}: its allowance expired on {last.expires.isoformat()}; "
                          "upgrade the package, or renew the allowance with a reason (vulnerabilities.allow)")
    return Verdict(f, f"{f.label()}: at or above the threshold {policy.threshold}; upgrade the package, or allow it "
                      "with a reason and an expiry date (vulnerabilities.allow)")


def expired(policy: Policy, today: dt.date) -> list[Allowance]:
    return [a for a in policy.allow if a.expires < today]


def stale(snapshot_age: dt.timedelta, policy: Policy) -> bool:
    return snapshot_age > dt.timedelta(seconds=policy.max_age)
