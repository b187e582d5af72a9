"""Trust across machines, as three separate CI jobs on this machine (each the imagesmith CLI in its own process,
with only the artifacts the job before it left):

* build (no keys): builds the CPU cell's base and stages it in a real registry (docker-registry);
* verify (the verifier key): verifies the staged digest and signs the result (verify.dsse.json);
* publish (no engine at all, the release key, the trust policy naming the verifier's public key).

A verify.json forged by the build job, a statement signed by a key the policy does not name, and one whose subject
is another digest are each refused (exit 1, the reason named) with nothing tagged, read back from the registry's own
tag list (skopeo); the genuine statement is released, and its SBOM is the inventory the verifier signed, not the
made-up inventory.json a build job left beside it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from imagesmith.edges import signing
from imagesmith.model import verifyreport
from imagesmith.stages.evidence import trust
from tests.integration.conftest import PASSWORD, USER, RegistryServer
from tests.integration.engine_fixtures import LOCAL_SOURCES, MatrixFactory, cli_job, ok
from tests.unit.trustkeys import key_files

pytestmark = [pytest.mark.integration, pytest.mark.registry]

DATE = "20261130"
NO_ENGINE = "unix:///nonexistent/docker.sock"
LAYERS = "layers:\n  base: {toolchain: false}\n"
TAGS = "tags:\n  floating:\n    - \"v{torch_minor}-{layer}\"\n"
BASE = "2.13.0-cpu-py3.11-debian12-base"
FAKE = "made-up-package-from-the-build-job"


def opened(path: Path) -> dict[str, Any]:
    """The statement inside a DSSE envelope (its signature not checked: the test reads what the verifier wrote)."""
    return dict(json.loads(signing.open_envelope(path.read_bytes(), []).payload))


def test_publish_releases_only_what_a_named_verifier_signed_for_that_digest(
        build_matrix: MatrixFactory, plain_registry: RegistryServer, tmp_path: Path) -> None:
    reg = plain_registry
    path = build_matrix(LAYERS, extra=LOCAL_SOURCES + TAGS, registry=reg.host)
    stage, release = f"{reg.host}/ci/staging", build_matrix.repository
    creds = tmp_path / "credentials"
    creds.write_text(f"{USER}:{PASSWORD}\n")
    keys = tmp_path / "keys"
    verifier_key, _ = key_files(keys, "verifier")
    stranger_key, _ = key_files(keys, "stranger")
    release_key, release_pub = key_files(keys, "release")
    policy = keys / "trust-policy.yaml"
    policy.write_text(trust.policy_text([("gpu-runner", "verifier.pub", ["*"])]))

    # The build job: no key at all; its artifact is build/<base>/ (build.json with the staged digest).
    ok(cli_job("build", "--matrix", str(path), "--date", DATE, "--only", BASE, "--stage", stage, "--credentials", str(creds),
           "--out", "build", cwd=tmp_path))
    built = json.loads((tmp_path / "build" / BASE / "build.json").read_text())
    digest = built["staged"]["digest"]

    # The verify job: the verifier key signs its verification of exactly that digest.
    ok(cli_job("verify", "--build-report", f"build/{BASE}/build.json", "--stage", stage, "--gpus", "none", "--tier", "quick",
           "--credentials", str(creds), "--verifier-key", str(verifier_key), cwd=tmp_path))
    statement = tmp_path / "build" / BASE / "verify.dsse.json"
    genuine = opened(statement)
    assert genuine["subject"] == [{"name": stage, "digest": {"sha256": digest.split(":", 1)[1]}}]
    report, inventory = genuine["predicate"]["report"], genuine["predicate"]["inventory"]
    assert report["image"]["digest"] == digest and inventory and report["checks"]

    # A verify job may also sign one image named by digest: the statement lies beside --json, about that digest.
    ok(cli_job("verify", f"{stage}@{digest}", "--gpus", "none", "--tier", "quick", "--credentials", str(creds),
           "--verifier-key", str(verifier_key), "--json", "single/verify.json", "-q", cwd=tmp_path))
    single = trust.read_statement(tmp_path / "single" / "verify.dsse.json", trust.load_policy(policy),
                                  trust.Subject(stage, digest), root=tmp_path / "single")
    assert single.verifier == "gpu-runner" and single.report.to_json()["image"]["digest"] == digest and single.inventory
    assert single.report.to_json() == json.loads((tmp_path / "single" / "verify.json").read_text())

    def publish(folder: str) -> subprocess.CompletedProcess[str]:
        return cli_job("publish", "--out", folder, "--registry", f"{reg.host}/{release}", "--stage", stage, "--credentials", str(creds),
                   "--signing-key", str(release_key), "--trust-policy", str(policy), "-q", cwd=tmp_path, docker_host=NO_ENGINE)

    def gathered(name: str) -> Path:
        folder = tmp_path / name
        shutil.copytree(tmp_path / "build" / BASE, folder / BASE)
        return folder / BASE

    # 1. The build job wrote a verify.json of its own (and no statement): refused, nothing tagged.
    forged = gathered("forged")
    (forged / "verify.dsse.json").unlink()
    (forged / "verify.json").write_text(json.dumps(report | {"summary": {"ok": True}}))
    done = publish("forged")
    assert done.returncode == 1 and f"forged/{BASE}/verify.json: unsigned (no verify.dsse.json beside it)" in done.stderr, done.stderr
    assert reg.list_tags(release) == []

    # 2. A statement signed by a key the trust policy does not name: refused, nothing tagged.
    stranger = gathered("stranger")
    key = signing.load_signing_key(stranger_key, {})
    assert key is not None
    (stranger / "verify.dsse.json").write_bytes(trust.sign(verifyreport.parse(report), inventory, trust.Subject(stage, digest), key))
    done = publish("stranger")
    assert done.returncode == 1 and f"stranger/{BASE}/verify.dsse.json: is signed by no verifier that {policy} names " \
        "(1 signature(s) by other keys)" in done.stderr, done.stderr
    assert reg.list_tags(release) == []

    # 3. Signed by the verifier, but about another digest: refused, nothing tagged.
    other = gathered("other")
    mine = signing.load_signing_key(verifier_key, {})
    assert mine is not None
    elsewhere = "sha256:" + "e" * 64
    (other / "verify.dsse.json").write_bytes(trust.sign(verifyreport.parse(report), inventory, trust.Subject(stage, elsewhere), mine))
    done = publish("other")
    assert done.returncode == 1 and f"other/{BASE}/verify.dsse.json: its subject is {stage}@{elsewhere}, not the image being " \
        f"released ({stage}@{digest})" in done.stderr, done.stderr
    assert reg.list_tags(release) == []

    # 4. The genuine statement is released; a made-up inventory.json beside it is not what the SBOM says.
    real = gathered("real")
    (real / "inventory.json").write_text(json.dumps({"image_id": built["result"]["image_id"], "inventory": {
        "schema": "imagesmith.inventory/1", "python": "3.11.2", "distributions": [{"name": FAKE, "version": "6.6.6"}],
        "dpkg": []}}))
    ok(publish("real"))
    rel = json.loads((tmp_path / "real" / "release.json").read_text())
    assert [(t["status"], t["digest"]) for t in rel["targets"]] == [("pushed", digest)]
    assert rel["trust"]["policy"]["file"] == str(policy) and rel["trust"]["targets"][BASE]["verifier"] == "gpu-runner"
    tag = rel["targets"][0]["tag"]
    image_tags = [t for t in reg.list_tags(release) if not t.startswith("sha256-")]  # not the evidence (referrers, .sig, .att)
    assert image_tags == sorted([tag, "v2.13-base"]) and reg.inspect(release, tag)["Digest"] == digest
    assert "Verifications believed under trust policy" in (tmp_path / "real" / "release.md").read_text()
    evidence = json.loads(ok(cli_job("evidence", f"{reg.host}/{release}@{digest}", "--key", str(release_pub), "--json",
                                 "--credentials", str(creds), cwd=tmp_path, docker_host=NO_ENGINE)))
    assert [v["passed"] for v in evidence["verification"]] == [True]
    signed_counts = (len(inventory["distributions"]), len(inventory["dpkg"]))
    assert signed_counts[1] > 0  # a Debian image: the made-up inventory (1 distribution, no Debian package) differs
    assert [(c["python"], c["deb"]) for c in evidence["sbom"]] == [signed_counts]
