"""Two platforms, one tag, on the real engine and registry (issue 24): an arm64 image verified here runs under
QEMU in CPU mode and says so; a release of both platforms is one OCI image index that skopeo reads back with the
digests that were verified, evidence on each platform's image and a signature on the index; a later release whose
arm64 image failed verification keeps that index; ``verify`` of the tag names the platform image it ran."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagesmith.edges import signing
from imagesmith.edges.engine import Engine
from imagesmith.edges.registry import OCI_INDEX, Credentials, Registry
from imagesmith.errors import UserError
from imagesmith.model import policy
from imagesmith.model.matrix.records import ImageSpec
from imagesmith.model.platform import Platform
from imagesmith.model.tags import FloatingTag, TagPolicy
from imagesmith.model.verifyreport import VerifyReport
from imagesmith.stages.evidence import evidence
from imagesmith.stages.release.publish import Backoff, Item, Publisher, evidence_step, index_evidence_step
from imagesmith.stages.verify import incontainer, verify
from tests.integration.conftest import PASSWORD, USER, RegistryServer
from tests.integration.test_evidence_registry import keypair

pytestmark = [pytest.mark.integration, pytest.mark.registry]

REPO = "ml/python-multiarch"
POLICY = TagPolicy(immutable="{torch}-{accel}-py{python}-{os}-{layer}-{date}", floating=(FloatingTag("latest"),))
TAG = "2.9.1-cpu-py3.11-debian12-base-20261201"
CREDS = Credentials(USER, PASSWORD, "test")
QUICK = verify.VerifyOptions(gpus="none", timeout_s=600)
TARGETS = {Platform.AMD64: "2.9-cpu-py3.11-debian12-base", Platform.ARM64: "2.9-cpu-py3.11-debian12-arm64-base"}


def test_an_arm64_image_verified_here_runs_emulated_in_cpu_mode_and_says_it_has_no_torch(
        engine: Engine, python_images: dict[str, str]) -> None:
    typed = incontainer.verify_image(engine, python_images["arm64"], QUICK).report
    report = typed.to_json()
    assert report["emulation"] == {"image": "linux/arm64", "host": "linux/amd64", "by": incontainer.EMULATOR}
    assert report["platform"] == {"image": "linux/arm64", "host": "linux/amd64"}
    assert report["mode"]["reason"].startswith("CPU mode: emulated, linux/arm64 on a linux/amd64 host")
    torch = next(c for c in report["checks"] if c["id"] == "versions.torch")
    assert torch["status"] == "fail" and "torch is not importable (no torch package)" in torch["detail"]
    assert report["environment"]["machine"] == "aarch64"  # the payload ran on arm64 code, not the host's
    ev = policy.evidence(typed)
    assert ev.emulated and not ev.gpu_verified and "emulated: linux/arm64 on a linux/amd64 host" in ev.describe()
    with pytest.raises(UserError, match="runs only under emulation, never on a GPU"):
        incontainer.verify_image(engine, python_images["arm64"], verify.VerifyOptions(require_gpu=True))


def test_a_base_of_the_other_platform_fails_each_cell_before_any_build_step(
        engine: Engine, python_images: dict[str, str], write_matrix: Any, tmp_path: Path) -> None:
    """Each platform's base named for the other: the engine's own inspect of each base refuses both cells; no step
    runs (no build log), nothing is tagged for them."""
    from imagesmith.model import matrix, plan
    from imagesmith.stages.building import build

    text = (f"image: {{repository: imagesmith-test/wrong-base}}\nmatrix: {{torch: ['2.9'], cuda: [cpu], python: ['3.11'], "
            f"os: [debian12], platform: [linux/amd64, linux/arm64]}}\nbase_images:\n  debian12:\n"
            f"    linux/amd64: {python_images['arm64']}\n    linux/arm64: {python_images['amd64']}\n")
    m = matrix.load(write_matrix(text))
    p = plan.expand(m, "20261201")
    report = build.Builder(p, m, engine, tmp_path / "out").run()
    got = {r.target: r for r in report.results}
    assert {t: r.status for t, r in got.items()} == {t.id: "failed" for t in p.targets}
    for t in p.targets:
        other = "linux/arm64" if t.platform is Platform.AMD64 else "linux/amd64"
        assert str(got[t.id].error).startswith(f"base {t.base_image} named for {t.platform} is {other}: ")
        assert got[t.id].steps == 0 and not (tmp_path / "out" / t.id / "build.log").exists()
        assert engine.image(t.image) is None


class World:
    """One registry; both platforms' images verified here once; releases of them with evidence."""

    def __init__(self, engine: Engine, images: dict[str, str], reports: dict[Platform, VerifyReport],
                 server: RegistryServer, folder: Path) -> None:
        self.engine, self.server, self.folder, self.reports = engine, server, folder, reports
        self.key, self.pub = keypair(folder, "release")
        self.images = {p: images[p.arch] for p in Platform}
        self.runs = 0

    def item(self, platform: Platform, verified: bool = True) -> Item:
        info = self.engine.image(self.images[platform])
        assert info is not None
        facts = {"torch": "2.9.1+cpu", "cuda": None, "python": "3.11.2", "os": "debian12"}  # tags name a torch; these have none
        how = policy.evidence(self.reports[platform])
        return Item(TARGETS[platform], "base", "2.9-cpu-py3.11-debian12", info.id, facts, True, verified,
                    {"ok": verified, "tier": "quick"}, evidence=replace(how, ok=verified),
                    platform=platform, group="2.9.1-cpu-py3.11-debian12-base")

    def release(self, items: list[Item]) -> dict[str, Any]:
        self.runs += 1
        out = self.folder / f"run{self.runs}"
        reg, key = Registry(self.server.host, CREDS), signing.load_signing_key(self.key, {})
        step = evidence_step(self.engine, reg, REPO, {}, {i.target: self.reports[i.platform] for i in items}, key, out)
        Publisher(self.engine, reg, ImageSpec(REPO, self.server.host), POLICY, "20261201", out, credentials=CREDS,
                  backoff=Backoff(tries=2, first=0.05), evidence=step, index_evidence=index_evidence_step(reg, REPO, key)).run(items)
        return dict(json.loads((out / "release.json").read_text()))

    def raw(self, ref: str, *args: str) -> dict[str, Any]:
        done = self.server.skopeo("inspect", *args, f"docker://{self.server.host}/{REPO}:{ref}")
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout))

    def evidence(self, digest: str) -> evidence.Evidence:
        reg = Registry(self.server.host, CREDS)
        return evidence.Reader(reg, REPO, [signing.load_public_key(self.pub)]).read(digest)


@pytest.fixture(scope="module")
def reports(engine: Engine, python_images: dict[str, str]) -> dict[Platform, VerifyReport]:
    """Each platform's image verified here once (the arm64 one under QEMU): what the releases attest."""
    return {p: incontainer.verify_image(engine, python_images[p.arch], QUICK).report for p in Platform}


@pytest.fixture()
def world(engine: Engine, python_images: dict[str, str], reports: dict[Platform, VerifyReport],
          plain_registry: RegistryServer, tmp_path: Path) -> Any:
    w = World(engine, python_images, reports, plain_registry, tmp_path)
    yield w
    for p in Platform:  # the tags publish gave the images in this engine
        ref = f"{w.server.host}/{REPO}:{TAG}-{p.arch}"
        if engine.image(ref) is not None:
            engine.untag(ref)


def test_a_two_platform_release_is_one_index_of_the_verified_digests_and_a_failed_platform_keeps_it(world: World) -> None:
    first = world.release([world.item(Platform.AMD64), world.item(Platform.ARM64)])
    assert first["ok"] is True, first["errors"] + [t["error"] for t in first["targets"]]
    amd, arm = first["targets"]
    [index] = first["indexes"]
    assert index["action"] == "pushed" and index["tag"] == TAG and index["floating"] == ["latest"]

    raw = world.raw(TAG, "--raw")  # skopeo, not our client, reads what the tag names
    assert raw["mediaType"] == OCI_INDEX
    assert {m["platform"]["architecture"]: m["digest"] for m in raw["manifests"]} == {"amd64": amd["digest"], "arm64": arm["digest"]}
    for arch, target in (("amd64", amd), ("arm64", arm)):  # each platform resolves to the image that was verified
        seen = world.raw(TAG, "--override-arch", arch, "--override-os", "linux")
        assert seen["Architecture"] == arch and seen["Digest"] == index["digest"]
        assert world.raw(f"{TAG}-{arch}", "--raw") and target["tag"] == f"{TAG}-{arch}"
        found = world.evidence(target["digest"])  # SBOM and verification on each platform's image, signed
        assert found.ok and {a.kind for a in found.attestations} >= {"sbom", "verification"} and found.signatures
        [said] = found.to_json()["verification"]  # the signed predicate says where it ran, and whether emulated
        assert said["platform"] == {"image": f"linux/{arch}", "host": "linux/amd64", "emulated": arch == "arm64",
                                    "emulator": incontainer.EMULATOR if arch == "arm64" else None}
    signed = world.evidence(index["digest"])  # the index itself carries the release's signature
    assert signed.ok and [s.signed_by for s in signed.signatures] and signed.media_type == OCI_INDEX
    assert world.raw("latest", "--raw")["mediaType"] == OCI_INDEX  # the floating tag serves the index

    failed = world.release([world.item(Platform.AMD64), world.item(Platform.ARM64, verified=False)])
    assert failed["ok"] is False
    assert failed["indexes"][0]["action"] == "held" and failed["indexes"][0]["previous"] == index["digest"]
    assert "linux/arm64" in failed["indexes"][0]["reason"] and f"keeps its previous index {index['digest'][:19]}" in failed["indexes"][0]["reason"]
    assert world.raw(TAG, "--raw") == raw  # never a partial index: the tag serves the same document


def test_verify_of_the_tag_names_the_platform_image_it_ran(world: World, engine: Engine) -> None:
    released = world.release([world.item(Platform.AMD64), world.item(Platform.ARM64)])
    amd = released["targets"][0]
    ref = f"{world.server.host}/{REPO}:{TAG}"
    report = incontainer.verify_image(engine, ref, verify.VerifyOptions(gpus="none", timeout_s=600, only=("versions.python",)),
                                 auth=CREDS.auth_config(), registry=Registry(world.server.host, CREDS)).report.to_json()
    try:
        picked = {k: report["image"][k] for k in ("index", "digest", "platform")}
        assert picked == {"index": released["indexes"][0]["digest"], "digest": amd["digest"], "platform": "linux/amd64"}
        assert f"verified its linux/amd64 image {amd['digest']}" in " ".join(report["notes"])
    finally:
        engine.remove_image(ref, force=True)
