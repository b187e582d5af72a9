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
from imagesmith.model import loader
from imagesmith.model.located import KeyPath, dotted, line_of, load_located
from imagesmith.resources import data_file
from imagesmith.stages import artifacts, attestation

PREDICATE = "https://imagesmith.dev/attestations/verify-report/v1"
STATEMENT_FILE = artifacts.STATEMENT_FILE
IMAGE_ID_SUBJECT = "docker-image-id"  # the subject name of a statement about a local image (no registry yet)
POLICY_SCHEMA_FILE = "trust-policy-v1.schema.json"
POLICY_MAX_BYTES = loader.POLICY_CAP
STATEMENT_MAX_BYTES = loader.STATEMENT_CAP
FACTS = ("torch", "cuda", "cudnn", "python")  # what a build.json claims and a signed report measured
PEM_START, PEM_END = "-----BEGIN PUBLIC KEY-----", "-----END PUBLIC KEY-----"
POLICY_FIX = "see docs/trust.md (the trust policy)"


class Refused(UserError):
    """A verification publish does not believe (the message says which file and why)."""


# -- the trust policy -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verifier:
    name: str
    key: SSlibKey
    classes: tuple[str, ...]

    @property
    def keyid(self) -> str:
        return str(self.key.keyid)


@dataclass(frozen=True)
class TrustPolicy:
    file: str
    sha256: str  # of the file's bytes: the release report names exactly which policy judged it
    version: int
    verifiers: tuple[Verifier, ...]

    @property
    def keys(self) -> list[SSlibKey]:
        return [v.key for v in self.verifiers]

    def verifier(self, keyid: str) -> Verifier | None:
        return next((v for v in self.verifiers if v.keyid == keyid), None)

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "sha256": self.sha256, "version": self.version,
                "verifiers": [{"name": v.name, "keyid": v.keyid, "classes": list(v.classes)} for v in self.verifiers]}


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
    return TrustPolicy(str(path), hashlib.sha256(raw).hexdigest(), int(doc["version"]), verifiers)


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
    return Verifier(str(raw["name"]), key, tuple(str(c) for c in raw["classes"]))


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


def statement(report: Mapping[str, Any], inventory: Mapping[str, Any] | None, subject: Subject,
              fleet: Mapping[str, str] | None = None) -> bytes:
    """The in-toto Statement v1 (canonical JSON) of a verification: the whole report and the inventory; for a
    fleet cell also ``fleet`` (the GPU class, run, node and job it ran as), so a result signed for one class
    cannot stand for another."""
    predicate: dict[str, Any] = {"report": dict(report), "inventory": dict(inventory) if inventory is not None else None}
    if fleet is not None:
        predicate["fleet"] = dict(fleet)
    return attestation.statement_bytes(attestation.Statement(subject.name, subject.digest, PREDICATE, predicate))


def sign(report: Mapping[str, Any], inventory: Mapping[str, Any] | None, subject: Subject, key: signing.Key,
         fleet: Mapping[str, str] | None = None) -> bytes:
    """The DSSE envelope (JSON bytes) of :func:`statement`, signed by the verifier ``key``."""
    return signing.envelope(statement(report, inventory, subject, fleet), attestation.PAYLOAD_TYPE, key)


# -- accepting one ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Accepted:
    """A verification publish believes: who signed it, about what, and what it says."""

    verifier: str
    keyid: str
    subject: Subject
    report: Mapping[str, Any]
    inventory: Mapping[str, Any] | None
    path: str
    classes: tuple[str, ...] = ("*",)  # the GPU classes the policy lets this verifier vouch for
    fleet_class: str | None = None  # the GPU class the signed statement says it ran on (fleet cells)

    def vouches_for(self, klass: str) -> bool:
        """Whether the trust policy lets this verifier vouch for GPU class ``klass``."""
        return "*" in self.classes or klass in self.classes

    def to_json(self) -> dict[str, Any]:
        return {"verifier": self.verifier, "keyid": self.keyid, "subject": f"{self.subject.name}@{self.subject.digest}",
                "statement": self.path}


def accept(data: bytes, where: str, policy: TrustPolicy, expected: Subject) -> Accepted:
    """The verification in DSSE envelope ``data`` (from file ``where``), when a verifier ``policy`` names signed
    it and its subject is ``expected``; else :class:`Refused` saying why."""
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
    fleet = st.predicate.get("fleet")
    klass = fleet.get("class") if isinstance(fleet, Mapping) else None
    return Accepted(verifier.name, verifier.keyid, found, report, inventory, where, verifier.classes,
                    klass if isinstance(klass, str) else None)


def _statement(payload: bytes, where: str) -> attestation.Statement:
    try:
        st = attestation.parse_statement(payload)
    except attestation.StatementError as exc:
        raise Refused(f"{where}: the signed payload is not an in-toto statement ({exc})") from None
    if st.predicate_type != PREDICATE:
        raise Refused(f"{where}: predicate type {st.predicate_type[:80]!r} is not {PREDICATE}")
    return st


def _predicate(predicate: Mapping[str, Any], where: str) -> tuple[Mapping[str, Any], Mapping[str, Any] | None]:
    report, inventory = predicate.get("report"), predicate.get("inventory")
    if not isinstance(report, Mapping) or not isinstance(report.get("checks"), list):
        raise Refused(f"{where}: the signed predicate holds no verify report (report.checks)")
    if inventory is not None and not isinstance(inventory, Mapping):
        raise Refused(f"{where}: the signed predicate's inventory is not an object")
    return report, inventory


def read_statement(path: Path, policy: TrustPolicy, expected: Subject, root: Path | None = None) -> Accepted:
    """:func:`accept` of the file ``path``: a regular file inside ``root`` (OUT; no link out, no FIFO or device), of
    bounded size, read through the one loader."""
    try:
        data = loader.read_confined(path, root=root, cap=STATEMENT_MAX_BYTES)
    except loader.LoadError as exc:
        raise Refused(f"{exc}; not a verification imagesmith wrote") from None
    return accept(data, str(path), policy, expected)


# -- facts ------------------------------------------------------------------------------------------


def measured(report: Mapping[str, Any]) -> dict[str, str]:
    """torch, cuda (``cpu`` for a CPU-only torch), cudnn and python as the signed report measured them."""
    env = report.get("environment")
    env = env if isinstance(env, Mapping) else {}
    out = {k: "" if env.get(k) is None else str(env.get(k)) for k in FACTS}
    out["cuda"] = out["cuda"] or "cpu"
    return out


def check_facts(claimed: Mapping[str, Any] | None, report: Mapping[str, Any], where: str, signed: str) -> dict[str, str]:
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
