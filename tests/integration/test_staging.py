"""Past one machine: stages hand off through a registry, by digest.

Two Docker engines on this machine stand for two CI runners (the main one,
"A", and a second dockerd, "B", with its own data root, socket and bridge),
and a real registry (Debian's docker-registry) sits between them:
the CPU cell's base is built on A and staged; its child is built on B FROM
the base's staged digest; B verifies both by digest; publish promotes them
with no engine at all (DOCKER_HOST points at nothing); skopeo then reads
what was released. Every command runs as a user's CI job would: the CLI, in
its own process, with only the artifacts the job before it left.

Also: promotion against the real registry (mounts within it, chunked copies
to another one, byte-identical manifests) and two publishers racing for one
floating tag.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from functools import partial
from pathlib import Path
from typing import Any, Callable

import pytest

from imagesmith.edges.registry import Credentials, Registry
from imagesmith.model.matrix.records import ImageSpec
from imagesmith.model.tags import FloatingTag, TagPolicy
from imagesmith.stages.evidence import trust
from imagesmith.stages.release.promote import Promoter, registry_promoter
from imagesmith.stages.release.publish import Item, Publisher
from tests.integration.conftest import PASSWORD, USER, RegistryServer
from tests.integration.engine_fixtures import LOCAL_SOURCES, MatrixFactory, cli_job, ok
from tests.unit.trustkeys import key_files

pytestmark = [pytest.mark.integration, pytest.mark.registry]

DATE = "20261130"
CREDS = Credentials(USER, PASSWORD, "test")
TAGS = """\
tags:
  floating:
    - "v{torch_minor}-{layer}"
    - tag: latest
      when: {layer: base}
"""
LAYERS = "layers:\n  base: {toolchain: false}\n  tools: {parent: base, packages: ['tabulate==0.9.0']}\n"


def record(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / "build.json").read_text()))


def test_a_build_split_over_two_engines_is_released_digest_for_digest(
        build_matrix: MatrixFactory, second_engine: Any, plain_registry: RegistryServer, tmp_path: Path) -> None:
    reg = plain_registry
    path = build_matrix(LAYERS, extra=LOCAL_SOURCES + TAGS, registry=reg.host)
    stage, release = f"{reg.host}/ci/staging", build_matrix.repository
    creds = tmp_path / "credentials"
    creds.write_text(f"{USER}:{PASSWORD}\n")
    key = tmp_path / "release.key"
    subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key)], check=True)
    subprocess.run(["openssl", "pkey", "-in", str(key), "-pubout", "-out", str(tmp_path / "release.pub")], check=True)
    verifier_key, _ = key_files(tmp_path, "verifier")
    policy = tmp_path / "trust-policy.yaml"
    policy.write_text(trust.policy_text([("runner-b", "verifier.pub", ["*"])]))
    cell = "2.13.0-cpu-py3.11-debian12"
    base, tools = f"{cell}-base", f"{cell}-tools"
    common = ["--matrix", str(path), "--date", DATE, "--stage", stage, "--credentials", str(creds)]

    # Runner A builds the base and stages it; its job's artifact is build_a/<base>/.
    ok(cli_job("build", *common, "--only", base, "--out", "build_a", docker_host=None, cwd=tmp_path))
    staged_base = record(tmp_path / "build_a" / base)["staged"]
    assert staged_base["tag"].startswith("ctx-") and staged_base["pushed"] is True

    # Runner B gets that artifact (as GitLab's needs: would hand it over) and builds the child.
    engine_b = second_engine.client()
    assert engine_b.images.list() == []  # nothing there: no base, no OS image
    shutil.copytree(tmp_path / "build_a" / base, tmp_path / "build_b" / base)
    ok(cli_job("build", *common, "--only", tools, "--out", "build_b", docker_host=second_engine.host, cwd=tmp_path))
    report_b = {t["target"]: t for t in json.loads((tmp_path / "build_b" / "report.json").read_text())["targets"]}
    assert report_b[base]["status"] == "cached" and report_b[base]["staged"]["adopted"] is True
    assert report_b[tools]["status"] == "built"
    base_id = record(tmp_path / "build_a" / base)["result"]["image_id"]
    assert report_b[base]["image_id"] == base_id  # the staged image, pulled by digest: the same image ID
    pulled = engine_b.images.get(f"{stage}@{staged_base['digest']}")
    child = engine_b.images.get(record(tmp_path / "build_b" / tools)["result"]["image_id"])
    assert pulled.id == base_id
    assert child.attrs["RootFS"]["Layers"][:len(pulled.attrs["RootFS"]["Layers"])] == pulled.attrs["RootFS"]["Layers"]  # FROM it
    assert (tmp_path / "build_b" / base / "build.json").read_bytes() == (tmp_path / "build_a" / base / "build.json").read_bytes()

    # Runner B verifies both by their staged digests (pulled when absent), several artifacts at once.
    ok(cli_job("verify", "--build-report", f"build_b/{base}/build.json", "--build-report", f"build_b/{tools}/build.json",
                  "--gpus", "none", "--tier", "quick", "--stage", stage, "--credentials", str(creds), "--verifier-key", str(verifier_key),
                  docker_host=second_engine.host, cwd=tmp_path))
    verified = {t: json.loads((tmp_path / "build_b" / t / "verify.json").read_text())["image"] for t in (base, tools)}
    staged = {t: record(tmp_path / ("build_a" if t == base else "build_b") / t)["staged"]["digest"] for t in (base, tools)}
    assert {t: v["digest"] for t, v in verified.items()} == staged

    # The publish job gathers the artifacts and has no engine at all.
    gathered = tmp_path / "gathered"
    for t in (base, tools):
        shutil.copytree(tmp_path / "build_b" / t, gathered / t)
    out = ok(cli_job("publish", "--out", "gathered", "--registry", f"{reg.host}/{release}", "--stage", stage, "--credentials", str(creds), "--signing-key", str(key), "--trust-policy", str(policy),
                        docker_host="unix:///nonexistent/docker.sock", cwd=tmp_path))
    assert "release report: gathered/release.json" in out
    rel = json.loads((gathered / "release.json").read_text())
    assert rel["ok"] and [t["status"] for t in rel["targets"]] == ["pushed", "pushed"]
    assert "## Promoted from staging" in (gathered / "release.md").read_text()
    run = json.loads((gathered / "run-report.json").read_text())
    assert set(run["verify"]) == {base, tools} and run["release"]["ok"]

    # skopeo (not imagesmith) reads the release: the digests are the verified ones, the manifests byte-identical.
    for t in rel["targets"]:
        name = t["target"]
        assert reg.inspect(release, t["tag"])["Digest"] == verified[name]["digest"] == staged[name] == t["digest"]
        raw = reg.skopeo("inspect", "--raw", f"docker://{reg.host}/{release}:{t['tag']}").stdout
        assert raw == reg.skopeo("inspect", "--raw", f"docker://{stage}@{staged[name]}").stdout
        assert t["promotion"]["bytes_copied"] == 0 and t["promotion"]["mounted"] + t["promotion"]["present"] == t["promotion"]["blobs"]
        kinds = {a["kind"]: a for a in t["evidence"]["artifacts"]}
        assert {"sbom", "verification", "signature"} <= set(kinds) and all(a["signed"] for a in kinds.values() if a["kind"] != "referrers-index")
        assert kinds["referrers-index"]["tag"] == staged[name].replace(":", "-")  # attached to the promoted (= verified) digest
    floating = {f["tag"]: f["digest"] for f in rel["floating"]}
    assert floating == {"latest": staged[base], "v2.13-base": staged[base], "v2.13-tools": staged[tools]}
    assert {tag: reg.inspect(release, tag)["Digest"] for tag in floating} == floating
    assert all(not tag.startswith("ctx-") for tag in reg.list_tags(release))  # content tags stay in staging
    assert sorted(reg.list_tags("ci/staging")) == sorted([staged_base["tag"], record(tmp_path / "build_b" / tools)["staged"]["tag"]])

    # The evidence went to the promoted digest, checked with the signer's key (still no engine).
    ok(cli_job("evidence", f"{reg.host}/{release}@{staged[tools]}", "--key", str(tmp_path / "release.pub"),
                  "--credentials", str(creds), docker_host="unix:///nonexistent/docker.sock", cwd=tmp_path))

    # A job on B without the base's artifact resolves it by its content tag in staging instead of building it
    # (B gets the OS base image A used, so it computes the same context hash).
    engine_b.images.load(b"".join(build_matrix.engine.client.images.get(build_matrix.base).save(named=True)))
    ok(cli_job("build", *common, "--only", base, "--out", "build_c", docker_host=second_engine.host, cwd=tmp_path))
    again_b = record(tmp_path / "build_c" / base)
    assert again_b["result"]["status"] == "cached" and again_b["result"]["image_id"] == base_id
    assert again_b["staged"] == staged_base | {"pushed": False}  # found under its content tag, nothing pushed
    assert not (tmp_path / "build_c" / base / "build.log").exists()  # not built

    # A re-run of the publish job promotes nothing again.
    ok(cli_job("publish", "--out", "gathered", "--registry", f"{reg.host}/{release}", "--stage", stage, "--credentials", str(creds), "--signing-key", str(key), "--trust-policy", str(policy),
                  docker_host="unix:///nonexistent/docker.sock", cwd=tmp_path))
    again = json.loads((gathered / "release.json").read_text())
    assert [t["status"] for t in again["targets"]] == ["unchanged", "unchanged"] and again["pushed"] == []


def test_the_second_engine_leaves_nothing_behind(registry_engine: Any) -> None:
    from tests.integration.second_engine import SecondEngine

    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    other = SecondEngine().start()
    try:
        assert other.client().version()["Version"] and other.bridge in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        assert other.client().info()["DockerRootDir"] != registry_engine.info()["DockerRootDir"]
    finally:
        other.stop()
    assert not other.folder.exists() and other.mounts() == []
    after = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert other.bridge not in after and ("docker0" in links) == ("docker0" in after)  # the host's bridge untouched
    assert registry_engine.version()["Version"]  # the main engine still answers


# -- promotion against the real registry --------------------------------------------------------------


def push_tiny(engine: Any, image_id: str, name: str, tag: str) -> str:
    engine.tag(image_id, name, tag)
    try:
        return str(engine.push(name, tag, CREDS.auth_config(), lambda line: None))
    finally:
        engine.untag(f"{name}:{tag}")


def test_promotion_mounts_within_a_registry_copies_to_another_and_stays_byte_identical(
        registry_engine: Any, plain_registry: RegistryServer, tiny_image: Callable[..., str], tmp_path: Path) -> None:
    other = RegistryServer(tmp_path / "other", tls=False)
    other.root.mkdir()
    other.configure()
    other.start()
    try:
        image_id = tiny_image({"io.imagesmith.test": "promote"}, payload_mb=3)
        digest = push_tiny(registry_engine, image_id, f"{plain_registry.host}/ci/staging", "ctx-1")
        src, ref = Registry(plain_registry.host, CREDS), f"{plain_registry.host}/ci/staging@{digest}"
        mounted = Promoter(src, src)(ref, "ml/release", "v1")
        copied = Promoter(src, Registry(other.host, CREDS), chunk=1 << 20)(ref, "ml/release", "v1")
        again = Promoter(src, src)(ref, "ml/release", "v2")
        assert (mounted.mounted, mounted.copied, mounted.bytes_copied) == (2, 0, 0) and mounted.bytes_total > 3 << 20
        assert (copied.mounted, copied.copied, copied.bytes_copied) == (0, 2, copied.bytes_total)
        assert (again.present, again.mounted) == (2, 0)  # the release repository has every blob already
        raw = plain_registry.skopeo("inspect", "--raw", f"docker://{ref}").stdout
        for server in (plain_registry, other):
            assert server.inspect("ml/release", "v1")["Digest"] == digest
            assert server.skopeo("inspect", "--raw", f"docker://{server.host}/ml/release:v1").stdout == raw
        done = subprocess.run(["skopeo", "copy", "--src-tls-verify=false", f"--src-creds={USER}:{PASSWORD}",
                               f"docker://{other.host}/ml/release:v1", f"dir:{tmp_path / 'copy'}"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr  # skopeo checks every blob against its digest on the way
    finally:
        other.stop()


# -- two publishers at once ---------------------------------------------------------------------------


def labels(torch: str) -> dict[str, str]:
    return {"io.imagesmith.torch": torch, "io.imagesmith.cuda": "cpu", "io.imagesmith.python": "3.11",
            "io.imagesmith.os": "debian12", "io.imagesmith.layer": "base", "io.imagesmith.cell": f"{torch}-cpu-py3.11-debian12",
            "org.opencontainers.image.created": "2026-11-30T00:00:00+00:00"}


def staged_item(engine: Any, server: RegistryServer, make: Callable[..., str], torch: str) -> Item:
    image_id = make(labels(torch))
    digest = push_tiny(engine, image_id, f"{server.host}/ci/staging", f"ctx-{torch}")
    facts: dict[str, Any] = {"torch": f"{torch}+cpu", "cuda": None, "python": "3.11.2", "os": "debian12", "packages": {}}
    report = {"ok": True, "tier": "quick", "image_id": image_id, "digest": digest}
    return Item(f"{torch}-base", "base", f"{torch}-cpu-py3.11-debian12", image_id, facts, True, True, report,
                source=f"{server.host}/ci/staging@{digest}")


def test_two_publishers_at_once_never_move_a_floating_tag_back(
        registry_engine: Any, plain_registry: RegistryServer, tiny_image: Callable[..., str], tmp_path: Path) -> None:
    """Both releases read the registry before either writes (a barrier at their first push), then
    write the same floating tags one after the other: in round 0 the older one writes only after the
    newer one finished (what a stale look would move back), in round 1 the newer one writes only after
    the older one finished. The newer torch ends up there in both. The order is set by events, never
    left to the scheduler: a free race is what docs/ci.md calls the remaining window (an older release
    stalled across all of a newer one's write, read-back and final look), which a loaded machine opens."""
    policy = TagPolicy(floating=(FloatingTag("v{torch_minor}"), FloatingTag("latest")))
    old, new = (staged_item(registry_engine, plain_registry, tiny_image, t) for t in ("2.9.0", "2.9.1"))
    for round_, (second, first) in enumerate((("old", "new"), ("new", "old"))):
        repo, gate = f"ml/race{round_}", threading.Barrier(2, timeout=600)  # hang guards only
        finished = {"old": threading.Event(), "new": threading.Event()}
        results: dict[str, Any] = {}

        def hook(name: str, ref: str, gate: threading.Barrier = gate, finished: dict[str, threading.Event] = finished,
                 second: str = second, first: str = first) -> None:
            if ref.endswith(f"-{DATE}"):
                gate.wait()  # both have read the registry; neither has written
            elif name == second:
                finished[first].wait(600)  # a hang guard: the other release finishes first

        def run(name: str, item: Item, repo: str = repo, finished: dict[str, threading.Event] = finished,
                results: dict[str, Any] = results) -> None:
            reg = Registry(plain_registry.host, CREDS)
            pub = Publisher(registry_engine, reg, ImageSpec(repo, plain_registry.host), policy, DATE, tmp_path / f"{repo}-{name}",
                            credentials=CREDS, before_push=partial(hook, name), promote=registry_promoter(reg))
            try:
                results[name] = pub.run([item])
            finally:
                finished[name].set()

        threads = [threading.Thread(target=run, args=(n, i)) for n, i in (("old", old), ("new", new))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        assert results["old"].ok and results["new"].ok
        digest = {n: (i.source or "").rsplit("@", 1)[1] for n, i in (("old", old), ("new", new))}
        for tag in ("v2.9", "latest"):
            assert plain_registry.inspect(repo, tag)["Digest"] == digest["new"], f"round {round_}: {tag} moved back"
        assert [t.digest for t in results["old"].targets] == [digest["old"]]  # its immutable tag: released all the same
        if round_ == 0:
            assert {f.tag: f.action for f in results["old"].floating} == {"v2.9": "kept", "latest": "kept"}
            assert all(f.reason.startswith("another release moved it to newer torch 2.9.1") for f in results["old"].floating)
        else:  # the older one wrote first; the newer one found its write and moved the tags forward
            assert {f.tag: f.action for f in results["old"].floating} == {"v2.9": "created", "latest": "created"}
            assert {f.tag: f.action for f in results["new"].floating} == {"v2.9": "moved", "latest": "moved"}
