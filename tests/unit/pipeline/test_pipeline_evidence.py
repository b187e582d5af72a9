"""pipeline.attached_evidence: the decision to reuse a signed verification instead of running again (verify IMAGE
--reuse-evidence), with the registry read and the host's GPUs as doubles."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from imagesmith import pipeline
from imagesmith.edges.credentials import CredentialStore
from imagesmith.errors import UserError
from imagesmith.model.matrix import load
from imagesmith.model.ref import ImageRef
from imagesmith.stages.evidence import evidence
from imagesmith.stages.verify import verify
from tests.unit.stages.release.test_release_vulnerabilities import signed_verification

REF = "reg.test/ml/pytorch@sha256:" + "ab" * 32


def found_with(a: evidence.Attestation) -> evidence.Evidence:
    return evidence.Evidence("reg.test/ml/pytorch", "sha256:" + "ab" * 32, "m", 1, "referrers API", ("k1",), [a])


def reader(found: evidence.Evidence | None) -> Any:
    def read(image: ImageRef, keys: Sequence[Any], store: CredentialStore) -> evidence.Evidence:
        if found is None:
            raise UserError("reg.test: 401 Unauthorized")
        return found
    return read


def cpu(gpus: str) -> tuple[str | None, int]:
    return None, 0


def attached(reuse: bool, found: evidence.Evidence | None, image: str = REF, tier: str = "quick",
             keys: Sequence[Path] = ()) -> pipeline.AttachedEvidence:
    return pipeline.attached_evidence(ImageRef.parse(image), keys, CredentialStore(), verify.VerifyOptions(tier=tier), reuse,
                                      read=reader(found), gpus=cpu)


def test_a_signed_passed_verification_of_this_tier_is_reused() -> None:
    a = signed_verification({"matched_at": "2026-11-25T12:00:00+00:00"})
    done = attached(True, found_with(a))
    assert done.match is a and done.why_not == () and done.gpu_model is None
    assert done.reused is not None and done.reused.to_json()["reused"]["attestation"] == a.digest
    assert done.reused.to_json()["image"]["ref"] == REF


def test_another_tier_is_not_reused_and_says_why() -> None:
    done = attached(True, found_with(signed_verification(None)), tier="standard")
    assert done.reused is None and done.found is not None
    assert len(done.why_not) == 1 and "standard" in done.why_not[0], done.why_not


def test_without_reuse_the_evidence_is_only_read() -> None:
    found = found_with(signed_verification(None))
    assert attached(False, found) == pipeline.AttachedEvidence(found)


def test_a_registry_that_refuses_gives_a_note_and_docker_hub_is_not_asked() -> None:
    assert attached(True, None) == pipeline.AttachedEvidence(note="no evidence read from the registry (reg.test: 401 Unauthorized)")
    # Docker Hub: not read at all, so a key that does not exist is never opened
    assert attached(True, None, image="pytorch/pytorch:latest", keys=[Path("/nonexistent.pub")]) == pipeline.AttachedEvidence()


def test_render_and_validate_are_pipeline_sequences(tmp_path: Path) -> None:
    """render writes one context per target and --check reports drift; validate renders in memory only."""
    m = load(Path("examples/multiarch.yaml"))
    assert len(pipeline.validate(m, "20261201").targets) == 2 and not (tmp_path / "out").exists()
    assert pipeline.render(m, "20261201", tmp_path / "out") == pipeline.Rendered(2)
    assert pipeline.render(m, "20261201", tmp_path / "out", check=True) == pipeline.Rendered(2)
    (tmp_path / "out" / "2.9.1-cu128-py3.12-debian12-base" / "stray").write_text("x")
    drift = pipeline.render(m, "20261201", tmp_path / "out", check=True).drift
    assert len(drift) == 1 and drift[0].endswith("stray: not rendered by imagesmith (an extra file in the build context)")
