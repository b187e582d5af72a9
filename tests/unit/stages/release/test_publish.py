"""Publish (pure half): tags from measured versions, floating-tag moves,
credentials, retries, digest checks, release.json. The engine and registry
are in-memory doubles passed to the Publisher (no patching); every test
checks what ended up in the registry double and in release.json."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Mapping, Sequence

import pytest

from imagesmith.edges import registry
from imagesmith.edges.engine import push_error
from imagesmith.edges.registry import Credentials, Manifest
from imagesmith.errors import EngineConnectionLost, EngineError, RegistryError, UserError
from imagesmith.model import matrix, plan, policy, releasereport, tags
from imagesmith.model.buildreport import BuildRecord, Release, Staged
from imagesmith.model.matrix.records import ImageSpec
from imagesmith.model.tags import FloatingTag, TagPolicy
from imagesmith.progress import QuietDisplay
from imagesmith.report.markdown import release_document
from imagesmith.stages.release import publish
from tests.conftest import LOCAL_ROOTS, ROOT
from tests.doubles import EngineBase, RegistryBase, verify_report

DATE = "20261130"
IMAGE = ImageSpec(repository="ml/pytorch", registry="reg.test:5000")
POLICY = TagPolicy(floating=(FloatingTag("v{torch_minor}-{layer}"),
                             FloatingTag("latest", (("layer", "base"),))))
SECRET = "pa:ss-w0rd-123"
CREDS = Credentials("robot$ml+ci", SECRET, "test")


# -- doubles ------------------------------------------------------------------------------------


def manifest_for(image_id: str) -> Manifest:
    raw = json.dumps({"schemaVersion": 2, "config": {"digest": image_id}}, sort_keys=True).encode()
    return Manifest("sha256:" + hashlib.sha256(raw).hexdigest(), registry.DOCKER_V2, image_id, raw)


@dataclass
class FakeRegistry(RegistryBase):
    """A registry in memory: tag -> manifest, config digest -> labels."""

    host: str = "reg.test:5000"
    repo_tags: dict[str, Manifest] = field(default_factory=dict)
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    writes: list[str] = field(default_factory=list)
    fail: list[Exception] = field(default_factory=list)  # raised by the next calls, in order
    serve_other_digest: bool = False
    upload_fail: list[Exception | None] = field(default_factory=list)  # what the next upload checks answer
    upload_checks: int = 0

    def _maybe_fail(self) -> None:
        if self.fail:
            raise self.fail.pop(0)

    def tags(self, repo: str) -> list[str]:
        self._maybe_fail()
        return sorted(self.repo_tags)

    def manifest(self, repo: str, ref: str) -> Manifest | None:
        found = self.repo_tags.get(ref)
        if found and self.serve_other_digest:
            return Manifest("sha256:" + "f" * 64, found.media_type, found.config_digest, found.raw)
        return found

    def manifest_digest(self, repo: str, ref: str) -> str | None:
        found = self.manifest(repo, ref)
        return found.digest if found else None

    def labels_of_config(self, repo: str, config_digest: str) -> dict[str, str]:
        return dict(self.labels.get(config_digest, {}))

    def config(self, repo: str, digest: str) -> dict[str, Any]:
        return {"config": {"Labels": self.labels.get(digest, {})}, "rootfs": {"type": "layers", "diff_ids": []}}

    def put_manifest(self, repo: str, tag: str, manifest: Manifest) -> str:
        self.writes.append(tag)
        self.repo_tags[tag] = manifest
        return manifest.digest

    def push_index(self, repo: str, tag: str, digests: Sequence[str]) -> str:
        """An image index of manifests already here; like the real client's Manifest, it names the first
        entry's config (the linux/amd64 image's, as the registry client resolves an index)."""
        held = {m.digest: m for m in self.repo_tags.values()}
        raw = json.dumps({"schemaVersion": 2, "mediaType": registry.OCI_INDEX,
                          "manifests": [{"digest": d} for d in digests]}, sort_keys=True).encode()
        index = Manifest("sha256:" + hashlib.sha256(raw).hexdigest(), registry.OCI_INDEX, held[digests[0]].config_digest, raw)
        return self.put_manifest(repo, tag, index)

    def digest_of(self, tag: str) -> str | None:
        return self.repo_tags[tag].digest if tag in self.repo_tags else None

    def check_upload(self, repo: str) -> None:
        self.upload_checks += 1
        if self.upload_fail:
            error = self.upload_fail.pop(0)
            if error is not None:
                raise error


@dataclass
class FakeEngine(EngineBase):
    """An engine whose push lands in a FakeRegistry; ``fail`` injects push errors."""

    reg: FakeRegistry
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    local_tags: dict[str, str] = field(default_factory=dict)
    pushes: list[str] = field(default_factory=list)
    auths: list[Mapping[str, str] | None] = field(default_factory=list)
    fail: list[Exception] = field(default_factory=list)

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        self.local_tags[f"{repository}:{tag}"] = image_id

    def image(self, ref: str) -> Any:
        return SimpleNamespace(id=self.local_tags[ref]) if ref in self.local_tags else None

    def untag(self, ref: str) -> None:
        self.local_tags.pop(ref, None)

    def push(self, repository: str, tag: str, auth: Mapping[str, str] | None, on_line: Callable[[str], None]) -> str:
        self.auths.append(auth)
        if self.fail:
            raise self.fail.pop(0)
        image_id = self.local_tags[f"{repository}:{tag}"]
        m = manifest_for(image_id)
        self.reg.repo_tags[tag] = m
        self.reg.labels[image_id] = self.labels.get(image_id, {})
        self.pushes.append(tag)
        on_line(f"{tag}: digest: {m.digest}")
        return m.digest


def facts(torch: str, cuda: str | None = "12.8", python: str = "3.11.9", os: str = "ubuntu22.04",
          cudnn: str | None = "9.10.2") -> dict[str, Any]:
    return {"torch": torch, "cuda": cuda, "cudnn": cudnn if cuda else None, "nccl": "2.27.5" if cuda else None,
            "python": python, "os": os, "packages": {"torch": torch}}


def image_labels(torch: str, layer: str = "base", cuda: str = "12.8") -> dict[str, str]:
    return {"io.imagesmith.torch": torch, "io.imagesmith.cuda": cuda, "io.imagesmith.cudnn": "9.10.2.21",
            "io.imagesmith.python": "3.11", "io.imagesmith.os": "ubuntu22.04", "io.imagesmith.layer": layer,
            "io.imagesmith.cell": f"{torch}-cell", "org.opencontainers.image.created": "2026-11-01T00:00:00+00:00"}


ON_GPU = policy.Evidence(True, "gpu", 1, "GPU mode: 1 GPU (--gpus all)", "pass", {"pass": 12, "skip": 3}, exclusive=True)
ON_CPU = policy.Evidence(True, "cpu", 0, "CPU mode: no GPU visible (the Docker engine has no NVIDIA runtime)", "skip",
                         {"skip": 15})


def item(torch: str, layer: str = "base", verified: bool = True, built: bool = True, image_id: str | None = None,
         cuda: str | None = "12.8", how: policy.Evidence = ON_GPU) -> publish.Item:
    image_id = image_id or "sha256:" + hashlib.sha256(f"{torch}-{layer}".encode()).hexdigest()
    return publish.Item(f"{torch}-{layer}", layer, f"{torch}-cell", image_id, facts(torch, cuda=cuda), built, verified,
                        {"ok": verified, "tier": "quick"}, None if built else "build failed", replace(how, ok=verified))


@dataclass
class World:
    reg: FakeRegistry
    engine: FakeEngine
    out: Path
    sleeps: list[float]

    def release(self, items: list[publish.Item], policy: TagPolicy = POLICY, **kw: Any) -> dict[str, Any]:
        for it in items:
            if it.image_id:
                torch = str((it.facts or {}).get("torch", "")).split("+", 1)[0]
                self.engine.labels[it.image_id] = image_labels(torch, it.layer) if torch else {}
        def sleep(seconds: float) -> None:  # time passes only while the publisher waits
            self.sleeps.append(seconds)

        pub = publish.Publisher(self.engine, self.reg, IMAGE, policy, DATE, self.out, credentials=CREDS,
                                sleep=sleep, clock=lambda: sum(self.sleeps) + 0.25 * len(self.engine.auths), **kw)
        report = pub.run(items)
        data: dict[str, Any] = json.loads((self.out / "release.json").read_text())
        assert data["ok"] == report.ok
        # release.md comes from the typed release, never from its JSON read back: both give the same record and text
        assert report.model(data) == releasereport.parse(data)
        assert (self.out / "release.md").read_text() == release_document(data)
        return data

    def seed(self, torch: str, *floating: str, layer: str = "base") -> str:
        """An image already in the registry (an earlier release), with floating tags on it."""
        image_id = "sha256:" + hashlib.sha256(f"old-{torch}-{layer}".encode()).hexdigest()
        m = manifest_for(image_id)
        self.reg.labels[image_id] = image_labels(torch, layer)
        for tag in (f"{torch}-cuda12.8-cudnn9-py3.11-ubuntu22.04-{layer}-20261101", *floating):
            self.reg.repo_tags[tag] = m
        return m.digest


@pytest.fixture()
def world(tmp_path: Path) -> World:
    reg = FakeRegistry()
    return World(reg, FakeEngine(reg), tmp_path, [])


# -- tags from measured facts -----------------------------------------------------------------------


@pytest.mark.parametrize("measured, layer, tag", [
    (facts("2.9.1+cu128"), "cv", "2.9.1-cuda12.8-cudnn9-py3.11-ubuntu22.04-cv-20261130"),
    (facts("2.14.1+cu130", cuda="13.0", os="debian12", cudnn="9.13.0"), "base", "2.14.1-cuda13.0-cudnn9-py3.11-debian12-base-20261130"),
    (facts("2.13.0+cpu", cuda=None, os="debian12", python="3.11.2"), "nlp", "2.13.0-cpu-py3.11-debian12-nlp-20261130"),
    (facts("2.10.0rc1", python="3.12.3", os="ubuntu24.04"), "base", "2.10.0rc1-cuda12.8-cudnn9-py3.12-ubuntu24.04-base-20261130"),
])
def test_immutable_tag_comes_from_what_the_image_measured(measured: dict[str, Any], layer: str, tag: str) -> None:
    fields = publish.tag_fields(measured, layer, "cell", DATE)
    assert tags.render(TagPolicy().immutable, fields) == tag


def test_an_image_without_torch_gets_no_tag(world: World) -> None:
    broken = publish.Item("x-base", "base", "x", "sha256:" + "1" * 64, {"torch_error": "ImportError: libcuda"}, True, True)
    data = world.release([broken])
    assert data["targets"][0]["status"] == "failed"
    assert data["targets"][0]["error"] == "no immutable tag from the measured versions: the image reports no torch version (ImportError: libcuda)"
    assert world.engine.pushes == []


def test_two_targets_with_one_immutable_tag_fail_the_second(world: World) -> None:
    policy = TagPolicy(immutable="{torch}-{date}")
    data = world.release([item("2.9.1", "base"), item("2.9.1", "cv")], policy)
    assert [t["status"] for t in data["targets"]] == ["pushed", "failed"]
    assert data["targets"][1]["error"] == "immutable tag '2.9.1-20261130' is also 2.9.1-base's; add fields to tags.immutable"


# -- floating tags -----------------------------------------------------------------------------------


@pytest.mark.parametrize("registry_has, release, moves, points_at", [
    # (torch, floating tags on it) in the registry; what this run releases; tag -> action; tag -> torch it serves after
    ([], ["2.9.1"], {"v2.9-base": "created", "latest": "created"}, {"v2.9-base": "2.9.1", "latest": "2.9.1"}),
    ([("2.9.0", ("v2.9-base", "latest"))], ["2.9.1"], {"v2.9-base": "moved", "latest": "moved"}, {"v2.9-base": "2.9.1", "latest": "2.9.1"}),
    ([("2.9.1", ("v2.9-base", "latest"))], ["2.9.0"], {"v2.9-base": "kept", "latest": "kept"}, {"v2.9-base": "2.9.1", "latest": "2.9.1"}),
    ([("2.10.0", ("v2.10-base", "latest"))], ["2.9.1"], {"v2.9-base": "created", "latest": "kept"}, {"v2.9-base": "2.9.1", "latest": "2.10.0"}),
    ([("2.9.1", ("v2.9-base", "latest"))], ["2.10.0rc1"], {}, {"v2.9-base": "2.9.1", "latest": "2.9.1"}),
    ([], ["2.9.0", "2.9.1"], {"v2.9-base": "created", "latest": "created"}, {"v2.9-base": "2.9.1", "latest": "2.9.1"}),
])
def test_floating_tags_move_forward_only(world: World, registry_has: list[tuple[str, tuple[str, ...]]], release: list[str],
                                         moves: dict[str, str], points_at: dict[str, str]) -> None:
    for torch, floating in registry_has:
        world.seed(torch, *floating)
    data = world.release([item(t) for t in release])
    assert {f["tag"]: f["action"] for f in data["floating"]} == moves
    served = {tag: world.reg.labels[world.reg.repo_tags[tag].config_digest or ""]["io.imagesmith.torch"] for tag in points_at}
    assert served == points_at


def test_a_kept_floating_tag_says_why(world: World) -> None:
    world.seed("2.9.1", "v2.9-base", "latest")
    data = world.release([item("2.9.0")])
    kept = {f["tag"]: f for f in data["floating"]}["latest"]
    assert kept["reason"] == ("the registry has newer torch 2.9.1 (reg.test:5000/ml/pytorch:2.9.1-cuda12.8-cudnn9-py3.11-ubuntu22.04-base-20261101); "
                              "a floating tag never moves back")
    assert "latest" not in world.reg.writes


def test_unverified_images_are_neither_tagged_nor_pushed_nor_floated(world: World) -> None:
    world.seed("2.9.0", "v2.9-base", "latest")
    before = dict(world.reg.repo_tags)
    data = world.release([item("2.9.1", verified=False), item("2.10.0", built=False)])
    assert world.engine.pushes == [] and world.engine.local_tags == {} and world.reg.repo_tags == before
    assert [(t["status"], t["error"]) for t in data["targets"]] == [
        ("not-verified", "verification failed; not tagged, not pushed"),
        ("not-built", "not built: build failed")]
    assert data["ok"] is False and data["pushed"] == [] and data["floating"] == []


def test_prereleases_take_floating_tags_only_when_the_policy_says_so(world: World) -> None:
    world.seed("2.9.1", "v2.9-base", "latest")
    policy = TagPolicy(floating=POLICY.floating, prerelease=True)
    data = world.release([item("2.10.0rc1")], policy)
    assert {f["tag"]: f["action"] for f in data["floating"]} == {"v2.10-base": "created", "latest": "moved"}


def test_a_rebuild_of_the_same_torch_takes_the_floating_tag(world: World) -> None:
    old = world.seed("2.9.1", "v2.9-base", "latest")
    data = world.release([item("2.9.1", image_id="sha256:" + "2" * 64)])
    assert {f["tag"]: (f["action"], f["previous"]) for f in data["floating"]} == {"v2.9-base": ("moved", old), "latest": ("moved", old)}


# -- two releases at once: compare-and-swap on the floating tags -------------------------------------------


def served_torch(world: World, tag: str) -> str:
    return world.reg.labels[world.reg.repo_tags[tag].config_digest or ""]["io.imagesmith.torch"]


def test_a_floating_tag_another_release_moved_forward_meanwhile_is_kept(world: World) -> None:
    """This release looked (no v2.9-base, no latest), then another release of a newer torch ran to the
    end before this one wrote: re-read right before the PUT, semver again, kept."""
    rival: list[dict[str, Any]] = []

    def other_release(ref: str) -> None:
        if ref.endswith(":latest") and not rival:
            rival.append(world.release([item("2.9.1")]))

    data = world.release([item("2.9.0")], before_push=other_release)
    assert {f["tag"]: f["action"] for f in rival[0]["floating"]} == {"latest": "created", "v2.9-base": "created"}
    got = {f["tag"]: f for f in data["floating"]}
    assert {t: f["action"] for t, f in got.items()} == {"latest": "kept", "v2.9-base": "kept"}
    assert got["latest"]["reason"].startswith("another release moved it to newer torch 2.9.1 (sha256:")
    assert served_torch(world, "latest") == served_torch(world, "v2.9-base") == "2.9.1"
    assert data["targets"][0]["floating"] == [] and data["ok"]


def test_a_floating_tag_another_release_moved_to_an_older_torch_meanwhile_is_moved_on(world: World) -> None:
    older: list[str] = []

    def other_release(ref: str) -> None:  # an older release that looked before this one pushed writes its tags now
        if ref.endswith(":latest") and not older:
            older.append(world.seed("2.9.0", "latest", "v2.9-base"))

    data = world.release([item("2.9.1")], before_push=other_release)
    assert {f["tag"]: (f["action"], f["previous"]) for f in data["floating"]} == {
        "latest": ("moved", older[0]), "v2.9-base": ("moved", older[0])}
    assert served_torch(world, "latest") == served_torch(world, "v2.9-base") == "2.9.1"


def test_a_newer_write_racing_right_after_the_put_is_seen_on_read_back(world: World) -> None:
    put = world.reg.put_manifest

    def racing_put(repo: str, tag: str, manifest: Manifest) -> str:
        digest = put(repo, tag, manifest)
        if tag == "latest":  # another release (newer torch) pushes, and its PUT lands right after this one's
            newer = world.seed("2.10.0")
            world.reg.repo_tags[tag] = next(m for m in world.reg.repo_tags.values() if m.digest == newer)
        return digest

    world.reg.put_manifest = racing_put  # type: ignore[method-assign]
    data = world.release([item("2.9.1")])
    got = {f["tag"]: f["action"] for f in data["floating"]}
    assert got["latest"] == "kept" and served_torch(world, "latest") == "2.10.0"
    assert got["v2.9-base"] == "created" and served_torch(world, "v2.9-base") == "2.9.1"


def test_an_older_write_landing_after_every_check_is_undone_when_the_release_settles(world: World) -> None:
    old_digest = world.seed("2.9.0")
    old = next(m for m in world.reg.repo_tags.values() if m.digest == old_digest)

    def late_older_write(r: publish.TargetRelease) -> dict[str, Any]:
        world.reg.repo_tags["latest"] = old  # a slow older release's PUT, after this one read its tag back
        return {"artifacts": []}

    data = world.release([item("2.9.1")], evidence=late_older_write)
    assert served_torch(world, "latest") == "2.9.1"
    assert {f["tag"]: (f["action"], f["previous"]) for f in data["floating"]}["latest"] == ("moved", old_digest)


# -- re-runs, conflicts, digests ---------------------------------------------------------------------


def test_a_rerun_with_nothing_changed_pushes_nothing(world: World) -> None:
    items = [item("2.9.1"), item("2.9.1", "cv")]
    first = world.release(items)
    writes, pushes = list(world.reg.writes), list(world.engine.pushes)
    second = world.release(items)
    assert len(first["pushed"]) == 5 and first["ok"]  # 2 immutable + v2.9-base, latest, v2.9-cv
    assert second["ok"] and second["pushed"] == []
    assert world.engine.pushes == pushes and world.reg.writes == writes
    assert sorted((u["reference"], u["digest"]) for u in second["unchanged"]) == sorted((p["reference"], p["digest"]) for p in first["pushed"])
    assert [t["status"] for t in second["targets"]] == ["unchanged", "unchanged"]


def test_an_immutable_tag_is_never_overwritten_by_another_image(world: World) -> None:
    world.release([item("2.9.1", image_id="sha256:" + "a" * 64)])
    data = world.release([item("2.9.1", image_id="sha256:" + "b" * 64)])
    target = data["targets"][0]
    assert target["status"] == "failed" and "already exists with another image (sha256:" + "a" * 64 in target["error"]
    assert world.engine.pushes == ["2.9.1-cuda12.8-cudnn9-py3.11-ubuntu22.04-base-20261130"]


def test_a_digest_the_registry_does_not_serve_fails_the_release(world: World) -> None:
    world.reg.serve_other_digest = True
    data = world.release([item("2.9.1"), item("2.9.2")])
    assert [t["status"] for t in data["targets"]] == ["failed", "not-pushed"]
    assert data["targets"][0]["error"].startswith("digest mismatch for reg.test:5000/ml/pytorch:2.9.1-")
    assert data["pushed"] == [] and data["ok"] is False


def test_release_json_records_reference_digest_versions_and_verification(world: World) -> None:
    data = world.release([item("2.9.1")])
    assert data["schema"] == "imagesmith.release/1"
    first = data["pushed"][0]
    assert first["reference"] == "reg.test:5000/ml/pytorch:2.9.1-cuda12.8-cudnn9-py3.11-ubuntu22.04-base-20261130"
    assert first["digest"] == world.reg.digest_of("2.9.1-cuda12.8-cudnn9-py3.11-ubuntu22.04-base-20261130")
    assert first["versions"] == {"torch": "2.9.1", "cuda": "12.8", "cudnn": "9.10.2", "nccl": "2.27.5", "python": "3.11.9", "os": "ubuntu22.04"}
    assert first["verification"] == {"ok": True, "tier": "quick"}
    assert data["targets"][0]["floating"] == ["latest", "v2.9-base"]
    md = (world.out / "release.md").read_text()
    assert "| 2.9.1-base | pushed | `2.9.1-" in md and "| `latest` | created |" in md


# -- retries and failures ------------------------------------------------------------------------------


@pytest.mark.parametrize("backoff, delays", [
    (publish.Backoff(), [1.0, 2.0, 4.0, 8.0]),
    (publish.Backoff(tries=6, first=0.5, cap=4.0), [0.5, 1.0, 2.0, 4.0, 4.0]),
    (publish.Backoff(tries=3, first=2.0, factor=3.0), [2.0, 6.0]),
    (publish.Backoff(tries=1), []),
])
def test_backoff_schedule(backoff: publish.Backoff, delays: list[float]) -> None:
    assert backoff.delays() == delays


# The retry predicate reads types and HTTP statuses only. The engine's push words become one of
# those in engine.push_error (the push stream has no status of its own), so they are given through it.
@pytest.mark.parametrize("error, retry", [
    (push_error("x", 'Get "http://127.0.0.1:5000/v2/": dial tcp 127.0.0.1:5000: connect: connection refused', {}), True),
    (push_error("x", "read tcp: connection reset by peer", {}), True),
    (push_error("x", "received unexpected HTTP status: 503 Service Unavailable", {}), True),
    (push_error("x", "toomanyrequests: rate limit", {}), True),
    (push_error("x", "something the engine says", {"code": 502}), True),
    (registry.RegistryHTTPError("HTTP 502", 502), True),
    (registry.RegistryHTTPError("HTTP 429 TOOMANYREQUESTS", 429), True),
    (registry.RegistryHTTPError("HTTP 408", 408), True),
    (registry.RegistryUnreachable("cannot reach the registry r: Connection refused"), True),
    (EngineConnectionLost("push x: the Docker engine stopped answering (Connection reset by peer)"), True),
    (ConnectionError("('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))"), True),
    (TimeoutError("timed out"), True),
    (push_error("x", "unauthorized: authentication required", {}), False),
    (push_error("x", "denied: requested access to the resource is denied", {}), False),
    (push_error("x", "received unexpected HTTP status: 507 Insufficient Storage", {}), False),
    (registry.RegistryHTTPError("HTTP 404 NAME_UNKNOWN", 404), False),
    (registry.RegistryHTTPError("HTTP 400 MANIFEST_INVALID", 400), False),
    (registry.RegistryHTTPError("HTTP 401", 401), False),
    (registry.RegistryHTTPError("HTTP 403", 403), False),
    (registry.RegistryHTTPError("HTTP 500 storage full", 500, transient=False), False),  # the body said: storage full
    (registry.RegistryHTTPError("TLS to the registry r failed"), False),
    (RegistryError("push x failed: connection refused"), False),  # words are not a type: never retried on them
    (EngineError("tagging x: No such image"), False),
    (OSError("[Errno 28] No space left on device"), False),
    (ValueError("a bug"), False),
])
def test_which_errors_are_retried(error: Exception, retry: bool) -> None:
    assert publish.transient(error) is retry


class Notes(QuietDisplay):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, message: str) -> None:
        self.notes.append(message)


def test_a_transient_push_error_is_retried_with_backoff_then_succeeds(world: World) -> None:
    world.engine.fail = [registry.RegistryUnreachable("push failed: connect: connection refused")] * 2
    display = Notes()
    data = world.release([item("2.9.1")], display=display)
    assert world.sleeps == [1.0, 2.0] and data["ok"] and len(world.engine.pushes) == 1
    ref = "reg.test:5000/ml/pytorch:2.9.1-cuda12.8-cudnn9-py3.11-ubuntu22.04-base-20261130"
    assert display.notes[:2] == [f"push {ref}: push failed: connect: connection refused; retry 1 of 4 in 1s",
                             f"push {ref}: push failed: connect: connection refused; retry 2 of 4 in 2s"]


def test_a_registry_that_stays_down_fails_clearly_after_n_tries(world: World) -> None:
    world.engine.fail = [registry.RegistryUnreachable("push failed: connect: connection refused")] * 10
    data = world.release([item("2.9.1"), item("2.9.2")], backoff=publish.Backoff(tries=3))
    assert world.sleeps == [1.0, 2.0] and len(world.engine.auths) == 3
    assert data["errors"] == [
        "push reg.test:5000/ml/pytorch:2.9.1-cuda12.8-cudnn9-py3.11-ubuntu22.04-base-20261130 failed 3 times in 3.8s "
        "(3s of it waiting between tries); last error: push failed: connect: connection refused. The registry reg.test:5000 looks down or overloaded: "
        "check it, then run the release again (what was pushed stays; a re-run pushes only the rest)"]
    assert [t["status"] for t in data["targets"]] == ["failed", "not-pushed"] and data["pushed"] == []


def test_an_auth_error_is_not_retried_and_nothing_is_recorded_as_pushed(world: World) -> None:
    world.reg.fail = [registry.RegistryHTTPError("pull reg.test:5000/ml/pytorch failed: HTTP 401 (not logged in ...)", 401)]
    data = world.release([item("2.9.1")])
    assert world.sleeps == [] and world.engine.pushes == [] and data["pushed"] == []
    assert data["errors"] == ["listing tags of reg.test:5000/ml/pytorch: pull reg.test:5000/ml/pytorch failed: HTTP 401 (not logged in ...)"]
    assert data["targets"][0]["status"] == "not-pushed"


def test_a_login_failure_at_push_names_the_credentials_source_not_the_secret(world: World) -> None:
    ref = "reg.test:5000/ml/pytorch:2.9.1-cuda12.8-cudnn9-py3.11-ubuntu22.04-base-20261130"
    world.engine.fail = [RegistryError(f"push {ref} failed: unauthorized (not logged in to reg.test:5000 ...: docker login reg.test:5000)")]
    data = world.release([item("2.9.1")])
    assert world.sleeps == [] and data["errors"] == [
        f"push {ref} failed: unauthorized (not logged in to reg.test:5000 ...: docker login reg.test:5000) [credentials used: test]"]


def test_credentials_never_reach_the_release_files(world: World) -> None:
    world.engine.fail = [RegistryError(f"push failed: denied for robot$ml+ci:{SECRET} "
                                       f"({base64.b64encode(f'robot$ml+ci:{SECRET}'.encode()).decode()})")]
    world.release([item("2.9.1")])
    assert world.engine.auths == [{"username": "robot$ml+ci", "password": SECRET}]
    for name in ("release.json", "release.md", "push.log"):
        text = (world.out / name).read_text()
        assert SECRET not in text and base64.b64encode(f"robot$ml+ci:{SECRET}".encode()).decode() not in text
    assert "denied for robot$ml+ci:****" in (world.out / "release.json").read_text()
    assert SECRET not in repr(CREDS)


# -- the release policy: GPU-verified or not -------------------------------------------------------------


def test_a_cuda_image_verified_without_a_gpu_is_not_tagged_without_the_flag(world: World) -> None:
    data = world.release([item("2.9.1", how=ON_CPU)])
    (t,) = data["targets"]
    assert (t["status"], t["gpu_verified"], data["ok"], world.reg.repo_tags) == ("not-gpu-verified", False, False, {})
    assert t["error"] == t["note"] == (
        "not GPU-verified: CPU mode: no GPU visible (the Docker engine has no NVIDIA runtime); not tagged: verify it "
        "on a GPU host, or pass --allow-cpu-verification to push its immutable tag marked -not-gpu-verified (no "
        "floating tags)")


def test_with_the_flag_it_gets_its_immutable_tag_marked_and_no_floating_tag(world: World) -> None:
    data = world.release([item("2.9.1", how=ON_CPU)], allow_cpu_verification=True)
    (t,) = data["targets"]
    assert sorted(world.reg.repo_tags) == ["2.9.1-cuda12.8-cudnn9-py3.11-ubuntu22.04-base-20261130-not-gpu-verified"]
    assert (t["status"], t["gpu_verified"], t["floating"], data["floating"], data["ok"]) == ("pushed", False, [], [], True)
    assert t["note"].startswith("not GPU-verified: CPU mode: no GPU visible") and t["note"].endswith(
        "immutable tag only, marked -not-gpu-verified, no floating tags (--allow-cpu-verification)")
    assert (data["pushed"][0]["gpu_verified"], data["pushed"][0]["note"]) == (False, t["note"])
    md = (world.out / "release.md").read_text()
    assert "**1 CUDA image not GPU-verified**: verified without a GPU, its tag ends in `-not-gpu-verified`, no floating tags." in md


def test_gpu_verified_and_cpu_images_take_floating_tags_unverified_ones_do_not(world: World) -> None:
    items = [item("2.9.1"), item("2.9.1", layer="cv", how=ON_CPU), item("2.8.0", layer="nlp", cuda=None, how=ON_CPU)]
    data = world.release(items, allow_cpu_verification=True)
    assert {t["target"]: (t["gpu_verified"], t["floating"]) for t in data["targets"]} == {
        "2.9.1-base": (True, ["latest", "v2.9-base"]), "2.9.1-cv": (False, []), "2.8.0-nlp": (None, ["v2.8-nlp"])}


def test_a_gpu_check_that_failed_leaves_the_image_not_gpu_verified(world: World) -> None:
    half = replace(ON_GPU, gpu_checks={"pass": 10, "fail": 1})
    data = world.release([item("2.9.1", how=half)], allow_cpu_verification=True)
    (t,) = data["targets"]
    assert (t["gpu_verified"], t["floating"]) == (False, [])
    assert t["note"].startswith("not GPU-verified: 1 GPU check failed; immutable tag only")


def test_an_unverified_tag_in_the_registry_never_holds_a_floating_tag_back(world: World) -> None:
    """A newer torch pushed with -not-gpu-verified is not a rival: v2.9-base still moves to the GPU-verified 2.9.1."""
    world.seed("2.9.1")
    newer = "sha256:" + hashlib.sha256(b"cpu-only-2.9.2").hexdigest()
    world.reg.labels[newer] = image_labels("2.9.2")
    world.reg.repo_tags["2.9.2-cuda12.8-cudnn9-py3.11-ubuntu22.04-base-20261101-not-gpu-verified"] = manifest_for(newer)
    data = world.release([item("2.9.1", image_id="sha256:" + "9" * 64)])
    assert {f["tag"]: f["action"] for f in data["floating"]} == {"latest": "created", "v2.9-base": "created"}


# -- items from the build and verify stages ------------------------------------------------------------


LOCAL = matrix.load(ROOT / "examples" / "local.yaml", allowed_roots=LOCAL_ROOTS)
PLANNED = plan.expand(LOCAL, DATE).targets[:3]


def built(i: int, ok: bool = True, image_id: str | None = None, staged: str | None = None) -> BuildRecord:
    """The build artifact of the i-th planned target (examples/local.yaml)."""
    t = PLANNED[i]
    return BuildRecord(t, Release.of(LOCAL, DATE), "built" if ok else "failed", image_id or f"sha256:{t.id}", facts=facts("2.9.1"),
                       error=None if ok else "boom", staged=Staged("h.test/ml/staging", "ctx-1", staged) if staged else None)


def test_items_count_as_verified_only_for_the_image_that_was_verified() -> None:
    records = [built(0), built(1), built(2, ok=False)]
    a, b, c = (t.id for t in PLANNED)

    def outcome(ok: bool, image: str) -> SimpleNamespace:
        return SimpleNamespace(ok=ok, report=verify_report({"summary": {"ok": ok}, "image": {"id": image}, "checks": []}))

    items = publish.items_from(records, {a: outcome(True, f"sha256:{a}"), b: outcome(True, "sha256:OTHER")})
    assert [(i.target, i.layer, i.cell, i.built, i.verified, i.error) for i in items] == [
        (a, PLANNED[0].layer, PLANNED[0].cell, True, True, None),
        (b, PLANNED[1].layer, PLANNED[1].cell, True, False, f"verification ran on image sha256:OTHER, not the built sha256:{b}"),
        (c, PLANNED[2].layer, PLANNED[2].cell, False, False, "boom")]


def test_a_staged_item_counts_as_verified_only_for_the_digest_that_was_verified() -> None:
    records = [built(i, image_id="sha256:i", staged=f"sha256:{'abc'[i]}") for i in range(3)]
    a, b, c = (t.id for t in PLANNED)

    def outcome(d: str | None) -> SimpleNamespace:
        return SimpleNamespace(ok=True, report=verify_report({"summary": {"ok": True}, "image": {"id": "sha256:i", "digest": d}}))

    items = publish.items_from(records, {a: outcome("sha256:a"), b: outcome("sha256:OTHER"), c: outcome(None)})
    assert [(i.target, i.verified, i.source, i.error) for i in items] == [
        (a, True, "h.test/ml/staging@sha256:a", None),
        (b, False, "h.test/ml/staging@sha256:b", "verification ran on sha256:OTHER, not the staged h.test/ml/staging@sha256:b"),
        (c, True, "h.test/ml/staging@sha256:c", None)]  # verified by image ID on the build host: the same image


def test_a_staged_item_is_promoted_never_pushed_with_the_engine(world: World) -> None:
    calls: list[tuple[str, str, str]] = []

    def promote(source: str, repo: str, tag: str) -> Any:
        calls.append((source, repo, tag))
        m = manifest_for(image_id)
        world.reg.repo_tags[tag] = m
        world.reg.labels[image_id] = image_labels("2.9.1")
        return SimpleNamespace(digest=m.digest, to_json=lambda: {"mounted": 3, "copied": 0, "present": 0, "bytes_moved": 900, "seconds": 0.1})

    it = item("2.9.1")
    image_id = it.image_id or ""
    staged = publish.Item(**{**it.__dict__, "source": "h.test/ml/staging@" + manifest_for(image_id).digest})
    data = world.release([staged], promote=promote)
    assert world.engine.pushes == [] and world.engine.local_tags == {}
    assert calls == [(staged.source, "ml/pytorch", "2.9.1-cuda12.8-cudnn9-py3.11-ubuntu22.04-base-20261130")]
    assert data["targets"][0]["status"] == "pushed" and data["targets"][0]["promotion"]["mounted"] == 3
    assert "## Promoted from staging" in (world.out / "release.md").read_text()


def promoter(world: World, calls: list[tuple[str, str, str]]) -> Callable[[str, str, str], Any]:
    """Registry-side promotion as the registry double sees it: the staged manifest under the release tag."""
    def promote(source: str, repo: str, tag: str) -> Any:
        calls.append((source, repo, tag))
        image_id = next(i for i, labels in world.engine.labels.items() if source.endswith(manifest_for(i).digest))
        m = manifest_for(image_id)
        world.reg.repo_tags[tag] = m
        world.reg.labels[image_id] = world.engine.labels[image_id]
        return SimpleNamespace(digest=m.digest, to_json=lambda: {"mounted": 2, "copied": 0, "present": 0, "bytes_moved": 0, "seconds": 0.1})
    return promote


def staged_item(torch: str, how: policy.Evidence = ON_GPU) -> publish.Item:
    it = item(torch, how=how)
    return publish.Item(**{**it.__dict__, "source": "h.test/ml/staging@" + manifest_for(it.image_id or "").digest})


def test_a_staged_cuda_image_verified_without_a_gpu_is_not_promoted_without_the_flag(world: World) -> None:
    calls: list[tuple[str, str, str]] = []
    data = world.release([staged_item("2.9.1", ON_CPU)], promote=promoter(world, calls))
    (t,) = data["targets"]
    assert (t["status"], t["gpu_verified"], calls, world.reg.repo_tags, data["ok"]) == ("not-gpu-verified", False, [], {}, False)


def test_a_staged_cuda_image_verified_without_a_gpu_is_promoted_marked_and_never_floats(world: World) -> None:
    calls: list[tuple[str, str, str]] = []
    data = world.release([staged_item("2.9.1", ON_CPU), staged_item("2.9.0")], promote=promoter(world, calls),
                         allow_cpu_verification=True)
    cpu, gpu = data["targets"]
    assert [c[2] for c in calls] == ["2.9.1-cuda12.8-cudnn9-py3.11-ubuntu22.04-base-20261130-not-gpu-verified",
                                     "2.9.0-cuda12.8-cudnn9-py3.11-ubuntu22.04-base-20261130"]
    assert (cpu["status"], cpu["gpu_verified"], cpu["floating"], cpu["source"]) == ("pushed", False, [], calls[0][0])
    assert world.engine.pushes == []  # promoted, never pushed with the engine
    assert {f["tag"]: f["target"] for f in data["floating"]} == {"latest": gpu["target"], "v2.9-base": gpu["target"]}


def test_the_fleet_gate_holds_back_a_promoted_digest_like_a_pushed_one(world: World) -> None:
    calls: list[tuple[str, str, str]] = []
    it = staged_item("2.9.1")
    staged_digest = it.source.rsplit("@", 1)[1] if it.source else ""
    seen: list[str | None] = []

    def gate(digest: str | None) -> str | None:
        seen.append(digest)
        return "held back by the fleet: class h200 has no fleet result"

    data = world.release([it], promote=promoter(world, calls), floating_gate=gate)
    assert seen == [staged_digest] and data["targets"][0]["digest"] == staged_digest
    assert {f["action"] for f in data["floating"]} == {"kept"} and data["targets"][0]["floating"] == []
    assert all("held back by the fleet" in f["reason"] for f in data["floating"])


def test_publish_takes_image_and_tag_policy_from_the_matrix(world: World) -> None:
    m = matrix.load(ROOT / "examples" / "local.yaml", allowed_roots=LOCAL_ROOTS)
    world.reg.host = "127.0.0.1:5000"
    it = publish.Item("t", "base", "c", "sha256:" + "3" * 64, facts("2.14.1+cu130", cuda="13.0", os="debian12"), True, True,
                      evidence=ON_GPU)
    report = publish.publish(world.engine, world.reg, m, [it], DATE, world.out, sleep=world.sleeps.append)
    assert [p["reference"] for p in report.pushed()] == [
        "127.0.0.1:5000/imagesmith/local:2.14.1-cuda13.0-cudnn9-py3.11-debian12-base-20261130",
        "127.0.0.1:5000/imagesmith/local:latest", "127.0.0.1:5000/imagesmith/local:v2.14-base",
        "127.0.0.1:5000/imagesmith/local:v2.14-cuda13.0-cudnn9-py3.11-debian12-base"]


# -- credentials ------------------------------------------------------------------------------------------


def test_a_missing_credentials_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(UserError) as err:
        registry.from_file(tmp_path / "nope")
    assert str(err.value) == f"credentials file {tmp_path / 'nope'}: cannot be read (No such file or directory); it must hold one line user:password"


# -- the HTTP client against a scripted session ---------------------------------------------------------


@dataclass
class Reply:
    status_code: int
    headers: dict[str, str] = field(default_factory=dict)
    content: bytes = b""
    reason: str = ""

    def json(self) -> Any:
        return json.loads(self.content or b"null")


@dataclass
class ScriptedSession:
    """Answers like Harbor: Bearer challenge, token service, then the resource."""

    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    password: str = "secret"

    def get(self, url: str, **kw: Any) -> Reply:
        return self.request("GET", url, **kw)

    def request(self, method: str, url: str, headers: Mapping[str, str] | None = None, auth: Any = None,
                params: Any = None, **kw: Any) -> Reply:
        self.calls.append((method, url, auth or (headers or {}).get("Authorization")))
        if url.endswith("/service/token"):
            if auth != ("robot$ml+ci", self.password):
                return Reply(401, content=b'{"errors":[{"code":"UNAUTHORIZED","message":"unauthorized"}]}')
            return Reply(200, content=json.dumps({"token": f"tok-{params['scope']}"}).encode())
        if (headers or {}).get("Authorization") != "Bearer tok-repository:ml/pytorch:pull":
            return Reply(401, {"WWW-Authenticate": 'Bearer realm="https://h.test/service/token",service="harbor-registry"'})
        return Reply(200, {"Content-Type": "application/json"}, b'{"name":"ml/pytorch","tags":["a","b"]}')


def test_bearer_token_auth_like_harbor() -> None:
    session = ScriptedSession()
    reg = registry.Registry("h.test", Credentials("robot$ml+ci", "secret"), session=session)  # type: ignore[arg-type]
    assert reg.tags("ml/pytorch") == ["a", "b"]
    assert [c[1] for c in session.calls] == ["https://h.test/v2/", "https://h.test/v2/ml/pytorch/tags/list?n=1000",
                                             "https://h.test/service/token", "https://h.test/v2/ml/pytorch/tags/list?n=1000"]


def test_a_refused_token_is_a_401_with_the_login_hint_and_no_password() -> None:
    session = ScriptedSession(password="other")
    reg = registry.Registry("h.test", Credentials("robot$ml+ci", "secret", "file /run/creds"), session=session)  # type: ignore[arg-type]
    with pytest.raises(registry.RegistryHTTPError) as err:
        reg.tags("ml/pytorch")
    assert err.value.status == 401 and not err.value.transient
    assert str(err.value).startswith("pull h.test/ml/pytorch failed: HTTP 401 UNAUTHORIZED: unauthorized (not logged in to h.test")
    assert str(err.value).endswith("[credentials used: file /run/creds]") and "secret" not in str(err.value)


@pytest.mark.parametrize("header, parsed", [
    ('Bearer realm="https://h/service/token",service="harbor-registry",scope="repository:a:pull"',
     ("bearer", {"realm": "https://h/service/token", "service": "harbor-registry", "scope": "repository:a:pull"})),
    ('Basic realm="test"', ("basic", {"realm": "test"})),
])
def test_parse_challenge(header: str, parsed: tuple[str, dict[str, str]]) -> None:
    assert registry.parse_challenge(header) == parsed


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1:5000", True), ("localhost:5000", True), ("[::1]:5000", True), ("harbor.example.com", False), ("10.0.0.1:5000", False),
    ("127.0.0.2:5000", True), ("127.255.255.254", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("128.0.0.1:5000", False), ("[fd00::1]:5000", False), ("localhost.example.com", False),
])
def test_plain_http_is_allowed_only_on_loopback_by_default(host: str, loopback: bool) -> None:
    assert registry.is_loopback(host) is loopback


# -- what a push sent -----------------------------------------------------------------------------


def test_traffic_pairs_push_lines_with_the_manifest_layers_by_diff_id() -> None:
    diff_ids = ["sha256:" + c * 64 for c in "abc"]
    manifest = json.dumps({"layers": [{"digest": "sha256:1", "size": 100}, {"digest": "sha256:2", "size": 2000},
                                      {"digest": "sha256:3", "size": 30}]}).encode()
    lines = ["aaaaaaaaaaaa Preparing", "aaaaaaaaaaaa Layer already exists", "bbbbbbbbbbbb Mounted from imagesmith/other",
             "cccccccccccc Waiting", "cccccccccccc Pushed", "t: digest: sha256:9 size: 1"]
    assert publish.traffic(manifest, diff_ids, lines) == publish.Traffic(30, 1, 2100, 2)


def test_a_release_reports_its_traffic(world: World) -> None:
    data = world.release([item("2.9.1")])
    assert data["traffic"] == {"pushed_bytes": 0, "pushed_layers": 0, "existing_bytes": 0, "existing_layers": 0}
    assert data["targets"][0]["traffic"] == data["traffic"]
    assert "Sent 0.00 GB in 0 layers; the registry already had 0 layers (0.00 GB)." in (world.out / "release.md").read_text()


# -- the evidence step ---------------------------------------------------------------------------------


def test_evidence_is_attached_to_each_released_digest_and_listed_in_the_report(world: World) -> None:
    seen: list[tuple[str, str | None]] = []

    def attach(r: publish.TargetRelease) -> dict[str, Any]:
        seen.append((r.target, r.digest))
        return {"subject": r.digest, "artifacts": [{"kind": "sbom", "digest": "sha256:" + "5b" * 32, "size": 900,
                                                    "status": "pushed", "signed": True}]}

    data = world.release([item("2.9.1"), item("2.9.1", "cv", verified=False)], evidence=attach)
    digest = data["targets"][0]["digest"]
    assert seen == [("2.9.1-base", digest)] and [t["status"] for t in data["targets"]] == ["pushed", "not-verified"]
    assert data["targets"][0]["evidence"]["subject"] == digest and data["targets"][1]["evidence"] is None
    assert data["evidence"] == [data["targets"][0]["evidence"]]
    markdown = (world.out / "release.md").read_text()
    assert f"| `{digest[:19]}` | sbom | - | 1 pushed |" in markdown


def test_a_failed_evidence_step_fails_the_release_but_keeps_what_was_pushed(world: World) -> None:
    def attach(r: publish.TargetRelease) -> dict[str, Any]:
        raise RegistryError("push 127.0.0.1:5000/ml/pytorch failed: HTTP 403 DENIED (give the robot push permission)")

    data = world.release([item("2.9.1")], evidence=attach)
    assert not data["ok"] and data["targets"][0]["status"] == "pushed"
    assert data["errors"] == ["2.9.1-base: evidence not attached: attaching evidence to reg.test:5000/ml/pytorch:"
                              "2.9.1-cuda12.8-cudnn9-py3.11-ubuntu22.04-base-20261130: push 127.0.0.1:5000/ml/pytorch failed: "
                              "HTTP 403 DENIED (give the robot push permission)"]


# -- a registry's own answer, tags that do not outlive a failed push, interrupted runs -------------------


def storage_full() -> registry.RegistryHTTPError:
    said = "HTTP 500 UNKNOWN: unknown error (filesystem: write /data/x: No space left on device (errno 28))"
    return registry.RegistryHTTPError(f"push reg.test:5000/ml/pytorch failed: {said} (...)", 500, False, said=said,
                                      hint="the registry's storage is full or refuses writes: free space")


def test_a_full_registry_stops_the_release_at_once_with_its_answer(world: World) -> None:
    world.reg.upload_fail = [storage_full()]  # the upload check before the first push
    data = world.release([item("2.9.1")])
    assert world.sleeps == [] and world.engine.pushes == [] and world.engine.auths == []
    assert data["errors"] == ["starting an upload to reg.test:5000/ml/pytorch: push reg.test:5000/ml/pytorch failed: HTTP 500 "
                              "UNKNOWN: unknown error (filesystem: write /data/x: No space left on device (errno 28)) (...)"]
    assert world.engine.local_tags == {}  # nothing tagged for a push that never started


def test_a_push_the_registry_refuses_shows_its_answer_and_is_not_retried(world: World) -> None:
    world.engine.fail = [push_error("reg.test:5000/ml/pytorch:t", "received unexpected HTTP status: 500 Internal Server Error", {})]
    world.reg.upload_fail = [None, storage_full()]  # fine before the push; full when asked why it failed
    data = world.release([item("2.9.1")])
    ref = "reg.test:5000/ml/pytorch:2.9.1-cuda12.8-cudnn9-py3.11-ubuntu22.04-base-20261130"
    assert world.sleeps == [] and len(world.engine.auths) == 1 and world.reg.upload_checks == 2
    assert data["errors"] == [f"push {ref} failed: received unexpected HTTP status: 500 Internal Server Error; the registry "
                              "says: HTTP 500 UNKNOWN: unknown error (filesystem: write /data/x: No space left on device (errno 28)) "
                              "(the registry's storage is full or refuses writes: free space)"]
    assert ref not in world.engine.local_tags  # the release tag went with the failed push


def test_a_transient_server_error_the_registry_no_longer_shows_is_retried(world: World) -> None:
    world.engine.fail = [push_error("r:t", "received unexpected HTTP status: 503 Service Unavailable", {})]
    data = world.release([item("2.9.1")])
    assert data["ok"] and world.sleeps == [1.0] and len(world.engine.pushes) == 1


def test_an_interrupted_release_says_so_and_keeps_no_tag(world: World) -> None:
    world.engine.fail = [KeyboardInterrupt()]  # type: ignore[list-item]
    with pytest.raises(KeyboardInterrupt):
        world.release([item("2.9.1"), item("2.9.2")])
    data = json.loads((world.out / "release.json").read_text())
    assert (data["state"], data["interrupted_by"], data["ok"]) == ("interrupted", "SIGINT", False)
    assert [t["status"] for t in data["targets"]] == ["not-pushed", "not-pushed"] and world.engine.local_tags == {}
