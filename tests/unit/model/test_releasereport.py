"""The release report as one typed value (imagesmith/model/releasereport.py): the words its tables use, and the parse's
errors, which name the key path (here inside a run report's release part)."""

from __future__ import annotations

from typing import Any

import pytest

from imagesmith.model import releasereport
from imagesmith.model.loader import LoadError
from imagesmith.model.releasereport import verified_how


@pytest.mark.parametrize("verification, words", [
    ({"ok": True, "platform": "linux/amd64", "emulated": None}, "passed (CPU image)"),
    ({"ok": True, "platform": "linux/arm64", "emulated": "linux/arm64 on a linux/amd64 host (qemu-user through binfmt_misc)"},
     "passed (CPU image, emulated linux/arm64)"),
    ({"ok": False, "platform": "linux/arm64", "emulated": "linux/arm64 on a linux/amd64 host"}, "failed"),
])
def test_the_release_tables_say_a_cpu_image_was_verified_emulated(verification: dict[str, Any], words: str) -> None:
    assert verified_how(verification, None) == words


TARGET = {"target": "2.9.1-base", "status": "pushed", "digest": "sha256:" + "a" * 64}


@pytest.mark.parametrize("part, message", [
    ({"targets": [TARGET | {"traffic": {"pushed_bytes": "many"}}]},
     "run-report.json: release.targets[0].traffic.pushed_bytes: expected a number, got 'many'"),
    ({"targets": [TARGET | {"evidence": {"artifacts": ["sbom"]}}]},
     "run-report.json: release.targets[0].evidence.artifacts[0]: expected an object, got text"),
    ({"targets": [], "indexes": [{"tag": "t", "platforms": {"linux/arm64": "sha256:b"}}]},
     "run-report.json: release.indexes[0].platforms: expected an object, got text"),
    ({"targets": [], "trust": {"policy": {"file": "p.yaml", "verifiers": ["gpu-runner"]}}},
     "run-report.json: release.trust.policy.verifiers[0]: expected an object, got text"),
    ({"targets": [], "trust": {"targets": {}}}, "run-report.json: release.trust.policy: expected an object, got null"),
])
def test_a_value_the_parse_does_not_take_is_named_by_its_key_path(part: dict[str, Any], message: str) -> None:
    with pytest.raises(LoadError) as err:
        releasereport.parse({"registry": "r.test", "repository": "ml/pytorch"} | part, "run-report.json", "release")
    assert str(err.value) == message


def test_the_trust_part_is_read_once_and_release_md_names_the_policy_and_each_signer() -> None:
    from imagesmith.report.markdown import release_markdown

    trust = {"policy": {"file": "keys/trust-policy.yaml", "sha256": "f" * 64, "version": 1, "max_age_s": 86400,
                        "verifiers": [{"name": "gpu-runner", "keyid": "0123456789abcdef", "classes": ["*"]}]},
             "targets": {"2.9.1-base": {"verifier": "gpu-runner", "keyid": "0123456789abcdef"}}}
    rel = releasereport.parse({"registry": "r.test", "repository": "ml/pytorch", "date": "20261205",
                               "targets": [TARGET], "trust": trust})
    assert rel.trust == releasereport.ReleaseTrust("keys/trust-policy.yaml", "f" * 64,
                                                   (releasereport.TrustedVerifier("gpu-runner", "0123456789abcdef"),),
                                                   {"2.9.1-base": "gpu-runner"})
    page = release_markdown(rel)
    assert "Verifications believed under trust policy `keys/trust-policy.yaml` (sha256 `ffffffffffff`), verifiers: " \
        "gpu-runner (key `0123456789ab`)." in page
    assert ", signed by gpu-runner |" in page
    assert releasereport.parse({"registry": "r.test", "repository": "ml/pytorch", "trust": None}).trust is None
