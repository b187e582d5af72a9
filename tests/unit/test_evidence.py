"""The evidence stage's pure parts: OCI artifact and index documents, the
cosign .sig manifest, what counts as the same verification, reuse, references."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from imagesmith import evidence
from imagesmith.attestation import Statement
from imagesmith.errors import UserError

IMAGE = {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + "ab" * 32, "size": 1234}


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_an_artifact_manifest_follows_image_spec_1_1() -> None:
    layer = evidence.descriptor("application/vnd.dsse.envelope.v1+json", b'{"payload":""}')
    raw = evidence.artifact_manifest(evidence.SBOM_ARTIFACT, layer, IMAGE, {"in-toto.io/predicate-type": "https://cyclonedx.org/bom"})
    doc = json.loads(raw)
    assert doc == {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                   "artifactType": "application/vnd.imagesmith.sbom.v1+json",
                   "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": sha(b"{}"), "size": 2, "data": "e30="},
                   "layers": [{"mediaType": "application/vnd.dsse.envelope.v1+json", "digest": sha(b'{"payload":""}'), "size": 14}],
                   "subject": IMAGE, "annotations": {"in-toto.io/predicate-type": "https://cyclonedx.org/bom"}}
    entry = evidence.index_entry(raw)
    assert entry == {"mediaType": doc["mediaType"], "digest": sha(raw), "size": len(raw), "artifactType": doc["artifactType"],
                     "annotations": doc["annotations"]}
    index = json.loads(evidence.referrers_index([entry]))
    assert index == {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [entry]}


def test_the_signature_manifest_is_what_containers_image_writes() -> None:
    layer = evidence.descriptor("application/vnd.dev.cosign.simplesigning.v1+json", b"payload",
                                annotations={"dev.cosignproject.cosign/signature": "MEUC"})
    manifest, config = evidence.signature_manifest([layer])
    assert json.loads(config) == {"architecture": "", "os": "", "config": {}, "rootfs": {"type": "layers", "diff_ids": [sha(b"payload")]}}
    doc = json.loads(manifest)
    assert doc["config"] == {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha(config), "size": len(config)}
    assert doc["layers"] == [layer] and "subject" not in doc


@pytest.mark.parametrize("digest, referrers, signature, attestations", [
    ("sha256:" + "ab" * 32, "sha256-" + "ab" * 32, "sha256-" + "ab" * 32 + ".sig", "sha256-" + "ab" * 32 + ".att"),
])
def test_tags(digest: str, referrers: str, signature: str, attestations: str) -> None:
    assert (evidence.referrers_tag(digest), evidence.signature_tag(digest), evidence.attestation_tag(digest)) \
        == (referrers, signature, attestations)


def predicate(**changes: Any) -> dict[str, Any]:
    p = {"tier": "quick", "mode": "gpu", "passed": True, "gpu": {"model": "NVIDIA H200", "count": 1}, "started_at": "t1",
         "checks": [{"id": "versions.torch", "status": "pass", "optional": False}]}
    return p | changes


@pytest.mark.parametrize("other, same", [
    (predicate(started_at="t2"), True),
    (predicate(tier="standard"), False),
    (predicate(gpu={"model": "NVIDIA H200", "count": 2}), False),
    (predicate(gpu={"model": "NVIDIA A100", "count": 1}), False),
    (predicate(passed=False), False),
    (predicate(mode="cpu", gpu=None), False),
])
def test_what_counts_as_the_same_verification(other: dict[str, Any], same: bool) -> None:
    assert (evidence.verification_identity(predicate()) == evidence.verification_identity(other)) is same


def found(*attestations: evidence.Attestation) -> evidence.Evidence:
    return evidence.Evidence("h/r", "sha256:" + "ab" * 32, "m", 1, "referrers API", ("k1",), list(attestations))


def verification(signed: bool = True, problems: tuple[str, ...] = (), **changes: Any) -> evidence.Attestation:
    st = Statement("h/r", "sha256:" + "ab" * 32, "https://imagesmith.dev/attestations/verification/v1", predicate(**changes))
    return evidence.Attestation("sha256:" + "cd" * 32, evidence.VERIFICATION_ARTIFACT, 10, "verification",
                                signed_by=("k1",) if signed else (), statement=st, problems=list(problems))


@pytest.mark.parametrize("attestation, tier, model, count, reused", [
    (verification(), "quick", "NVIDIA H200", 1, True),
    (verification(), "standard", "NVIDIA H200", 1, False),
    (verification(), "quick", "NVIDIA A100", 1, False),
    (verification(), "quick", "NVIDIA H200", 2, False),
    (verification(signed=False), "quick", "NVIDIA H200", 1, False),
    (verification(problems=("its subject is another digest",)), "quick", "NVIDIA H200", 1, False),
    (verification(passed=False), "quick", "NVIDIA H200", 1, False),
    (verification(mode="cpu", gpu=None), "quick", None, 0, True),
    (verification(mode="cpu", gpu=None), "quick", "NVIDIA H200", 1, False),
])
def test_reuse_needs_a_signed_passed_verification_of_this_tier_and_gpu(attestation: evidence.Attestation, tier: str,
                                                                       model: str | None, count: int, reused: bool) -> None:
    assert (evidence.reusable(found(attestation), tier, model, count) is attestation) is reused


@pytest.mark.parametrize("reference, expected", [
    ("127.0.0.1:5000/imagesmith/local:latest", ("127.0.0.1:5000", "imagesmith/local", "latest")),
    ("harbor.example.com/ml/pytorch-cuda", ("harbor.example.com", "ml/pytorch-cuda", "latest")),
    ("harbor.example.com/ml/x@sha256:" + "ab" * 32, ("harbor.example.com", "ml/x", "sha256:" + "ab" * 32)),
])
def test_references(reference: str, expected: tuple[str, str, str]) -> None:
    where = evidence.locate(reference)
    assert (where.host, where.repo, where.ref) == expected


def test_a_reference_without_a_registry_is_refused() -> None:
    with pytest.raises(UserError) as err:
        evidence.locate("pytorch/pytorch:latest")
    assert str(err.value) == ("pytorch/pytorch:latest: evidence is read from a registry named in the reference (Docker Hub is "
                              "not supported); name it, e.g. harbor.example.com/ml/pytorch-cuda:v2.9 or 127.0.0.1:5000/imagesmith/local:latest")


COSIGN_ATT = Path(__file__).parent.parent / "fixtures" / "cosign-att"


def test_the_att_manifest_is_byte_for_byte_what_cosign_writes() -> None:
    """cosign's own `.att` (tests/fixtures/cosign-att): the same layer gives the same manifest bytes, and the
    config imagesmith writes is the one cosign's manifest names (digest and size)."""
    served = COSIGN_ATT.joinpath("att-manifest.json").read_bytes()
    assert sha(served) == "sha256:c470d9819fe76d512fa0d79d3a5b289c0d2fb83739530159bd449284b5dc386c"
    manifest, config = evidence.cosign_attestation_manifest(json.loads(served)["layers"])
    assert manifest == served
    assert json.loads(served)["config"] == {"mediaType": "application/vnd.oci.image.config.v1+json", "size": len(config),
                                            "digest": sha(config)}


def test_an_att_manifest_imagesmith_writes_has_cosigns_shape() -> None:
    """What cosign's reader needs (pkg/oci/internal/signature/layer.go, pkg/cosign/verify.go): DSSE layers with the
    signature annotation present and empty, predicateType naming the statement's predicate; one diff_id and one
    history entry per layer in the config; layers kept in order on append."""
    sbom = evidence.cosign_attestation_layer(sha(b"sbom"), 4, "https://cyclonedx.org/bom")
    check = evidence.cosign_attestation_layer(sha(b"check"), 5, "https://imagesmith.dev/attestations/verification/v1")
    manifest, config = evidence.cosign_attestation_manifest([sbom, check])
    doc = json.loads(manifest)
    assert list(doc) == ["schemaVersion", "mediaType", "config", "layers"] and "subject" not in doc
    assert (doc["schemaVersion"], doc["mediaType"]) == (2, "application/vnd.oci.image.manifest.v1+json")
    assert doc["config"] == {"mediaType": "application/vnd.oci.image.config.v1+json", "size": len(config), "digest": sha(config)}
    assert doc["layers"] == [
        {"mediaType": "application/vnd.dsse.envelope.v1+json", "size": 4, "digest": sha(b"sbom"),
         "annotations": {"dev.cosignproject.cosign/signature": "", "predicateType": "https://cyclonedx.org/bom"}},
        {"mediaType": "application/vnd.dsse.envelope.v1+json", "size": 5, "digest": sha(b"check"),
         "annotations": {"dev.cosignproject.cosign/signature": "",
                         "predicateType": "https://imagesmith.dev/attestations/verification/v1"}}]
    assert json.loads(config) == {"architecture": "", "created": "0001-01-01T00:00:00Z",
                                  "history": [{"created": "0001-01-01T00:00:00Z"}] * 2, "os": "",
                                  "rootfs": {"type": "layers", "diff_ids": [sha(b"sbom"), sha(b"check")]}, "config": {}}


@pytest.mark.parametrize("raw, layers", [
    (b'{"layers": [{"digest": "sha256:1"}, "x"]}', [{"digest": "sha256:1"}]),
    (b'{"layers": {}}', []),
    (b"[]", []),
    (b"not json", []),
])
def test_manifest_layers_of_anything(raw: bytes, layers: list[dict[str, Any]]) -> None:
    assert evidence.manifest_layers(raw) == layers
