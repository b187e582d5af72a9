"""Trust across machines: verification results as signed statements, and the release's trust policy.

A verify report is a file another job wrote, so ``publish`` never believes ``verify.json``. The verify
stage signs, with a *verifier* key (``--verifier-key``; GPU runners hold it, build jobs never do), an
in-toto Statement v1 whose subject is the image it verified and whose predicate
(:data:`PREDICATE`) is the whole verify report (nonce, tier, mode, GPUs, every check with its detail)
and the inventory measured inside the image (the SBOM's input), as a DSSE envelope written beside
verify.json (:data:`STATEMENT_FILE`).

``publish`` accepts a verification only when (:func:`accept`):

* the envelope's signature verifies with a key the release's trust policy names
  (``trust-policy.yaml``, :func:`load_policy`: versioned, schema-checked, loaded with the hardened YAML loader);
* its subject is exactly the image being released: the staged manifest digest (an image that travelled
  between machines), or, for an image publish pushes from its own engine, the image ID. An image ID is the
  digest of the image's config, which names every layer's content; publish pushes that image ID itself and
  checks that the registry's manifest carries it as its config digest (``Publisher._check_digest``), so a
  statement about the image ID is a statement about what was pushed. That keeps the single-host release
  (``make release``: build, verify and push in one process, no registry before the push) one command,
  without ever accepting an image-ID statement for a staged image promoted registry to registry;
* its report is then judged again from its checks (:func:`imagesmith.model.policy.verdict`), and the facts a
  build.json claims must agree with what the signed report measured (:func:`check_facts`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from securesystemslib.signer import SSlibKey

from imagesmith.edges import signing
from imagesmith.errors import Problem, UserError, ValidationError

if TYPE_CHECKING:
    from jsonschema import ValidationError as SchemaError
from imagesmith.model import loader, schemas, verifyreport
from imagesmith.model import platform as platforms
from imagesmith.model.located import KeyPath, dotted, line_of, load_located
from imagesmith.model.validation import duration_s
from imagesmith.model.verifyreport import VerifyReport
from imagesmith.resources import data_file
from imagesmith.stages import artifacts
from imagesmith.stages.evidence import attestation

PREDICATE = "https://imagesmith.dev/attestations/verify-report/v1"
STATEMENT_FILE = artifacts.STATEMENT_FILE
IMAGE_ID_SUBJECT = "docker-image-id"  # the subject name of a statement about a local image (no registry yet)
POLICY_SCHEMA_FILE = "trust-policy-v1.schema.json"
POLICY_MAX_BYTES = loader.POLICY_CAP
STATEMENT_MAX_BYTES = loader.STATEMENT_CAP
FACTS = ("torch", "cuda", "cudnn", "python")  # what a build.json claims and a signed report measured
PEM_START, PEM_END = "-----BEGIN PUBLIC KEY-----", "-----END PUBLIC KEY-----"
POLICY_FIX = "see docs/trust.md (the trust policy)"
DEFAULT_MAX_AGE_S = 30 * 86400  # a policy that names no max_age: a statement older than 30 days is held back
MAX_AGE_LIMIT_S = 3650 * 86400
CLOCK_SKEW_S = 300  # a statement signed up to 5 minutes "in the future" is a verifier's clock a little ahead


class Refused(UserError):
    """A verification publish does not believe (the message says which file and why)."""


# -- the trust policy -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verifier:
    name: str
    key: SSlibKey
    classes: tuple[str, ...]
    max_age_s: int | None = None  # its own max_age; None: the policy's

    @property
    def keyid(self) -> str:
        return str(self.key.keyid)


@dataclass(frozen=True)
class ClassRule:
    """What a GPU class must be for a fleet result to count, as the trust policy's ``fleet.classes`` says (when
    publish is given no fleet file): its GPU model and count, and its nodes' platform."""

    name: str
    gpus: int
    gpu: str | None
    platform: platforms.Platform = platforms.DEFAULT


@dataclass(frozen=True)
class TrustPolicy:
    file: str
    sha256: str  # of the file's bytes: the release report names exactly which policy judged it
    version: int
    verifiers: tuple[Verifier, ...]
    max_age_s: int = DEFAULT_MAX_AGE_S
    require: tuple[str, ...] = ()  # fleet.require: the classes a floating tag needs (empty: the policy names none)
    classes: tuple[ClassRule, ...] = ()  # fleet.classes

    @property
    def keys(self) -> list[SSlibKey]:
        return [v.key for v in self.verifiers]

    def verifier(self, keyid: str) -> Verifier | None:
        return next((v for v in self.verifiers if v.keyid == keyid), None)

    def max_age(self, verifier: Verifier) -> tuple[int, str]:
        """How old a statement ``verifier`` signed may be, in seconds, and which setting says so."""
        if verifier.max_age_s is not None:
            return verifier.max_age_s, f"the max_age of verifier {verifier.name} in {self.file}"
        return self.max_age_s, f"the max_age of {self.file}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "file": self.file, "sha256": self.sha256, "version": self.version, "max_age_s": self.max_age_s,
            "verifiers": [{"name": v.name, "keyid": v.keyid, "classes": list(v.classes)}
                          | ({"max_age_s": v.max_age_s} if v.max_age_s is not None else {}) for v in self.verifiers]}
        if self.require:
            out["fleet"] = {"require": list(self.require),
                            "classes": {c.name: {"gpus": c.gpus, "gpu": c.gpu, "platform": c.platform.docker} for c in self.classes}}
        return out


@lru_cache(maxsize=1)
def policy_schema() -> dict[str, Any]:
    return dict(json.loads(data_file(POLICY_SCHEMA_FILE).read_text()))


def load_policy(path: Path) -> TrustPolicy:
    """``trust-policy.yaml`` (or JSON, a subset of YAML), read with the hardened loader, checked against its
    schema, every key loaded; any problem is a ValidationError naming file:line and key path."""
    try:
        data = loader.read_regular(path, cap=POLICY_MAX_BYTES)
    except loader.LoadError as exc:
        raise ValidationError(problems=[Problem(f"{path}: {exc.why}; {POLICY_FIX}")]) from None
    return parse_policy(data, path)


def parse_policy(data: str | bytes, path: Path) -> TrustPolicy:
    raw = data.encode() if isinstance(data, str) else data
    doc, lines = load_located(raw, str(path))
    problems = schema_problems(doc, lines, str(path))
    if problems:
        raise ValidationError(problems=problems)
    verifiers = tuple(_verifier(v, i, path, lines) for i, v in enumerate(doc["verifiers"]))
    _unique(verifiers, path, lines)
    require, classes = _fleet_rule(doc.get("fleet"), path, lines)
    max_age = _age(doc.get("max_age"), ("max_age",), path, lines)
    return TrustPolicy(str(path), hashlib.sha256(raw).hexdigest(), int(doc["version"]), verifiers,
                       DEFAULT_MAX_AGE_S if max_age is None else max_age, require, classes)


def _age(raw: Any, at: KeyPath, path: Path, lines: Mapping[KeyPath, int]) -> int | None:
    """A ``max_age`` (the schema checked its grammar) in seconds; None when absent."""
    if raw is None:
        return None
    seconds = duration_s(str(raw))
    if seconds is None or not 1 <= seconds <= MAX_AGE_LIMIT_S:
        raise ValidationError(problems=[Problem(f"{str(raw)[:40]!r} is not an age from 1s to 3650d; write e.g. 36h or 7d; "
                                                f"{POLICY_FIX}", str(path), line_of(lines, at), dotted(at))])
    return seconds


def _fleet_rule(raw: Any, path: Path, lines: Mapping[KeyPath, int]) -> tuple[tuple[str, ...], tuple[ClassRule, ...]]:
    """``fleet``: the required classes, each with its GPU model and count (a class it requires must be described)."""
    if raw is None:
        return (), ()
    rules = []
    for name, spec in raw["classes"].items():
        at: KeyPath = ("fleet", "classes", name, "platform")
        problem = platforms.problem(spec["platform"]) if "platform" in spec else None
        if problem:
            raise ValidationError(problems=[Problem(f"{problem}; {POLICY_FIX}", str(path), line_of(lines, at), dotted(at))])
        rules.append(ClassRule(str(name), int(spec["gpus"]), spec.get("gpu"),
                               platforms.parse(spec["platform"]) if "platform" in spec else platforms.DEFAULT))
    described = {r.name for r in rules}
    for i, name in enumerate(raw["require"]):
        if name not in described:
            at = ("fleet", "require", i)
            raise ValidationError(problems=[Problem(
                f"class {name} is required but fleet.classes does not describe it (its gpu and gpus); {POLICY_FIX}",
                str(path), line_of(lines, at), dotted(at))])
        rule = next(r for r in rules if r.name == name)
        if rule.gpus and not rule.gpu:
            at = ("fleet", "classes", name)
            raise ValidationError(problems=[Problem(f"class {name} runs on GPUs but names no gpu model; {POLICY_FIX}",
                                                    str(path), line_of(lines, at), dotted(at))])
    return tuple(str(n) for n in raw["require"]), tuple(rules)


def schema_problems(doc: Any, lines: Mapping[KeyPath, int], file: str) -> list[Problem]:
    from jsonschema import Draft202012Validator  # jsonschema loads in ~2 s: only where a policy is read (as loader does)

    validator = Draft202012Validator(policy_schema())
    found = sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    return [Problem(f"{_plain(e)}; {POLICY_FIX}", file, line_of(lines, tuple(e.absolute_path)),
                    dotted(tuple(e.absolute_path)) or "(top)") for e in found]


def _plain(e: SchemaError) -> str:
    """jsonschema's message, bounded (a huge value is not echoed whole)."""
    text = e.message
    return str(text) if len(text) <= 200 else str(text)[:197] + "..."


def _verifier(raw: Mapping[str, Any], i: int, path: Path, lines: Mapping[KeyPath, int]) -> Verifier:
    where = f"{path}:{line_of(lines, ('verifiers', i, 'key'))} {dotted(('verifiers', i, 'key'))}"
    text = str(raw["key"])
    try:
        if text.lstrip().startswith(PEM_START):
            key = signing.public_key_from_pem(_pem(text), "the inline PEM")
        else:
            key = signing.load_public_key(path.parent / text)
    except UserError as exc:
        raise ValidationError(problems=[Problem(f"{where}: {exc}; give the verifier's PEM public key "
                                                f"(openssl pkey -in verifier.key -pubout) as a path or inline")]) from None
    return Verifier(str(raw["name"]), key, tuple(str(c) for c in raw["classes"]),
                    _age(raw.get("max_age"), ("verifiers", i, "max_age"), path, lines))


def _pem(text: str) -> bytes:
    """An inline key on one line (the policy's loader takes no line breaks in a value): the PEM it stands for."""
    body = "".join(text.strip().removeprefix(PEM_START).removesuffix(PEM_END).split())
    return f"{PEM_START}\n{body}\n{PEM_END}\n".encode()


def _unique(verifiers: Sequence[Verifier], path: Path, lines: Mapping[KeyPath, int]) -> None:
    seen: dict[str, int] = {}
    for i, v in enumerate(verifiers):
        for what, value in (("name", v.name), ("key", v.keyid)):
            first = seen.setdefault(f"{what}:{value}", i)
            if first != i:
                raise ValidationError(problems=[Problem(
                    f"the same {what} as {dotted(('verifiers', first))}; one entry per verifier, one key per verifier",
                    str(path), line_of(lines, ("verifiers", i, what)), dotted(("verifiers", i, what)))])


def check_roles(policy: TrustPolicy, release_key: SSlibKey | None, verifier_key: SSlibKey | None = None) -> None:
    """Roles stay apart: the release key (``--signing-key``) is no verifier the policy names, and no verifier key
    is the release key. A UserError naming both otherwise (a key that signs releases could vouch for its own)."""
    if release_key is None:
        return
    for i, v in enumerate(policy.verifiers):
        if v.keyid == release_key.keyid:
            raise UserError(f"{policy.file}: verifiers[{i}] ({v.name}) has the release key (--signing-key, key ID "
                            f"{v.keyid[:16]}) as its key; roles stay apart: a verifier key signs verifications on GPU "
                            f"runners, the release key signs what publish attaches; give the verifier a key of its own")
    if verifier_key is not None and verifier_key.keyid == release_key.keyid:
        raise UserError(f"--verifier-key and --signing-key are the same key (key ID {release_key.keyid[:16]}); roles stay "
                        f"apart: give the verify stage a verifier key of its own, and name it in {policy.file}")


def policy_text(verifiers: Sequence[tuple[str, str, Sequence[str]]]) -> str:
    """A trust policy file (``make release`` writes one): (name, key path or PEM, classes) per verifier."""
    doc = {"version": 1, "verifiers": [{"name": n, "key": k, "classes": list(c)} for n, k, c in verifiers]}
    return "# imagesmith trust policy: which verifier keys a release believes (docs/trust.md)\n" + json.dumps(doc, indent=2) + "\n"


# -- signing a verification -------------------------------------------------------------------------


@dataclass(frozen=True)
class Subject:
    """What a verification is about: a registry manifest (``name`` host/repository, ``digest`` its
    manifest digest) or a local image (``name`` :data:`IMAGE_ID_SUBJECT`, ``digest`` its image ID)."""

    name: str
    digest: str

    @property
    def image_id_bound(self) -> bool:
        return self.name == IMAGE_ID_SUBJECT


class Unsignable(UserError):
    """A verify report the verifier does not sign: it does not follow the verify report's schema."""


def signable(report: Mapping[str, Any]) -> None:
    """The report, as it will be signed, through the one strict reader: strict JSON (no NaN or infinity), the
    verify report's schema (``imagesmith.verify-report/1``). :class:`Unsignable` saying where otherwise."""
    try:
        loader.parse_json(json.dumps(report, allow_nan=True).encode(), "the verify report")
        loader.check_schema(report, schemas.VERIFY_REPORT, "the verify report")
    except loader.LoadError as exc:
        raise Unsignable(f"{exc}; nothing was signed: the image under test wrote a report imagesmith does not believe") from None


def statement(report: VerifyReport, inventory: Mapping[str, Any] | None, subject: Subject,
              fleet: Mapping[str, str] | None = None, now: dt.datetime | None = None) -> bytes:
    """The in-toto Statement v1 (canonical JSON) of a verification: the whole report, the inventory, and
    ``signed_at``: the verifier's own clock when it signed (what orders results and what expires; never the
    report's ``started_at``, which the image under test wrote); for a fleet cell also ``fleet`` (the GPU class,
    run, node and job it ran as), so a result signed for one class or run cannot stand for another."""
    document = report.to_json()  # as read: what is signed is what the payload and the host wrote
    signable(document)
    when = (now or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)
    predicate: dict[str, Any] = {"report": document, "inventory": dict(inventory) if inventory is not None else None,
                                 "signed_at": when.isoformat(timespec="seconds")}
    if fleet is not None:
        predicate["fleet"] = dict(fleet)
    return attestation.statement_bytes(attestation.Statement(subject.name, subject.digest, PREDICATE, predicate))


def sign(report: VerifyReport, inventory: Mapping[str, Any] | None, subject: Subject, key: signing.Key,
         fleet: Mapping[str, str] | None = None, now: dt.datetime | None = None) -> bytes:
    """The DSSE envelope (JSON bytes) of :func:`statement`, signed by the verifier ``key``."""
    return signing.envelope(statement(report, inventory, subject, fleet, now), attestation.PAYLOAD_TYPE, key)


# -- accepting one ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Accepted:
    """A verification publish believes: who signed it, about what, and what it says."""

    verifier: str
    keyid: str
    subject: Subject
    report: VerifyReport
    inventory: Mapping[str, Any] | None
    path: str
    classes: tuple[str, ...] = ("*",)  # the GPU classes the policy lets this verifier vouch for
    fleet_class: str | None = None  # the GPU class the signed statement says it ran on (fleet cells)
    signed_at: dt.datetime | None = None  # the verifier's clock when it signed (predicate.signed_at)
    fleet_run: str | None = None  # the fleet run the signed statement says it belongs to (fleet cells)

    def vouches_for(self, klass: str) -> bool:
        """Whether the trust policy lets this verifier vouch for GPU class ``klass``."""
        return "*" in self.classes or klass in self.classes

    def to_json(self) -> dict[str, Any]:
        return {"verifier": self.verifier, "keyid": self.keyid, "subject": f"{self.subject.name}@{self.subject.digest}",
                "statement": self.path}


class Expired(Refused):
    """A statement a trusted verifier signed about this image, older than the trust policy's max_age."""


def accept(data: bytes, where: str, policy: TrustPolicy, expected: Subject, now: dt.datetime | None = None) -> Accepted:
    """The verification in DSSE envelope ``data`` (from file ``where``), when a verifier ``policy`` names signed
    it, its subject is ``expected``, it was signed no longer ago than the policy's max_age (at ``now``), and its
    report follows the verify report's schema; else :class:`Refused` (:class:`Expired` for an old one) saying why."""
    try:
        opened = signing.open_envelope(data, policy.keys)
    except ValueError as exc:
        raise Refused(f"{where}: {exc}; verify again with --verifier-key") from None
    if opened.payload_type != attestation.PAYLOAD_TYPE:
        raise Refused(f"{where}: payload type {opened.payload_type[:80]!r} is not {attestation.PAYLOAD_TYPE}; verify again with --verifier-key")
    if not opened.signed_by:
        how = "carries no signature" if not opened.signatures else \
            f"is signed by no verifier that {policy.file} names ({opened.signatures} signature(s) by other keys)"
        raise Refused(f"{where}: {how}; only a verification signed by a trusted verifier key is released "
                      f"(verify on a runner that holds one, or add its public key to {policy.file})")
    st = _statement(opened.payload, where)
    found = Subject(st.subject_name, st.subject_digest)
    if found != expected:
        raise Refused(f"{where}: its subject is {found.name}@{found.digest}, not the image being released "
                      f"({expected.name}@{expected.digest}); verify that image again")
    verifier = policy.verifier(opened.signed_by[0])
    assert verifier is not None  # open_envelope checked only the policy's keys
    report, inventory = _predicate(st.predicate, where)
    signed_at = _fresh(st.predicate, where, policy, verifier, now or dt.datetime.now(dt.timezone.utc))
    fleet = st.predicate.get("fleet")
    klass = fleet.get("class") if isinstance(fleet, Mapping) else None
    run = fleet.get("run_id") if isinstance(fleet, Mapping) else None
    return Accepted(verifier.name, verifier.keyid, found, report, inventory, where, verifier.classes,
                    klass if isinstance(klass, str) else None, signed_at, run if isinstance(run, str) else None)


def _fresh(predicate: Mapping[str, Any], where: str, policy: TrustPolicy, verifier: Verifier, now: dt.datetime) -> dt.datetime:
    """The statement's signed time, when it is no older than the policy allows and not in the future."""
    raw = predicate.get("signed_at")
    try:
        when = dt.datetime.fromisoformat(raw) if isinstance(raw, str) and len(raw) <= 40 else None
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise Refused(f"{where}: the statement carries no signed time (signed_at, with its time zone): it cannot be "
                      f"ordered or expire; verify again with this imagesmith")
    age = (now - when).total_seconds()
    if age < -CLOCK_SKEW_S:
        raise Refused(f"{where}: signed at {raw}, {_span(-age)} in the future: the verifier's clock is wrong; fix it "
                      f"and verify again")
    limit, said = policy.max_age(verifier)
    if age > limit:
        raise Expired(f"{where}: signed {_span(age)} ago ({raw}), older than the {_span(limit)} {said} allows; "
                      f"verify the image again")
    return when


def _span(seconds: float) -> str:
    """90061 -> '1d 1h 1m' (the largest two units that are not zero)."""
    s = int(seconds)
    parts = [(s // 86400, "d"), (s % 86400 // 3600, "h"), (s % 3600 // 60, "m"), (s % 60, "s")]
    shown = [f"{n}{u}" for n, u in parts if n][:2]
    return " ".join(shown) or "0s"


def _statement(payload: bytes, where: str) -> attestation.Statement:
    try:
        st = attestation.parse_statement(payload)
    except attestation.StatementError as exc:
        raise Refused(f"{where}: the signed payload is not an in-toto statement ({exc})") from None
    if st.predicate_type != PREDICATE:
        raise Refused(f"{where}: predicate type {st.predicate_type[:80]!r} is not {PREDICATE}")
    return st


def _predicate(predicate: Mapping[str, Any], where: str) -> tuple[VerifyReport, Mapping[str, Any] | None]:
    """The signed report (checked against the verify report's schema, as an unsigned one is: a report declaring
    another schema version is not believed) and the inventory."""
    report, inventory = predicate.get("report"), predicate.get("inventory")
    if not isinstance(report, Mapping) or not isinstance(report.get("checks"), list):
        raise Refused(f"{where}: the signed predicate holds no verify report (report.checks)")
    try:
        loader.check_schema(report, schemas.VERIFY_REPORT, where)
        read = verifyreport.parse(report, where, "")  # located as report.<key path> below
    except loader.LoadError as exc:
        raise Refused(f"{where}: the signed report does not follow {schemas.VERIFY_REPORT}: report.{exc.where}: {exc.why}; "
                      f"a report imagesmith does not read is not released as verified") from None
    if inventory is not None and not isinstance(inventory, Mapping):
        raise Refused(f"{where}: the signed predicate's inventory is not an object")
    return read, inventory


def read_statement(path: Path, policy: TrustPolicy, expected: Subject, root: Path | None = None,
                   now: dt.datetime | None = None) -> Accepted:
    """:func:`accept` of the file ``path``: a regular file inside ``root`` (OUT; no link out, no FIFO or device), of
    bounded size, read through the one loader."""
    try:
        data = loader.read_confined(path, root=root, cap=STATEMENT_MAX_BYTES)
    except loader.LoadError as exc:
        raise Refused(f"{exc}; not a verification imagesmith wrote") from None
    return accept(data, str(path), policy, expected, now)


# -- facts ------------------------------------------------------------------------------------------


def measured(report: VerifyReport) -> dict[str, str]:
    """torch, cuda (``cpu`` for a CPU-only torch), cudnn and python as the signed report measured them."""
    out = {k: report.environment.fact(k) or "" for k in FACTS}
    out["cuda"] = out["cuda"] or "cpu"
    return out


def check_facts(claimed: Mapping[str, Any] | None, report: VerifyReport, where: str, signed: str) -> dict[str, str]:
    """What a build.json (``where``) claims against what the signed report (``signed``) measured: any
    disagreement is a UserError naming both values; the measured facts otherwise."""
    have = measured(report)
    facts = claimed or {}
    said = {k: "" if facts.get(k) is None else str(facts.get(k)) for k in FACTS}
    said["cuda"] = said["cuda"] or "cpu"
    wrong = [f"{k}: build.json says {said[k] or '(none)'!r}, the signed report measured {have[k] or '(none)'!r}"
             for k in FACTS if said[k] != have[k]]
    if wrong:
        raise UserError(f"{where}: its facts disagree with the signed verification {signed}: {'; '.join(wrong)}; "
                        f"nothing is released from a build record that misstates its image: build it again")
    return have
