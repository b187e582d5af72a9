"""The evidence stage's pure parts: OCI artifact and index documents, the
cosign .sig manifest, what counts as the same verification, reuse, references."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import UserError
from imagesmith.model.ref import ImageRef
from imagesmith.stages.evidence import evidence, reuse
from imagesmith.stages.evidence.attestation import Statement

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


H200 = reuse.Wanted("quick", "NVIDIA H200", 1)
ROOT = {"id": "security.user", "status": "warn", "optional": False, "value": 0}
USER = {"id": "security.user", "status": "pass", "optional": False, "value": 1000}
FAILED = {"id": "versions.torch", "status": "fail", "optional": False, "detail": "torch 2.9.1 is not 9.9.9"}


@pytest.mark.parametrize("attestation, wanted, why", [
    (verification(), H200, None),
    (verification(), dataclasses.replace(H200, tier="standard"), "it ran the quick tier, not standard"),
    (verification(), dataclasses.replace(H200, gpu_model="NVIDIA A100"), "it ran on 1 x NVIDIA H200, this run would use 1 x NVIDIA A100"),
    (verification(), dataclasses.replace(H200, gpu_count=2), "it ran on 1 x NVIDIA H200, this run would use 2 x NVIDIA H200"),
    (verification(passed=False), H200, "it did not pass (judged again from its checks)"),
    (verification(checks=[FAILED]), H200, "it did not pass (judged again from its checks)"),  # passed: true, a required check failed
    (verification(mode="cpu", gpu=None), reuse.Wanted("quick", None), None),
    (verification(mode="cpu", gpu=None), H200, "it ran on CPU mode, this run would use 1 x NVIDIA H200"),
    (verification(mode="cpu", gpu=None), reuse.Wanted("quick", None, require_gpu=True), "--require-gpu: it ran without a GPU"),
    (verification(), dataclasses.replace(H200, narrowed=True), "--only/--skip ask for another set of checks"),
    (verification(measured={"torch": "2.9.1+cu130"}), dataclasses.replace(H200, expect={"torch": "2.9"}), None),
    (verification(measured={"torch": "2.9.1+cu130"}), dataclasses.replace(H200, expect={"torch": "9.9.9"}),
     "--expect torch=9.9.9: it measured 2.9.1+cu130"),
    (verification(measured={"cuda": "13.0"}), dataclasses.replace(H200, expect={"cuda": "cpu"}), "--expect cuda=cpu: it measured 13.0"),
    (verification(), dataclasses.replace(H200, expect={"einops": "0.8"}), "--expect einops=0.8: the attestation does not record einops"),
    (verification(checks=[ROOT]), dataclasses.replace(H200, require_non_root=True),
     "--require-non-root: it did not show a non-root user (security.user)"),
    (verification(checks=[USER]), dataclasses.replace(H200, require_non_root=True), None),
])
def test_reuse_stands_for_a_fresh_run_with_the_same_options(attestation: evidence.Attestation, wanted: reuse.Wanted,
                                                           why: str | None) -> None:
    match, reasons = reuse.reusable(found(attestation), wanted)
    assert (match, reasons) == ((attestation, []) if why is None else (None, [f"{attestation.digest[:19]}: {why}"]))


@pytest.mark.parametrize("attestation", [verification(signed=False), verification(problems=("its subject is another digest",))])
def test_reuse_needs_a_signed_attestation_about_this_digest(attestation: evidence.Attestation) -> None:
    assert reuse.reusable(found(attestation), H200) == (None, [])


def test_a_reused_verification_writes_a_verify_report_with_each_check_and_its_detail() -> None:
    a = verification(checks=[USER | {"detail": "runs as uid 1000 (app)"}], measured={"torch": "2.9.1+cu130"},
                     gpu_verification="GPU-verified on 1 GPU")
    report = reuse.reused_report(found(a), a, "h/r@sha256:" + "ab" * 32).to_json()
    assert report["checks"][0]["detail"] == "runs as uid 1000 (app)" and report["summary"]["ok"] is True
    assert report["state"] == "complete" and report["environment"]["torch"] == "2.9.1+cu130"
    assert report["reused"]["attestation"] == a.digest and report["mode"]["reason"] == "GPU-verified on 1 GPU"


@pytest.mark.parametrize("reference, expected", [
    ("127.0.0.1:5000/imagesmith/local:latest", ("127.0.0.1:5000", "imagesmith/local", "latest")),
    ("harbor.example.com/ml/pytorch-cuda", ("harbor.example.com", "ml/pytorch-cuda", "latest")),
    ("harbor.example.com/ml/x@sha256:" + "ab" * 32, ("harbor.example.com", "ml/x", "sha256:" + "ab" * 32)),
])
def test_references(reference: str, expected: tuple[str, str, str]) -> None:
    where = evidence.locate(ImageRef.parse(reference))
    assert (where.host, where.repo, where.ref) == expected


def test_a_reference_without_a_registry_is_refused() -> None:
    with pytest.raises(UserError) as err:
        evidence.locate(ImageRef.parse("pytorch/pytorch:latest"))
    assert str(err.value) == ("pytorch/pytorch:latest: evidence is read from a registry named in the reference (Docker Hub is "
                              "not supported); name it, e.g. harbor.example.com/ml/pytorch-cuda:v2.9 or 127.0.0.1:5000/imagesmith/local:latest")


COSIGN_ATT = Path(__file__).parent.parent.parent.parent / "fixtures" / "cosign-att"


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


@pytest.mark.parametrize("predicate, problems", [
    ({"passed": True, "checks": [FAILED]}, ["it says passed, but required check failed: versions.torch"]),
    ({"passed": True, "checks": [FAILED | {"optional": True}]}, ["it says passed, but required check failed: versions.torch"]),
    ({"passed": True, "checks": []}, ["it says passed, but the report lists no checks"]),
    ({"passed": True, "checks": [USER]}, []),
    ({"passed": False, "checks": [FAILED]}, []),
])
def test_an_attestation_whose_passed_contradicts_its_checks_is_a_mismatch(predicate: dict[str, Any], problems: list[str]) -> None:
    assert evidence.verdict_problems(predicate) == problems
