"""Evidence attached to released digests, against a real docker-registry
(htpasswd, no referrers API: the referrers tag schema is used), read back
with tools that are not imagesmith: skopeo (raw manifests, a containers
policy with a sigstoreSigned requirement), openssl (ECDSA signatures),
plain HTTP requests, and the image itself (dpkg-query, importlib.metadata)
for what the SBOM must list. Faults: a changed attestation, a changed blob in
the registry's storage, a wrong key.

The image is small on purpose (the Debian base made by the bootstrap, plus
python3 and one planted Python distribution, built with the plain docker CLI):
what is measured is the evidence machinery; the verification is a real
payload run restricted to the checks such an image passes."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests
from google.protobuf import json_format
from in_toto_attestation.v1 import statement_pb2

from imagesmith.edges import signing
from imagesmith.edges.registry import Credentials, Registry
from imagesmith.model.matrix.records import ImageSpec
from imagesmith.model.tags import FloatingTag, TagPolicy
from imagesmith.model.verifyreport import VerifyReport
from imagesmith.stages.evidence import evidence
from imagesmith.stages.release.publish import Backoff, Item, Publisher, evidence_step
from imagesmith.stages.verify import incontainer, verify
from tests.integration.conftest import PASSWORD, USER, RegistryServer
from tests.integration.engine_fixtures import docker_build, planted_wheel

pytestmark = [pytest.mark.integration, pytest.mark.registry]

REPO = "ml/pytorch-cpu"
POLICY = TagPolicy(immutable="{torch}-{accel}-py{python}-{os}-{layer}-{date}", floating=(FloatingTag("latest"),))
CREDS = Credentials(USER, PASSWORD, "test")
DSSE = "application/vnd.dsse.envelope.v1+json"
OPTIONS = verify.VerifyOptions(gpus="none", timeout_s=300, expect={"python": "3.11"}, only=("versions.python",))
BASE = "imagesmith-test/debian:bookworm"


def keypair(folder: Path, name: str) -> tuple[Path, Path]:
    key, pub = folder / f"{name}.key", folder / f"{name}.pub"
    subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key)], check=True)
    subprocess.run(["openssl", "pkey", "-in", str(key), "-pubout", "-out", str(pub)], check=True)
    return key, pub


class Release:
    """One registry, one CPU image released into it with evidence, and helpers to look at it."""

    def __init__(self, engine: Any, image_id: str, folder: Path) -> None:
        self.engine, self.image_id, self.folder = engine, image_id, folder
        self.server = RegistryServer(folder / "registry", tls=False)
        self.server.root.mkdir()
        self.server.configure()
        self.key, self.pub = keypair(folder, "release")
        self.report = incontainer.verify_image(engine, image_id, OPTIONS).report
        self.facts = incontainer.run_facts(engine, image_id)
        self.runs = 0

    def run(self, report: VerifyReport | None = None) -> dict[str, Any]:
        self.runs += 1
        out = self.folder / f"run{self.runs}"
        reg = Registry(self.server.host, CREDS)
        facts = {k: v for k, v in self.facts.items() if k != "torch_error"} | {"torch": "2.13.0+cpu"}  # tags name a torch; this image has none
        item = Item("cpu-base", "base", "2.13-cpu-py3.11-debian12", self.image_id, facts, True, True,
                    {"ok": True, "tier": "quick"})
        key = signing.load_signing_key(self.key, {})
        step = evidence_step(self.engine, reg, REPO, {"cpu-base": BASE},
                             {"cpu-base": report or self.report}, key, out)
        Publisher(self.engine, reg, ImageSpec(REPO, self.server.host), POLICY, "20261130", out, credentials=CREDS,
                  backoff=Backoff(tries=2, first=0.05), evidence=step).run([item])
        return dict(json.loads((out / "release.json").read_text()))

    # -- independent readers ----------------------------------------------------------------------
    def raw(self, ref: str) -> dict[str, Any]:
        sep = "@" if ref.startswith("sha256:") else ":"
        done = self.server.skopeo("inspect", "--raw", f"docker://{self.server.host}/{REPO}{sep}{ref}")
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout))

    def blob(self, digest: str) -> bytes:
        resp = requests.get(f"http://{self.server.host}/v2/{REPO}/blobs/{digest}", auth=(USER, PASSWORD), timeout=30)
        assert resp.status_code == 200 and "sha256:" + hashlib.sha256(resp.content).hexdigest() == digest
        return resp.content

    def put(self, kind: str, ref: str, data: bytes, media_type: str = "", repo: str = REPO) -> None:
        """What anyone with push rights can do, with plain HTTP."""
        base, auth = f"http://{self.server.host}/v2/{repo}", (USER, PASSWORD)
        if kind == "blob":
            loc = requests.post(f"{base}/blobs/uploads/", auth=auth, timeout=30).headers["Location"]
            resp = requests.put(f"{loc}&digest={ref}", data=data, auth=auth, timeout=30)
        else:
            resp = requests.put(f"{base}/manifests/{ref}", data=data, auth=auth, timeout=30, headers={"Content-Type": media_type})
        assert resp.status_code == 201, resp.text

    def evidence_cli(self, ref: str, *extra: str, repo: str = REPO) -> tuple[int, str]:
        creds = self.folder / "credentials"
        creds.write_text(f"{USER}:{PASSWORD}\n")
        sep = "@" if ref.startswith("sha256:") else ":"
        return run_cli(["evidence", f"{self.server.host}/{repo}{sep}{ref}", "--credentials", str(creds), *extra])


def run_cli(args: list[str]) -> tuple[int, str]:
    """The installed command, as a user runs it."""
    proc = subprocess.run([str(Path(sys.executable).parent / "imagesmith"), *args], capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def python_image(registry_engine: Any, debian_base: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The bootstrapped Debian base + python3 + one planted distribution (its dist-info only)."""
    folder = tmp_path_factory.mktemp("python-image")
    name, wheel = planted_wheel("imagesmith_evidence_probe", "1.2.3")
    (folder / name).write_bytes(wheel)
    tag = f"imagesmith-test/evidence:{uuid.uuid4().hex[:12]}"
    docker_build(registry_engine, f"""FROM {debian_base}
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends python3 >/dev/null && rm -rf /var/lib/apt/lists/*
COPY {name} /tmp/
RUN python3 -c "import zipfile; zipfile.ZipFile('/tmp/{name}').extractall('/usr/lib/python3/dist-packages')" && rm /tmp/{name}
USER 1000
""", tag, folder)
    yield str(registry_engine.image(tag).id)
    registry_engine.remove_image(tag)


@pytest.fixture(scope="module")
def release(registry_engine: Any, python_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    rel = Release(registry_engine, python_image, tmp_path_factory.mktemp("evidence"))
    rel.server.start()
    try:
        rel.first = rel.run()  # type: ignore[attr-defined]
        yield rel
    finally:
        rel.server.stop()
        for tag in registry_engine.image(python_image).tags:
            if tag.startswith(rel.server.host):
                registry_engine.untag(tag)


def statement(envelope: bytes) -> dict[str, Any]:
    return dict(json.loads(base64.b64decode(json.loads(envelope)["payload"])))


def pae(envelope: bytes) -> bytes:
    env = json.loads(envelope)
    body, kind = base64.b64decode(env["payload"]), env["payloadType"].encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)


def openssl_verifies(pub: Path, data: bytes, signature_b64: str, folder: Path) -> bool:
    name = uuid.uuid4().hex
    (folder / f"{name}.data").write_bytes(data)
    (folder / f"{name}.sig").write_bytes(base64.b64decode(signature_b64))
    done = subprocess.run(["openssl", "dgst", "-sha256", "-verify", str(pub), "-signature", str(folder / f"{name}.sig"),
                           str(folder / f"{name}.data")], capture_output=True, text=True)
    return done.returncode == 0 and "Verified OK" in done.stdout


# =====================================================================  tests


def test_evidence_is_pushed_and_found_again_with_skopeo(release: Release, engine: Any) -> None:
    target = release.first["targets"][0]  # type: ignore[attr-defined]
    digest = target["digest"]
    assert release.first["ok"] and target["status"] == "pushed", release.first  # type: ignore[attr-defined]
    index = release.raw(digest.replace(":", "-"))
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    by_type = {m["artifactType"]: m for m in index["manifests"]}
    assert sorted(by_type) == ["application/vnd.imagesmith.sbom.v1+json", "application/vnd.imagesmith.verification.v1+json"]

    attached = {a["kind"]: a for a in target["evidence"]["artifacts"]}
    assert {k: a["status"] for k, a in attached.items()} == {"sbom": "pushed", "verification": "pushed",
                                                             "referrers-index": "pushed", "cosign-attestations": "pushed",
                                                             "signature": "pushed"}
    statements = {}
    for artifact_type, entry in by_type.items():
        manifest = release.raw(entry["digest"])
        assert manifest["subject"]["digest"] == digest and manifest["artifactType"] == artifact_type
        assert [layer["mediaType"] for layer in manifest["layers"]] == [DSSE]
        st = statement(release.blob(manifest["layers"][0]["digest"]))
        assert st["_type"] == "https://in-toto.io/Statement/v1"
        assert st["subject"] == [{"name": f"{release.server.host}/{REPO}", "digest": {"sha256": digest.split(":")[1]}}]
        statements[st["predicateType"]] = st["predicate"]
    assert attached["sbom"]["digest"] == by_type["application/vnd.imagesmith.sbom.v1+json"]["digest"]

    check = statements["https://imagesmith.dev/attestations/verification/v1"]
    assert (check["tier"], check["mode"], check["passed"], check["gpu"]) == ("quick", "cpu", True, None)
    assert check["measured"]["python"].startswith("3.11.") and check["checks"][0]["id"] == "versions.python"
    assert len(check["checks"]) == len(release.report.to_json()["checks"]) and check["checks"][0]["status"] == "pass"

    bom = statements["https://cyclonedx.org/bom"]
    purls = [c["purl"] for c in bom["components"]]
    in_image = engine.run(verify_run(release.image_id, ["dpkg-query", "-W", "-f", "${Package} ${Version}\\n"]))
    debs = sorted(line.split(" ", 1)[0] for line in in_image.stdout.splitlines() if line)
    assert sorted(c["name"] for c in bom["components"] if c["purl"].startswith("pkg:deb/debian/")) == debs
    dists = engine.run(verify_run(release.image_id, ["python3", "-c", "import importlib.metadata as m; "
                                                     "print(len({(d.metadata['Name'], d.version) for d in m.distributions()}))"]))
    assert sum(p.startswith("pkg:pypi/") for p in purls) == int(dists.stdout) and "pkg:pypi/imagesmith-evidence-probe@1.2.3" in purls
    assert bom["metadata"]["component"]["version"] == digest
    assert bom["metadata"]["component"]["pedigree"]["ancestors"][0]["name"] == BASE


def verify_run(image_id: str, command: list[str]) -> Any:
    from imagesmith.edges.engine import RunSpec

    return RunSpec(image=image_id, command=command, labels={"io.imagesmith.run": f"evidence-test-{uuid.uuid4().hex[:8]}"})


def test_skopeo_reads_the_signature_and_openssl_verifies_every_signature(release: Release, tmp_path: Path) -> None:
    digest = release.first["targets"][0]["digest"]  # type: ignore[attr-defined]
    sig = release.raw(digest.replace(":", "-") + ".sig")
    layer = sig["layers"][0]
    assert layer["mediaType"] == "application/vnd.dev.cosign.simplesigning.v1+json"
    payload = release.blob(layer["digest"])
    assert json.loads(payload)["critical"]["image"]["docker-manifest-digest"] == digest
    assert openssl_verifies(release.pub, payload, layer["annotations"]["dev.cosignproject.cosign/signature"], tmp_path)

    for entry in release.raw(digest.replace(":", "-"))["manifests"]:
        envelope = release.blob(release.raw(entry["digest"])["layers"][0]["digest"])
        assert openssl_verifies(release.pub, pae(envelope), json.loads(envelope)["signatures"][0]["sig"], tmp_path)

    copied = skopeo_copy_with_signatures(release, "latest", tmp_path / "copy")
    stored = json.loads((tmp_path / "copy" / "signature-1").read_bytes().split(b"\n", 1)[1])
    assert stored["mimeType"] == "application/vnd.dev.cosign.simplesigning.v1+json" and copied.returncode == 0
    assert base64.b64decode(stored["payload"]) == payload and not (tmp_path / "copy" / "signature-2").exists()
    assert openssl_verifies(release.pub, payload, stored["annotations"]["dev.cosignproject.cosign/signature"], tmp_path)


def test_the_att_tag_holds_what_cosign_verify_attestation_checks(release: Release, tmp_path: Path) -> None:
    """Read back with skopeo and checked as cosign checks it (pkg/cosign/verify.go verifyOCIAttestation,
    pkg/cosign/verifiers.go IntotoSubjectClaimVerifier), with tools that are not imagesmith: each layer a DSSE
    envelope of payloadType application/vnd.in-toto+json whose signature openssl verifies over PAE, whose
    statement protobuf's strict JSON parser reads as an in-toto Statement (cosign uses protojson) about the
    sha256 of the image manifest; the annotations cosign's reader needs."""
    digest = release.first["targets"][0]["digest"]  # type: ignore[attr-defined]
    att = release.raw(digest.replace(":", "-") + ".att")
    assert (att["mediaType"], att["config"]["mediaType"]) == ("application/vnd.oci.image.manifest.v1+json",
                                                              "application/vnd.oci.image.config.v1+json")
    config = json.loads(release.blob(att["config"]["digest"]))
    assert config["rootfs"]["diff_ids"] == [layer["digest"] for layer in att["layers"]] and len(config["history"]) == 2
    referrers = {release.raw(m["digest"])["layers"][0]["digest"] for m in release.raw(digest.replace(":", "-"))["manifests"]}
    assert {layer["digest"] for layer in att["layers"]} == referrers  # the same envelopes, stored once

    predicates = []
    for layer in att["layers"]:
        assert layer["mediaType"] == DSSE and set(layer["annotations"]) == {"dev.cosignproject.cosign/signature", "predicateType"}
        assert layer["annotations"]["dev.cosignproject.cosign/signature"] == ""
        envelope = release.blob(layer["digest"])
        env = json.loads(envelope)
        assert env["payloadType"] == "application/vnd.in-toto+json" and len(env["signatures"]) == 1
        assert openssl_verifies(release.pub, pae(envelope), env["signatures"][0]["sig"], tmp_path)
        parsed = json_format.Parse(base64.b64decode(env["payload"]).decode(), statement_pb2.Statement())
        assert parsed.type == "https://in-toto.io/Statement/v1" and parsed.predicate_type == layer["annotations"]["predicateType"]
        assert [(s.name, dict(s.digest)) for s in parsed.subject] == [(f"{release.server.host}/{REPO}", {"sha256": digest[7:]})]
        predicates.append(parsed.predicate_type)
    assert sorted(predicates) == ["https://cyclonedx.org/bom", "https://imagesmith.dev/attestations/verification/v1"]


def skopeo_copy_with_signatures(release: Release, tag: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """containers/image reads the .sig attachment as its own sigstore signature and writes it to dir:
    (Debian's skopeo cannot verify it: its sigstore verification is patched out, see the README)."""
    (folder.parent / "registries.d").mkdir()
    (folder.parent / "registries.d" / "test.yaml").write_text(f"docker:\n  {release.server.host}:\n    use-sigstore-attachments: true\n")
    return subprocess.run(["skopeo", "--insecure-policy", "--registries.d", str(folder.parent / "registries.d"), "copy",
                           "--src-tls-verify=false", "--src-creds", f"{USER}:{PASSWORD}",
                           f"docker://{release.server.host}/{REPO}:{tag}", f"dir:{folder}"], capture_output=True, text=True, timeout=300)


def test_the_evidence_command_checks_everything_and_a_rerun_pushes_nothing(release: Release) -> None:
    code, out = release.evidence_cli("latest", "--key", str(release.pub), "--json")
    found = json.loads(out[out.index("{"):])
    assert code == 0 and found["ok"] and found["problems"] == [], out
    assert sorted(a["kind"] for a in found["attestations"]) == ["sbom", "verification"]
    assert all(a["signed_by"] for a in found["attestations"]) and found["signature"]["signatures"][0]["signed_by"]
    assert found["sbom"][0]["python"] >= 1 and found["sbom"][0]["deb"] > 80

    cosign = found["cosign_attestations"]
    assert sorted(a["kind"] for a in cosign["attestations"]) == ["sbom", "verification"]
    assert all(a["signed_by"] and not a["problems"] for a in cosign["attestations"]), cosign
    assert {a["layer"]["digest"] for a in cosign["attestations"]} == {a["layer"]["digest"] for a in found["attestations"]}

    tags_before = release.server.list_tags(REPO)
    index_before = release.raw(found["digest"].replace(":", "-"))
    att_before = release.raw(found["digest"].replace(":", "-") + ".att")
    again = release.run()
    statuses = [a["status"] for a in again["targets"][0]["evidence"]["artifacts"]]
    assert again["ok"] and again["pushed"] == [] and statuses == ["unchanged"] * 4, again["targets"][0]["evidence"]
    assert again["targets"][0]["evidence"]["pushed_bytes"] == 0
    assert release.server.list_tags(REPO) == tags_before and release.raw(found["digest"].replace(":", "-")) == index_before
    assert release.raw(found["digest"].replace(":", "-") + ".att") == att_before

    code, text = release.evidence_cli("latest", "--key", str(release.pub))
    assert code == 0 and "verification: PASSED (CPU-only image (no CUDA), verified on a CPU) quick tier on CPU mode (no GPU)" in text \
        and "sbom: CycloneDX 1.6" in text
    assert "verification (.att)" in text and "sbom (.att)" in text


def test_a_floating_tag_shows_the_same_evidence(release: Release) -> None:
    immutable = release.first["targets"][0]["tag"]  # type: ignore[attr-defined]
    floating = json.loads(release.evidence_cli("latest", "--json")[1])
    pinned = json.loads(release.evidence_cli(immutable, "--json")[1])
    assert floating["digest"] == pinned["digest"] and floating["attestations"] == pinned["attestations"]
    assert floating["signature"] == pinned["signature"]


def test_a_wrong_key_fails(release: Release, tmp_path: Path) -> None:
    _, other = keypair(tmp_path, "other")
    code, out = release.evidence_cli("latest", "--key", str(other))
    assert code == 1 and "does not verify with the given key" in out and "no signature of" in out


def test_a_changed_attestation_is_detected(release: Release) -> None:
    """One byte of the verification statement changed, pushed by someone with push rights."""
    digest = release.first["targets"][0]["digest"]  # type: ignore[attr-defined]
    index = release.raw(digest.replace(":", "-"))
    entry = next(m for m in index["manifests"] if m["artifactType"].endswith("verification.v1+json"))
    manifest = release.raw(entry["digest"])
    envelope = json.loads(release.blob(manifest["layers"][0]["digest"]))
    payload = base64.b64decode(envelope["payload"])
    forged = payload.replace(b'"mode":"cpu"', b'"mode":"gpu"', 1)
    assert len(forged) == len(payload) and sum(a != b for a, b in zip(forged, payload)) == 1
    envelope["payload"] = base64.b64encode(forged).decode()
    blob = json.dumps(envelope).encode()
    blob_digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    release.put("blob", blob_digest, blob)
    manifest["layers"][0].update(digest=blob_digest, size=len(blob))
    raw = json.dumps(manifest).encode()
    raw_digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    release.put("manifest", raw_digest, raw, manifest["mediaType"])
    index["manifests"].append({**entry, "digest": raw_digest, "size": len(raw)})
    release.put("manifest", digest.replace(":", "-"), json.dumps(index).encode(), index["mediaType"])
    try:
        code, out = release.evidence_cli("latest", "--key", str(release.pub))
        assert code == 1 and "its signature does not verify with the given key" in out, out
        assert f"verification {raw_digest[:19]}" in out
    finally:  # put the index back for the other tests
        index["manifests"].pop()
        release.put("manifest", digest.replace(":", "-"), json.dumps(index).encode(), index["mediaType"])


def put_att(release: Release, digest: str, layers: list[dict[str, Any]]) -> None:
    manifest, config = evidence.cosign_attestation_manifest(layers)
    release.put("blob", "sha256:" + hashlib.sha256(config).hexdigest(), config)
    release.put("manifest", digest.replace(":", "-") + ".att", manifest, "application/vnd.oci.image.manifest.v1+json")


@pytest.mark.parametrize("change, message", [
    ("payload", "its signature does not verify with the given key"),
    ("annotation", "its predicateType annotation is https://cyclonedx.org/bom, its statement's "
                   "https://imagesmith.dev/attestations/verification/v1"),
    ("no-annotation", "it has no dev.cosignproject.cosign/signature annotation (cosign refuses such a layer)"),
])
def test_a_changed_att_layer_is_detected(release: Release, change: str, message: str) -> None:
    """One byte of the verification statement in the .att layer, or its annotations, changed by someone with push rights."""
    digest = release.first["targets"][0]["digest"]  # type: ignore[attr-defined]
    layers = release.raw(digest.replace(":", "-") + ".att")["layers"]
    at = next(i for i, x in enumerate(layers) if x["annotations"]["predicateType"].endswith("verification/v1"))
    forged = json.loads(json.dumps(layers))
    if change == "payload":
        envelope = json.loads(release.blob(layers[at]["digest"]))
        envelope["payload"] = base64.b64encode(base64.b64decode(envelope["payload"]).replace(b'"mode":"cpu"', b'"mode":"gpu"', 1)).decode()
        blob = json.dumps(envelope).encode()
        release.put("blob", "sha256:" + hashlib.sha256(blob).hexdigest(), blob)
        forged[at].update(digest="sha256:" + hashlib.sha256(blob).hexdigest(), size=len(blob))
    elif change == "annotation":
        forged[at]["annotations"]["predicateType"] = "https://cyclonedx.org/bom"
    else:
        del forged[at]["annotations"]["dev.cosignproject.cosign/signature"]
    put_att(release, digest, forged)
    try:
        code, out = release.evidence_cli("latest", "--key", str(release.pub))
        assert code == 1 and f"verification in the .att tag, layer {forged[at]['digest'][:19]}: {message}" in out, out
    finally:
        put_att(release, digest, layers)


def test_a_blob_changed_in_the_registry_storage_is_detected(release: Release) -> None:
    digest = release.first["targets"][0]["digest"]  # type: ignore[attr-defined]
    entry = next(m for m in release.raw(digest.replace(":", "-"))["manifests"] if m["artifactType"].endswith("sbom.v1+json"))
    layer = release.raw(entry["digest"])["layers"][0]["digest"].split(":")[1]
    stored = release.server.root / "data" / "docker" / "registry" / "v2" / "blobs" / "sha256" / layer[:2] / layer / "data"
    original = stored.read_bytes()
    stored.write_bytes(original[:100] + bytes([original[100] ^ 1]) + original[101:])
    try:
        code, out = release.evidence_cli("latest", "--key", str(release.pub))
        assert code == 1 and f"blob sha256:{layer} has other content" in out, out
    finally:
        stored.write_bytes(original)


def test_verify_prints_the_evidence_and_reuses_a_signed_attestation(release: Release, tmp_path: Path) -> None:
    creds = tmp_path / "credentials"
    creds.write_text(f"{USER}:{PASSWORD}\n")
    ref = f"{release.server.host}/{REPO}:latest"
    reused = tmp_path / "reused.json"
    code, out = run_cli(["verify", ref, "--gpus", "none", "--reuse-evidence", "--key", str(release.pub), "--credentials", str(creds),
                         "--json", str(reused)])
    assert code == 0 and "reusing the signed verification sha256:" in out and "(quick tier, CPU mode): not run again" in out, out
    assert "verification: PASSED (CPU-only image (no CUDA), verified on a CPU) quick tier on CPU mode (no GPU)" in out
    written = json.loads(reused.read_text())  # the same --json report as a fresh run writes, each check with its detail
    assert written["state"] == "complete" and written["summary"]["ok"] is True and written["reused"]["attestation"].startswith("sha256:")
    assert [c["id"] for c in written["checks"]] == [c["id"] for c in release.report.to_json()["checks"]] and written["checks"][0]["detail"]
    code, out = run_cli(["verify", ref, "--gpus", "none", "--reuse-evidence", "--key", str(release.pub), "--credentials", str(creds),
                         "--expect", "python=2.7", "--no-pull"])  # asked what the attested run never showed: run again
    assert "not reused: " in out and "--expect python=2.7: it measured 3.11" in out and "not run again" not in out, out
    pinned = f"{release.server.host}/{REPO}:{release.first['targets'][0]['tag']}"  # type: ignore[attr-defined]
    code, out = run_cli(["verify", pinned, "--gpus", "none", "--tier", "standard", "--reuse-evidence", "--key", str(release.pub),
                         "--credentials", str(creds), "--only", "versions.python", "--expect", "python=3.11", "--no-pull"])
    assert code == 0 and "not run again" not in out and f"verify {pinned} on Docker " in out and "(standard)" in out, out


def test_doctor_release_probes_push_rights_on_the_real_registry(release: Release, tmp_path: Path) -> None:
    from imagesmith.stages.tools import doctor

    assert doctor.probe_release(release.server.host, REPO, {"IMAGESMITH_REGISTRY_USER": USER, "IMAGESMITH_REGISTRY_PASSWORD": PASSWORD}) \
        == doctor.ReleaseFacts()
    refused = doctor.probe_release(release.server.host, REPO, {"IMAGESMITH_REGISTRY_USER": USER, "IMAGESMITH_REGISTRY_PASSWORD": "wrong"})
    assert refused.push_error and refused.push_error.startswith(f"push {release.server.host}/{REPO} failed: HTTP 401")


def test_imagesmith_accepts_an_att_that_cosign_made(release: Release) -> None:
    """cosign v3.1.1's own `.att` (tests/fixtures/cosign-att: envelope, manifest and key verbatim; the config
    and the subject image rebuilt, each checked against the digest cosign's manifest or statement names),
    pushed into the real registry and read by `imagesmith evidence`; then one changed byte in its envelope."""
    repo, fixture = "golden/attestation-sidecar-key", Path(__file__).parent.parent / "fixtures" / "cosign-att"
    subject_layer, empty = b"ocx-golden-subject", b"{}"
    image: dict[str, Any] = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
             "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": sha(empty), "size": 2},
             "layers": [{"mediaType": "application/octet-stream", "digest": sha(subject_layer), "size": len(subject_layer)}]}
    raw_image = json.dumps(image).encode()
    digest = sha(raw_image)
    assert digest == "sha256:47f8439476b73b7e7bb389322dd6d5c6eef89efc61c86bfef8bade66774b36fe"
    att, envelope = fixture.joinpath("att-manifest.json").read_bytes(), fixture.joinpath("envelope.json").read_bytes()
    _, config = evidence.cosign_attestation_manifest(json.loads(att)["layers"])
    for blob in (empty, subject_layer, envelope, config):
        release.put("blob", sha(blob), blob, repo=repo)
    release.put("manifest", "v1", raw_image, image["mediaType"], repo=repo)
    release.put("manifest", digest.replace(":", "-") + ".att", att, "application/vnd.oci.image.manifest.v1+json", repo=repo)

    code, out = release.evidence_cli("v1", "--key", str(fixture / "cosign.pub"), "--json", repo=repo)
    found = json.JSONDecoder().raw_decode(out[out.index("{"):])[0]
    assert found["digest"] == digest and found["cosign_attestations"]["manifest"] == sha(att), out
    [layer] = found["cosign_attestations"]["attestations"]
    assert (layer["kind"], layer["predicateType"], layer["problems"], len(layer["signed_by"])) == \
        ("sbom", "https://cyclonedx.org/bom", [], 1), out
    assert code == 1 and found["problems"] == [f"no signature of {release.server.host}/{repo}@{digest} verifies with the given key"]

    env = json.loads(envelope)
    env["payload"] = base64.b64encode(base64.b64decode(env["payload"]).replace(b"zlib", b"zlob")).decode()
    forged = json.dumps(env).encode()
    release.put("blob", sha(forged), forged, repo=repo)
    layers = json.loads(att)["layers"]
    layers[0].update(digest=sha(forged), size=len(forged))
    manifest, config = evidence.cosign_attestation_manifest(layers)
    release.put("blob", sha(config), config, repo=repo)
    release.put("manifest", digest.replace(":", "-") + ".att", manifest, "application/vnd.oci.image.manifest.v1+json", repo=repo)
    code, out = release.evidence_cli("v1", "--key", str(fixture / "cosign.pub"), repo=repo)
    assert code == 1 and f"sbom in the .att tag, layer {sha(forged)[:19]}: its signature does not verify with the given key" in out, out


def test_a_verification_of_another_tier_appends_a_layer_to_the_att(release: Release) -> None:
    """Last: it adds evidence. A new tier is a new verification: one more referrer and one more `.att` layer
    (read-modify-write: the two layers before it stay first, unchanged); running it again adds nothing."""
    digest = release.first["targets"][0]["digest"]  # type: ignore[attr-defined]
    before = release.raw(digest.replace(":", "-") + ".att")["layers"]
    standard = release.report.amended(tier="standard")
    done = release.run(standard)
    statuses = {a["kind"]: a["status"] for a in done["targets"][0]["evidence"]["artifacts"]}
    assert statuses == {"sbom": "unchanged", "verification": "pushed", "referrers-index": "pushed",
                        "cosign-attestations": "pushed", "signature": "unchanged"}, statuses
    after = release.raw(digest.replace(":", "-") + ".att")["layers"]
    assert after[:2] == before and len(after) == 3
    assert after[2]["annotations"] == {"dev.cosignproject.cosign/signature": "",
                                       "predicateType": "https://imagesmith.dev/attestations/verification/v1"}
    tiers = {json.loads(base64.b64decode(json.loads(release.blob(x["digest"]))["payload"]))["predicate"].get("tier")
             for x in after}
    assert tiers == {None, "quick", "standard"}  # the SBOM has no tier
    again = release.run(standard)
    assert [a["status"] for a in again["targets"][0]["evidence"]["artifacts"]] == ["unchanged"] * 4
    assert release.raw(digest.replace(":", "-") + ".att")["layers"] == after
    code, out = release.evidence_cli("latest", "--key", str(release.pub), "--json")
    assert code == 0 and len(json.loads(out[out.index("{"):])["cosign_attestations"]["attestations"]) == 3, out


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()
