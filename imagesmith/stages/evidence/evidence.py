"""The evidence stage: SBOM, verification attestation and signature attached
to a pushed image digest, and read back again.

What lands in the registry for an image manifest ``sha256:D`` of ``repo``:

* two OCI artifact manifests whose ``subject`` is the image manifest, each
  with one layer, a DSSE envelope (``application/vnd.dsse.envelope.v1+json``)
  around an in-toto Statement v1 about ``repo@sha256:D``:
  the SBOM (``artifactType`` :data:`SBOM_ARTIFACT`, predicate CycloneDX) and
  the verification (``artifactType`` :data:`VERIFICATION_ARTIFACT`,
  predicate :data:`attestation.VERIFICATION_PREDICATE`);
* found through the referrers API where the registry has it (it answers the
  push with ``OCI-Subject``), else through the referrers tag schema: the OCI
  index at tag ``sha256-D``, kept by read-modify-write;
* a cosign-format signature over the digest at tag ``sha256-D.sig`` (one
  simple-signing layer per signature, as cosign and containers/image write it);
* the same DSSE envelopes again in cosign's attestation layout, tag
  ``sha256-D.att`` (one layer per attestation, shared blobs), where
  ``cosign verify-attestation`` and admission controllers built on cosign look.

Pushing is idempotent: a re-run finds the same SBOM statement, an equivalent
verification (same tier, mode, GPU model and count, verdict) and its
signature already there, signed by the same key, and pushes nothing; the
``.att`` manifest gains a layer only for an envelope it does not list yet.

The documents and manifests themselves are built in :mod:`imagesmith.stages.evidence.referrers` (pure); whether what was
read back stands for a fresh run is :mod:`imagesmith.stages.evidence.reuse`.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

from securesystemslib.signer import SSlibKey

from imagesmith.atomic import write_text
from imagesmith.edges import signing
from imagesmith.edges.credentials import CredentialStore
from imagesmith.edges.protocols import RegistryProtocol
from imagesmith.edges.registry import OCI_INDEX, OCI_MANIFEST, manifest_document, sha256_digest
from imagesmith.edges.registry import entries as descriptors
from imagesmith.errors import RegistryError, UserError
from imagesmith.model import loader, policy
from imagesmith.model.ref import ImageRef
from imagesmith.model.verifyreport import VerifyReport
from imagesmith.stages.evidence import attestation, sbom, vex
from imagesmith.stages.evidence.attestation import Statement, StatementError
from imagesmith.stages.evidence.referrers import (  # the documents evidence is made of: re-exported for its callers
    ARTIFACT_TYPES,
    COSIGN_PREDICATE_ANNOTATION,
    CREATED_ANNOTATION,
    DIGEST,
    EMPTY,
    KINDS,
    PREDICATE_ANNOTATION,
    PREDICATES,
    SBOM_ARTIFACT,
    VERIFICATION_ARTIFACT,
    VEX_ARTIFACT,
    Document,
    artifact_manifest,
    attestation_tag,
    cosign_attestation_layer,
    cosign_attestation_manifest,
    descriptor,
    index_entry,
    manifest_layers,
    ran_on,
    ran_where,
    referrers_index,
    referrers_tag,
    sbom_document,
    signature_manifest,
    signature_tag,
    verdict_problems,
    verification_document,
    verification_identity,
    vex_document,
)

# =====================================================================  documents (pure)


# cosign's `.att` layout, as cosign v3 (github.com/sigstore/cosign @ d6d86c22) writes it:
# - cmd/cosign/cli/attest/attest.go: the layer is the DSSE envelope, mediaType types.DssePayloadType
#   (pkg/types/payload.go: application/vnd.dsse.envelope.v1+json), annotation "predicateType": <uri>;
# - pkg/oci/static/signature.go: Annotations() always adds dev.cosignproject.cosign/signature, "" for an
#   attestation (NewAttestation); pkg/oci/internal/signature/layer.go refuses a layer without that key;
# - pkg/oci/mutate/signatures.go AppendSignatures: go-containerregistry mutate.Append onto
#   pkg/oci/empty's image (OCI manifest, OCI config media types), so the config gets one diff_id and one
#   empty history entry per layer (go-containerregistry pkg/v1/mutate/image.go, field order pkg/v1/config.go,
#   descriptors pkg/v1/manifest.go); a second `cosign attest` appends a layer (read-modify-write);
# - pkg/cosign/verify.go verifyOCIAttestation + pkg/cosign/verifiers.go IntotoSubjectClaimVerifier: payloadType
#   application/vnd.in-toto+json, DSSE signature over PAE by the key, a subject whose sha256 is the image's.
# The bytes below are Go's encoding of those structs; tests/fixtures/cosign-att/ holds a `.att` cosign made.


# =====================================================================  reading evidence


@dataclass
class Attestation:
    """One referrer of the image, opened and checked."""

    digest: str  # the artifact manifest's
    artifact_type: str
    size: int
    kind: str = "other"  # sbom | verification | other
    predicate_type: str | None = None
    signatures: int = 0
    signed_by: tuple[str, ...] = ()
    layer: str = ""  # the DSSE blob's digest
    layer_size: int = 0
    statement: Statement | None = field(default=None, repr=False)
    payload: bytes = field(default=b"", repr=False)
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "digest": self.digest, "artifactType": self.artifact_type, "size": self.size,
                "predicateType": self.predicate_type, "layer": {"digest": self.layer, "size": self.layer_size},
                "signatures": self.signatures, "signed_by": list(self.signed_by), "problems": self.problems}


@dataclass
class ImageSignature:
    """One simple-signing layer of the ``.sig`` manifest."""

    layer: str
    size: int
    claims: str  # the digest the payload names
    identity: str  # its docker-reference
    signed_by: tuple[str, ...] = ()
    payload: bytes = field(default=b"", repr=False)
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"layer": {"digest": self.layer, "size": self.size}, "docker-manifest-digest": self.claims,
                "docker-reference": self.identity, "signed_by": list(self.signed_by), "problems": self.problems}


@dataclass
class Evidence:
    """Everything attached to one image digest, with what did not check out."""

    name: str  # registry/repository
    digest: str
    media_type: str
    size: int
    discovery: str  # referrers API | referrers tag sha256-... | none
    keys: tuple[str, ...]
    attestations: list[Attestation] = field(default_factory=list)
    signatures: list[ImageSignature] = field(default_factory=list)
    signature_manifest: str | None = None
    cosign: list[Attestation] = field(default_factory=list)  # the layers of the `.att` manifest
    cosign_manifest: str | None = None
    index_entries: list[dict[str, Any]] = field(default_factory=list, repr=False)
    problems: list[str] = field(default_factory=list)

    def all_problems(self) -> list[str]:
        """Every mismatch: a subject, a blob, a signature that does not verify with the given key."""
        out = list(self.problems)
        out += [f"{a.kind} {a.digest[:19]}: {p}" for a in self.attestations for p in a.problems]
        out += [f"{a.kind} in the .att tag, layer {a.layer[:19]}: {p}" for a in self.cosign for p in a.problems]
        out += [f"signature {s.layer[:19]}: {p}" for s in self.signatures for p in s.problems]
        if self.keys and not any(s.signed_by for s in self.signatures):
            out.append(f"no signature of {self.name}@{self.digest} verifies with the given key")
        return out

    @property
    def ok(self) -> bool:
        return not self.all_problems()

    def of_kind(self, kind: str) -> list[Attestation]:
        return [a for a in self.attestations if a.kind == kind]

    def to_json(self) -> dict[str, Any]:
        return {"schema": "imagesmith.evidence/1", "ok": self.ok, "name": self.name, "digest": self.digest,
                "discovery": self.discovery, "keys": list(self.keys),
                "attestations": [a.to_json() for a in self.attestations],
                "signature": {"tag": signature_tag(self.digest), "manifest": self.signature_manifest,
                              "signatures": [s.to_json() for s in self.signatures]},
                "cosign_attestations": {"tag": attestation_tag(self.digest), "manifest": self.cosign_manifest,
                                        "attestations": [a.to_json() for a in self.cosign]},
                "verification": [verification_summary(a) for a in self.of_kind("verification")],
                "sbom": [sbom.counts(a.statement.predicate) for a in self.of_kind("sbom") if a.statement],
                "vulnerabilities": [vex.counts(a.statement.predicate) for a in self.of_kind("vulnerabilities") if a.statement],
                "problems": self.all_problems()}


def verification_summary(a: Attestation) -> dict[str, Any]:
    p = dict(a.statement.predicate) if a.statement else {}
    return {"digest": a.digest, "signed": bool(a.signed_by), "tier": p.get("tier"), "mode": p.get("mode"),
            "passed": p.get("passed"), "gpu_verification": p.get("gpu_verification"), "gpu": p.get("gpu"), "driver": p.get("driver"), "measured": p.get("measured"),
            "summary": p.get("summary"), "failed_checks": policy.predicate_failed(p), "started_at": p.get("started_at"),
            "verifier": p.get("verifier"), "platform": p.get("platform"), "ran": ran_where(p)}


class Reader:
    """Reads and checks the evidence of one digest; ``keys``: the public keys to trust."""

    def __init__(self, registry: RegistryProtocol, repo: str, keys: Sequence[SSlibKey] = ()) -> None:
        self.registry, self.repo, self.keys = registry, repo, list(keys)

    def read(self, ref: str) -> Evidence:
        image = self.registry.manifest(self.repo, ref)
        if image is None:
            raise UserError(f"{self.registry.host}/{self.repo}:{ref} does not exist in the registry")
        found = Evidence(f"{self.registry.host}/{self.repo}", image.digest, image.media_type, len(image.raw), "none",
                         tuple(k.keyid for k in self.keys))
        if ref.startswith("sha256:") and sha256_digest(image.raw) != ref:
            found.problems.append(f"the registry served a manifest for {ref} whose sha256 is {sha256_digest(image.raw)}")
        entries = self._discover(found)
        found.attestations = [self._attestation(e, found.digest) for e in entries]
        self._signatures(found)
        self._cosign_attestations(found)
        return found

    def _discover(self, found: Evidence) -> list[dict[str, Any]]:
        entries = self.registry.referrers(self.repo, found.digest)
        if entries is not None:
            found.discovery = "referrers API"
            return entries
        index = self.registry.manifest(self.repo, referrers_tag(found.digest))
        if index is None:
            return []
        found.discovery = f"referrers tag {referrers_tag(found.digest)}"
        try:
            found.index_entries = descriptors(manifest_document(index.raw, referrers_tag(found.digest)), "manifests")
        except RegistryError:
            found.problems.append(f"the referrers tag {referrers_tag(found.digest)} holds no OCI index")
        return found.index_entries

    def _attestation(self, entry: Mapping[str, Any], subject: str) -> Attestation:
        size = entry.get("size")
        a = Attestation(str(entry.get("digest", ""))[:200], str(entry.get("artifactType", ""))[:200],
                        size if isinstance(size, int) and not isinstance(size, bool) else 0)
        try:
            self._open(a, subject)
        except (RegistryError, ValueError, StatementError, KeyError, TypeError) as exc:
            a.problems.append(str(exc))
        return a

    def _open(self, a: Attestation, subject: str) -> None:
        got = self.registry.manifest(self.repo, a.digest)
        if got is None or sha256_digest(got.raw) != a.digest:
            raise ValueError("its manifest is missing or does not match its digest")
        doc = manifest_document(got.raw, a.digest)
        a.artifact_type = str(doc.get("artifactType", a.artifact_type))[:200]
        said = doc.get("subject")
        said_digest = said.get("digest") if isinstance(said, dict) else None
        if said_digest != subject:
            a.problems.append(f"its subject is {str(said_digest)[:80]}, not the image {subject}")
        layer = next((x for x in descriptors(doc, "layers") if x.get("mediaType") == signing.DSSE_MEDIA_TYPE), None)
        if layer is None:
            return  # another tool's artifact: listed, not judged
        self._open_envelope(a, layer, subject)

    def _open_envelope(self, a: Attestation, layer: Mapping[str, Any], subject: str) -> None:
        """Fetch a DSSE layer, check its signatures, payload type and statement against the image digest."""
        a.layer, a.layer_size = str(layer["digest"]), int(layer.get("size") or 0)
        if not DIGEST.fullmatch(a.layer):
            raise ValueError(f"its layer digest {a.layer[:80]!r} is not a sha256 digest")
        opened = signing.open_envelope(self.registry.blob(self.repo, a.layer), self.keys)
        a.signatures, a.signed_by, a.payload = opened.signatures, opened.signed_by, opened.payload
        if opened.payload_type != attestation.PAYLOAD_TYPE:
            a.problems.append(f"its payloadType is {opened.payload_type!r}, not {attestation.PAYLOAD_TYPE}")
        a.statement = attestation.parse_statement(opened.payload)
        a.predicate_type = a.statement.predicate_type
        a.kind = KINDS.get(a.predicate_type, "other")
        a.problems += self._statement_problems(a, a.statement, subject)

    def _statement_problems(self, a: Attestation, st: Statement, subject: str) -> list[str]:
        out = [] if st.subject_digest == subject else [f"its statement is about {st.subject_digest}, not the image {subject}"]
        if self.keys and not a.signed_by:
            out.append(f"{'not signed' if not a.signatures else 'its signature does not verify'} with the given key")
        if a.kind == "verification":
            out += attestation.predicate_problems(st.predicate) + verdict_problems(st.predicate)
        return out

    def _signatures(self, found: Evidence) -> None:
        sig = self.registry.manifest(self.repo, signature_tag(found.digest))
        if sig is None:
            return
        found.signature_manifest = sig.digest
        for layer in manifest_layers(sig.raw):
            if layer.get("mediaType") == signing.SIMPLE_SIGNING_MEDIA_TYPE:
                found.signatures.append(self._signature(layer, found.digest))

    def _cosign_attestations(self, found: Evidence) -> None:
        att = self.registry.manifest(self.repo, attestation_tag(found.digest))
        if att is None:
            return
        found.cosign_manifest = att.digest
        found.cosign = [self._cosign_layer(x, found.digest) for x in manifest_layers(att.raw)
                        if x.get("mediaType") == signing.DSSE_MEDIA_TYPE]

    def _cosign_layer(self, layer: Mapping[str, Any], subject: str) -> Attestation:
        """One ``.att`` layer, checked as cosign checks it, plus its annotations against its statement."""
        size = layer.get("size")
        a = Attestation(str(layer.get("digest", "")), signing.DSSE_MEDIA_TYPE, size if isinstance(size, int) else 0)
        found = layer.get("annotations")
        annotations: Mapping[str, Any] = found if isinstance(found, dict) else {}
        if signing.SIGNATURE_ANNOTATION not in annotations:
            a.problems.append(f"it has no {signing.SIGNATURE_ANNOTATION} annotation (cosign refuses such a layer)")
        try:
            self._open_envelope(a, layer, subject)
        except (RegistryError, ValueError, StatementError, KeyError, TypeError) as exc:
            a.problems.append(str(exc))
        claimed = annotations.get(COSIGN_PREDICATE_ANNOTATION)
        if claimed is not None and a.statement is not None and claimed != a.predicate_type:
            a.problems.append(f"its predicateType annotation is {claimed}, its statement's {a.predicate_type}")
        return a

    def _signature(self, layer: Mapping[str, Any], digest: str) -> ImageSignature:
        s = ImageSignature(str(layer.get("digest")), int(layer.get("size") or 0), "", "")
        try:
            s.payload = self.registry.blob(self.repo, s.layer)
            s.claims, s.identity = signing.simple_signing_digest(s.payload)
        except (RegistryError, ValueError) as exc:
            s.problems.append(str(exc))
            return s
        if s.claims != digest:
            s.problems.append(f"it signs {s.claims}, not the image {digest}")
        raw = signing.decode_signature(str((layer.get("annotations") or {}).get(signing.SIGNATURE_ANNOTATION, "")))
        s.signed_by = tuple(signing.signed_by(self.keys, s.payload, raw))
        if self.keys and not s.signed_by:
            s.problems.append("it does not verify with the given key")
        return s


# =====================================================================  attaching evidence


@dataclass
class Attached:
    """What one digest got: each artifact with its own digest, pushed or found unchanged."""

    subject: str
    name: str
    discovery: str
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    pushed_bytes: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"subject": self.subject, "name": self.name, "discovery": self.discovery, "artifacts": self.artifacts,
                "pushed_bytes": self.pushed_bytes, "seconds": round(self.seconds, 2),
                "pushed": sum(a["status"] == "pushed" for a in self.artifacts)}


class Attacher:
    """Attaches documents and a signature to one digest of ``repo``; ``key`` None: unsigned."""

    def __init__(self, registry: RegistryProtocol, repo: str, key: signing.Key | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.registry, self.repo, self.key, self.clock = registry, repo, key, clock
        self.name = f"{registry.host}/{repo}"

    def attach(self, digest: str, documents: Sequence[Document]) -> Attached:
        t0 = self.clock()
        have = Reader(self.registry, self.repo, [self.key.public] if self.key else []).read(digest)
        done = Attached(digest, self.name, have.discovery)
        subject = {"mediaType": have.media_type, "digest": have.digest, "size": have.size}
        new_entries = [entry for doc in documents if (entry := self._document(doc, have, subject, done)) is not None]
        if new_entries:
            self._index(digest, new_entries, done)
        if self.key is not None:
            self._cosign_attestations(digest, done)
            self._sign(digest, have, done)
        done.seconds = self.clock() - t0
        return done

    # -- attestations ------------------------------------------------------------------
    def _document(self, doc: Document, have: Evidence, subject: Mapping[str, Any], done: Attached) -> dict[str, Any] | None:
        """Push ``doc`` unless an equivalent one, trusted as this run would sign it, is there;
        the index entry to add when the registry did not index it itself."""
        for a in have.of_kind(doc.kind):
            if a.statement and not a.problems and self._trusted(a) and doc.same_as(a.statement, a.payload):
                done.artifacts.append(self._record(doc.kind, a.digest, a.size, (a.layer, a.layer_size), "unchanged", bool(a.signed_by)))
                return None
        envelope = signing.envelope(doc.statement, attestation.PAYLOAD_TYPE, self.key)
        layer = descriptor(signing.DSSE_MEDIA_TYPE, envelope)
        annotations = {PREDICATE_ANNOTATION: doc.predicate_type, CREATED_ANNOTATION: doc.created}
        manifest = artifact_manifest(ARTIFACT_TYPES[doc.kind], layer, subject, {k: v for k, v in annotations.items() if v})
        done.pushed_bytes += self._blob(EMPTY) + self._blob(envelope) + len(manifest)
        pushed = self.registry.push_manifest(self.repo, sha256_digest(manifest), OCI_MANIFEST, manifest)
        done.artifacts.append(self._record(doc.kind, pushed.digest, len(manifest), (layer["digest"], len(envelope)), "pushed",
                                           self.key is not None))
        if pushed.subject:
            done.discovery = "referrers API"
            return None
        return index_entry(manifest)

    def _trusted(self, a: Attestation) -> bool:
        return bool(a.signed_by) if self.key is not None else True

    def _blob(self, data: bytes) -> int:
        _, sent = self.registry.push_blob(self.repo, data)
        return len(data) if sent else 0

    def _record(self, kind: str, digest: str, size: int, layer: tuple[str, int], status: str, signed: bool) -> dict[str, Any]:
        return {"kind": kind, "artifactType": ARTIFACT_TYPES.get(kind, kind), "digest": digest, "size": size,
                "layer": layer[0], "layer_size": layer[1], "status": status, "signed": signed}

    def _index(self, digest: str, entries: list[dict[str, Any]], done: Attached) -> None:
        """Referrers tag schema: read the index again, add what is missing, write it back."""
        tag = referrers_tag(digest)
        current = self.registry.manifest(self.repo, tag)
        old = descriptors(manifest_document(current.raw, tag), "manifests") if current else []
        known = {m.get("digest") for m in old}
        index = referrers_index(old + [e for e in entries if e["digest"] not in known])
        pushed = self.registry.push_manifest(self.repo, tag, OCI_INDEX, index)
        done.pushed_bytes += len(index)
        done.discovery = f"referrers tag {tag}"
        done.artifacts.append({"kind": "referrers-index", "artifactType": OCI_INDEX, "digest": pushed.digest,
                               "size": len(index), "tag": tag, "status": "pushed", "signed": False})

    # -- cosign's `.att` ----------------------------------------------------------------------
    def _cosign_attestations(self, digest: str, done: Attached) -> None:
        """Read-modify-write of ``sha256-<hex>.att``: a layer for each signed envelope it does not list yet
        (the referrer artifacts' blobs, so nothing is uploaded twice); every other layer stays as it was."""
        tag = attestation_tag(digest)
        current = self.registry.manifest(self.repo, tag)
        layers = manifest_layers(current.raw) if current else []
        listed = {layer.get("digest") for layer in layers}
        wanted = [a for a in done.artifacts if a["kind"] in ARTIFACT_TYPES and a["signed"] and a["layer"] not in listed]
        new = [cosign_attestation_layer(a["layer"], a["layer_size"], PREDICATES[a["kind"]]) for a in wanted]
        record = {"kind": "cosign-attestations", "artifactType": OCI_MANIFEST, "tag": tag, "signed": True}
        if not new:
            if current is not None:
                done.artifacts.append(record | {"digest": current.digest, "layers": len(layers), "status": "unchanged"})
            return
        manifest, config = cosign_attestation_manifest(layers + new)
        done.pushed_bytes += self._blob(config) + len(manifest)
        pushed = self.registry.push_manifest(self.repo, tag, OCI_MANIFEST, manifest)
        done.artifacts.append(record | {"digest": pushed.digest, "size": len(manifest), "layers": len(layers) + len(new),
                                        "added": [layer["digest"] for layer in new], "status": "pushed"})

    # -- the image signature --------------------------------------------------------------
    def _sign(self, digest: str, have: Evidence, done: Attached) -> None:
        assert self.key is not None
        payload = signing.simple_signing_payload(self.name, digest)
        tag = signature_tag(digest)
        if any(s.payload == payload and s.signed_by and not s.problems for s in have.signatures):
            done.artifacts.append({"kind": "signature", "artifactType": signing.SIMPLE_SIGNING_MEDIA_TYPE,
                                   "digest": have.signature_manifest, "tag": tag, "status": "unchanged", "signed": True})
            return
        current = self.registry.manifest(self.repo, tag)
        layers = manifest_layers(current.raw) if current else []
        layers.append(descriptor(signing.SIMPLE_SIGNING_MEDIA_TYPE, payload,
                                 annotations={signing.SIGNATURE_ANNOTATION: signing.sign(self.key, payload)}))
        manifest, config = signature_manifest(layers)
        done.pushed_bytes += self._blob(payload) + self._blob(config) + len(manifest)
        pushed = self.registry.push_manifest(self.repo, tag, OCI_MANIFEST, manifest)
        done.artifacts.append({"kind": "signature", "artifactType": signing.SIMPLE_SIGNING_MEDIA_TYPE, "digest": pushed.digest,
                               "tag": tag, "size": len(manifest), "layer": layers[-1]["digest"], "status": "pushed", "signed": True})


# =====================================================================  the release step


class InventoryRunner(Protocol):
    def __call__(self, image_id: str) -> Mapping[str, Any]: ...


class VulnerabilityResult(Protocol):
    @property
    def findings(self) -> Sequence[Any]: ...  # imagesmith.model.vulns.Finding

    @property
    def snapshots(self) -> Sequence[Mapping[str, Any]]: ...

    @property
    def matched_at(self) -> dt.datetime: ...

    def predicate(self) -> dict[str, Any]: ...


class VulnerabilityCheck(Protocol):
    """An SBOM (CycloneDX JSON) -> its known vulnerabilities (imagesmith.stages.evidence.vulngate.Gate)."""

    def __call__(self, bom: Mapping[str, Any]) -> VulnerabilityResult: ...


@dataclass(frozen=True)
class Subject:
    """A released image as the evidence step sees it."""

    target: str
    digest: str
    image_id: str
    base_image: str
    created: str
    versions: Mapping[str, str]
    report: VerifyReport | None  # its verify report


class ReleaseEvidence:
    """What ``publish`` calls for every digest it released: the inventory (``inventory``: image ID -> what was
    measured inside the image), both documents built, attached."""

    def __init__(self, registry: RegistryProtocol, repo: str, key: signing.Key | None, inventory: InventoryRunner,
                 out_dir: Path, vulnerabilities: VulnerabilityCheck | None = None) -> None:
        self.attacher = Attacher(registry, repo, key)
        self.inventory, self.out, self.vulnerabilities = inventory, out_dir, vulnerabilities

    def __call__(self, subject: Subject) -> dict[str, Any]:
        t0 = time.monotonic()
        inv = sbom.inventory_from(self._inventory(subject))
        measured = time.monotonic() - t0
        identity = sbom.ImageIdentity(self.attacher.name, subject.digest, subject.image_id, subject.base_image,
                                      subject.created, subject.versions)
        bom = sbom.build_bom(inv, identity)
        docs = [sbom_document(self.attacher.name, subject.digest, bom, subject.created)]
        report = subject.report
        if self.vulnerabilities is not None:
            found = self.vulnerabilities(json.loads(bom))
            docs.append(vex_document(self.attacher.name, subject.digest, vex.document(
                self.attacher.name, subject.digest, found.findings, found.snapshots, found.matched_at), found.matched_at.isoformat()))
            report = None if report is None else report.amended(vulnerabilities=found.predicate())
        if report is not None:
            docs.append(verification_document(self.attacher.name, subject.digest, report))
        return self.attacher.attach(subject.digest, docs).to_json() | {"inventory_seconds": round(measured, 2)}

    def _inventory(self, subject: Subject) -> Mapping[str, Any]:
        """From ``inventory`` only (publish passes what the verifier signed, or a measurement in its own engine):
        never from a file in OUT, which another job may have written."""
        return self.inventory(subject.image_id)


INVENTORY_FILE = "inventory.json"


def cached_inventory(path: Path, image_id: str, measure: InventoryRunner) -> dict[str, Any]:
    """The image's inventory from ``path`` when it was measured for this image ID, else measured now and kept there."""
    cached = loader.read_cache(path)
    if cached.get("image_id") != image_id or not isinstance(cached.get("inventory"), dict):
        cached = {"image_id": image_id, "inventory": dict(measure(image_id))}
        write_text(path, json.dumps(cached, indent=1, sort_keys=True) + "\n")
    return dict(cached["inventory"])


# =====================================================================  for the CLI


@dataclass(frozen=True)
class Location:
    host: str
    repo: str
    ref: str  # a tag or a digest


def locate(ref: ImageRef) -> Location:
    """``host[:port]/repo[:tag|@sha256:...]`` -> its parts; a reference without a registry host is a UserError."""
    if not ref.host:
        raise UserError(f"{ref}: evidence is read from a registry named in the reference (Docker Hub is not supported); name it, e.g. harbor.example.com/ml/pytorch-cuda:v2.9 or 127.0.0.1:5000/imagesmith/local:latest")
    return Location(ref.host, ref.repository, ref.digest or ref.tag or "latest")


def read(reference: ImageRef, keys: Sequence[SSlibKey], store: CredentialStore | None = None,
         ca_file: Path | None = None) -> Evidence:
    """The evidence attached to what ``reference`` names (the operator names it: its host gets the store's
    login for that host), checked against ``keys``."""
    from imagesmith.edges.runcontext import RunContext

    where, context = locate(reference), RunContext(store or CredentialStore())
    client = context.registry(where.host, context.store.for_host(where.host), ca_file=ca_file)
    return Reader(client, where.repo, keys).read(where.ref)


__all__ = [  # the names of imagesmith.stages.evidence.referrers a caller of the evidence may take from here
    "DIGEST",
    "SBOM_ARTIFACT",
    "VERIFICATION_ARTIFACT",
    "VEX_ARTIFACT",
    "artifact_manifest",
    "attestation_tag",
    "cosign_attestation_layer",
    "cosign_attestation_manifest",
    "descriptor",
    "index_entry",
    "manifest_layers",
    "ran_on",
    "ran_where",
    "referrers_index",
    "referrers_tag",
    "signature_manifest",
    "signature_tag",
    "verdict_problems",
    "verification_identity",
    "vex_document",
]
