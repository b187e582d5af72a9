"""The documents evidence is made of, as bytes a registry stores (pure): the SBOM, verification and vulnerability
documents, OCI artifact manifests whose subject is the image, the referrers tag schema's index, and cosign's
signature and attestation manifests (written as Go writes them, so cosign reads them back)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from imagesmith.edges import signing
from imagesmith.edges.registry import OCI_INDEX, OCI_MANIFEST, manifest_document, sha256_digest
from imagesmith.edges.registry import entries as descriptors
from imagesmith.errors import RegistryError
from imagesmith.model import policy
from imagesmith.model.verifyreport import VerifyReport
from imagesmith.stages.evidence import attestation
from imagesmith.stages.evidence.attestation import Statement

SBOM_ARTIFACT = "application/vnd.imagesmith.sbom.v1+json"


VERIFICATION_ARTIFACT = "application/vnd.imagesmith.verification.v1+json"


VEX_ARTIFACT = "application/vnd.imagesmith.vulnerabilities.v1+json"  # CycloneDX VEX: the known vulnerabilities matched


KINDS = {attestation.SBOM_PREDICATE: "sbom", attestation.VERIFICATION_PREDICATE: "verification",
         attestation.VEX_PREDICATE: "vulnerabilities"}


PREDICATES = {kind: uri for uri, kind in KINDS.items()}


ARTIFACT_TYPES = {"sbom": SBOM_ARTIFACT, "verification": VERIFICATION_ARTIFACT, "vulnerabilities": VEX_ARTIFACT}


PREDICATE_ANNOTATION = "in-toto.io/predicate-type"


CREATED_ANNOTATION = "org.opencontainers.image.created"


EMPTY_CONFIG = {"mediaType": "application/vnd.oci.empty.v1+json", "data": "e30="}


EMPTY = b"{}"


OCI_CONFIG = "application/vnd.oci.image.config.v1+json"


COSIGN_PREDICATE_ANNOTATION = "predicateType"  # cosign attest's layer annotation


GO_ZERO_TIME = "0001-01-01T00:00:00Z"  # how Go writes an unset time.Time


DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def referrers_tag(digest: str) -> str:
    """The referrers tag schema's tag for ``digest``: ``sha256-<hex>``."""
    return digest.replace(":", "-", 1)[:128]


def signature_tag(digest: str) -> str:
    """cosign's (and containers/image's) signature tag: ``sha256-<hex>.sig``."""
    return digest.replace(":", "-", 1) + ".sig"


def attestation_tag(digest: str) -> str:
    """cosign's attestation tag: ``sha256-<hex>.att`` (pkg/oci/remote/remote.go ``AttestationTag``)."""
    return digest.replace(":", "-", 1) + ".att"


@dataclass(frozen=True)
class Document:
    """One attestation to attach: its kind, statement bytes and what makes two equivalent."""

    kind: str  # sbom | verification
    statement: bytes
    created: str  # the artifact's org.opencontainers.image.created

    @property
    def predicate_type(self) -> str:
        return PREDICATES[self.kind]

    def same_as(self, st: Statement, payload: bytes) -> bool:
        if self.kind == "sbom":
            return payload == self.statement
        if self.kind == "vulnerabilities":
            return vex_identity(attestation.parse_statement(self.statement).predicate) == vex_identity(st.predicate)
        mine = attestation.parse_statement(self.statement).predicate
        return verification_identity(mine) == verification_identity(st.predicate)


def verdict_problems(predicate: Mapping[str, Any]) -> list[str]:
    """A verification whose ``passed`` is not what its own checks say (judged again under the shipped registry)."""
    from imagesmith.stages.verify.verify import declared_checks

    judged = policy.predicate_verdict(predicate, declared_checks())
    if predicate.get("passed") is True and not judged.ok:
        return [f"it says passed, but {judged.why}"]
    return []


def verification_identity(predicate: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes two verifications of one digest the same evidence: tier, mode, GPU model
    and count, verdict, where it ran (natively or emulated): a re-run on the same kind of machine adds nothing."""
    gpu = predicate.get("gpu") or {}
    return (predicate.get("tier"), predicate.get("mode"), gpu.get("model"), gpu.get("count"), predicate.get("passed"),
            ran_on(predicate))


def ran_on(predicate: Mapping[str, Any]) -> tuple[str | None, bool | None]:
    """(the image's platform, whether it ran emulated) as a verification predicate states them; (None, None) for a
    statement written before imagesmith recorded them (its mode still says whether a GPU ran: emulation is CPU mode)."""
    raw = predicate.get("platform")
    if not isinstance(raw, Mapping) or not isinstance(raw.get("emulated"), bool):
        return None, None
    image = raw.get("image")
    return (image if isinstance(image, str) else None), bool(raw["emulated"])


def ran_where(predicate: Mapping[str, Any]) -> str:
    """In words: 'linux/arm64, emulated on a linux/amd64 host (qemu-user through binfmt_misc)', 'linux/amd64, native',
    or 'platform not recorded' (a statement written before imagesmith recorded it)."""
    image, emulated = ran_on(predicate)
    if emulated is None:
        return "platform not recorded"
    raw = predicate["platform"]
    host, by = raw.get("host"), raw.get("emulator")
    if emulated:
        return f"{image or 'an unknown platform'}, emulated on a {host or 'host of another platform'} host" + (f" ({by})" if by else "")
    return f"{image or 'an unknown platform'}, native"


def vex_identity(doc: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes two vulnerability documents of one digest the same evidence: the snapshots
    matched and each vulnerability with its analysis (a re-run on the same snapshots adds nothing)."""
    meta: Any = doc.get("metadata")
    props = sorted(str(p.get("value")) for p in _list(meta.get("properties") if isinstance(meta, Mapping) else None) if isinstance(p, Mapping))
    entries = _list(doc.get("vulnerabilities"))
    found = sorted((str(v.get("bom-ref")), str((v.get("analysis") or {}).get("detail"))) for v in entries if isinstance(v, Mapping))
    return tuple(props), tuple(found)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def vex_document(name: str, digest: str, vex: bytes, created: str) -> Document:
    st = Statement(name, digest, attestation.VEX_PREDICATE, json.loads(vex))
    return Document("vulnerabilities", attestation.statement_bytes(st), created)


def sbom_document(name: str, digest: str, bom: bytes, created: str) -> Document:
    st = Statement(name, digest, attestation.SBOM_PREDICATE, json.loads(bom))
    return Document("sbom", attestation.statement_bytes(st), created)


def verification_document(name: str, digest: str, report: VerifyReport) -> Document:
    from imagesmith.stages.verify.verify import declared_checks

    predicate = attestation.verification_predicate(report, declared_checks())
    problems = attestation.predicate_problems(predicate)
    if problems:  # a bug, not bad input: the builder makes what the schema describes
        raise ValueError("verification predicate breaks its schema: " + "; ".join(problems[:3]))
    st = Statement(name, digest, attestation.VERIFICATION_PREDICATE, predicate)
    return Document("verification", attestation.statement_bytes(st), str(predicate.get("started_at") or ""))


def _json(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def descriptor(media_type: str, data: bytes, **extra: Any) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": sha256_digest(data), "size": len(data), **{k: v for k, v in extra.items() if v}}


def artifact_manifest(artifact_type: str, layer: Mapping[str, Any], subject: Mapping[str, Any],
                      annotations: Mapping[str, str]) -> bytes:
    """An OCI image manifest used for an artifact (image-spec 1.1): empty config, one layer, a subject."""
    config = {**EMPTY_CONFIG, "digest": sha256_digest(EMPTY), "size": len(EMPTY)}
    return _json({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": artifact_type, "config": config,
                  "layers": [dict(layer)], "subject": dict(subject), "annotations": dict(annotations)})


def index_entry(manifest: bytes) -> dict[str, Any]:
    """The referrers-index descriptor of an artifact manifest (artifactType and annotations copied)."""
    doc = json.loads(manifest)
    return descriptor(OCI_MANIFEST, manifest, artifactType=doc.get("artifactType"), annotations=doc.get("annotations"))


def referrers_index(entries: Sequence[Mapping[str, Any]]) -> bytes:
    return _json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [dict(e) for e in entries]})


def signature_manifest(layers: Sequence[Mapping[str, Any]]) -> tuple[bytes, bytes]:
    """The ``.sig`` manifest and its config, as containers/image writes them (config lists the layers as diff_ids)."""
    config = _json({"architecture": "", "os": "", "config": {},
                    "rootfs": {"type": "layers", "diff_ids": [layer["digest"] for layer in layers]}})
    manifest = _json({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": descriptor(OCI_CONFIG, config),
                      "layers": [dict(layer) for layer in layers]})
    return manifest, config


def manifest_layers(raw: bytes) -> list[dict[str, Any]]:
    """The layer descriptors of a manifest; none when it is not one."""
    try:
        return descriptors(manifest_document(raw, "the manifest"), "layers")
    except RegistryError:
        return []


def _go_json(doc: Any) -> bytes:
    """JSON as Go's encoding/json writes these documents: struct field order, no spaces, sorted map keys."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def _go_descriptor(layer: Mapping[str, Any]) -> dict[str, Any]:
    first = {k: layer[k] for k in ("mediaType", "size", "digest", "data", "urls") if k in layer}
    annotations = layer.get("annotations")
    rest = {k: v for k, v in layer.items() if k not in first and k != "annotations"}
    return first | ({"annotations": dict(sorted(annotations.items()))} if isinstance(annotations, dict) else {}) | rest


def cosign_attestation_layer(envelope_digest: str, size: int, predicate_type: str) -> dict[str, Any]:
    """One ``.att`` layer: a DSSE envelope already in the repository (the referrer artifact's blob)."""
    return {"mediaType": signing.DSSE_MEDIA_TYPE, "size": size, "digest": envelope_digest,
            "annotations": {signing.SIGNATURE_ANNOTATION: "", COSIGN_PREDICATE_ANNOTATION: predicate_type}}


def cosign_attestation_manifest(layers: Sequence[Mapping[str, Any]]) -> tuple[bytes, bytes]:
    """The ``.att`` manifest and its config, byte for byte as cosign writes them for these layers."""
    config = _go_json({"architecture": "", "created": GO_ZERO_TIME, "history": [{"created": GO_ZERO_TIME}] * len(layers),
                       "os": "", "rootfs": {"type": "layers", "diff_ids": [layer["digest"] for layer in layers]},
                       "config": {}})
    manifest = _go_json({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                         "config": {"mediaType": OCI_CONFIG, "size": len(config), "digest": sha256_digest(config)},
                         "layers": [_go_descriptor(layer) for layer in layers]})
    return manifest, config
