"""Releases against a real registry (docker-registry + htpasswd, plain and
TLS) through the real Docker engine, checked with skopeo: tags, digests,
labels; faults: wrong password, registry stopped midway, failed verification,
an older release after a newer one, a re-run that pushes nothing."""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import pytest

from imagesmith.edges.registry import Credentials, Registry, RegistryHTTPError
from imagesmith.model.matrix.records import ImageSpec
from imagesmith.model.policy import Evidence
from imagesmith.model.tags import FloatingTag, TagPolicy
from imagesmith.stages.release.publish import Backoff, Item, Publisher
from tests.integration.conftest import PASSWORD, USER, RegistryServer

pytestmark = [pytest.mark.integration, pytest.mark.registry]

REPO = "ml/pytorch-cuda"
POLICY = TagPolicy(floating=(FloatingTag("v{torch_minor}-{layer}"), FloatingTag("v{torch_minor}", (("layer", "base"),)),
                             FloatingTag("latest", (("layer", "base"),))))
GOOD = Credentials(USER, PASSWORD, "test")
TAG = "{torch}-cuda12.8-cudnn9-py3.11-ubuntu22.04-{layer}-{date}"
HTTP_ONLY = pytest.mark.parametrize("registry_server", ["http"], indirect=True)


def labels(torch: str, layer: str) -> dict[str, str]:
    """The labels imagesmith's templates put on an image."""
    return {"io.imagesmith.schema": "1", "io.imagesmith.torch": torch, "io.imagesmith.cuda": "12.8",
            "io.imagesmith.variant": "cu128", "io.imagesmith.cudnn": "9.10.2.21", "io.imagesmith.nccl": "2.27.5",
            "io.imagesmith.python": "3.11", "io.imagesmith.os": "ubuntu22.04", "io.imagesmith.layer": layer,
            "io.imagesmith.cell": f"{torch}-cu128-py3.11-ubuntu22.04"}


ON_GPU = Evidence(True, "gpu", 1, "GPU mode: 1 GPU (--gpus all)", "pass", {"pass": 12}, exclusive=True)
ON_CPU = Evidence(True, "cpu", 0, "CPU mode: no GPU visible (the Docker engine has no NVIDIA container runtime)", "skip",
                  {"skip": 12})


def item(make: Callable[[dict[str, str]], str], torch: str, layer: str = "base", verified: bool = True,
         how: Evidence = ON_GPU) -> Item:
    image_id = make(labels(torch, layer))
    measured = {"torch": f"{torch}+cu128", "cuda": "12.8", "cudnn": "9.10.2", "nccl": "2.27.5", "python": "3.11.9", "os": "ubuntu22.04"}
    return Item(f"{torch}-{layer}", layer, f"{torch}-cu128-py3.11-ubuntu22.04", image_id, measured, True, verified,
                {"ok": verified, "tier": "quick", "summary": {"ok": verified}}, evidence=replace(how, ok=verified))


def release(engine: Any, server: RegistryServer, out: Path, items: list[Item], date: str = "20261130",
            creds: Credentials = GOOD, registry_creds: Credentials | None = None, **seams: Any) -> dict[str, Any]:
    reg = Registry(server.host, registry_creds or creds)
    seams.setdefault("backoff", Backoff(tries=3, first=0.05))
    Publisher(engine, reg, ImageSpec(REPO, server.host), POLICY, date, out, credentials=creds, **seams).run(items)
    return dict(json.loads((out / "release.json").read_text()))


def tag(torch: str, layer: str, date: str = "20261130") -> str:
    return TAG.format(torch=torch, layer=layer, date=date)


def test_a_release_lands_with_its_tags_digests_and_labels_and_a_rerun_pushes_nothing(
        registry_engine: Any, registry_server: RegistryServer, tiny_image: Callable[[dict[str, str]], str], tmp_path: Path) -> None:
    items = [item(tiny_image, "2.9.1", "base"), item(tiny_image, "2.9.1", "cv")]
    first = release(registry_engine, registry_server, tmp_path / "r1", items)

    assert first["ok"], first["errors"] + [t["error"] for t in first["targets"]]
    assert registry_server.list_tags(REPO) == sorted([tag("2.9.1", "base"), tag("2.9.1", "cv"), "latest", "v2.9", "v2.9-base", "v2.9-cv"])
    for pushed in first["pushed"]:
        seen = registry_server.inspect(REPO, pushed["reference"].rsplit(":", 1)[1])
        assert (seen["Digest"], seen["Labels"]["io.imagesmith.torch"], seen["Labels"]["io.imagesmith.layer"]) == \
            (pushed["digest"], "2.9.1", pushed["target"].split("-")[-1])
    base = {t["target"]: t for t in first["targets"]}["2.9.1-base"]
    assert registry_server.inspect(REPO, "latest")["Digest"] == base["digest"]

    second = release(registry_engine, registry_server, tmp_path / "r2", items)
    assert second["ok"] and second["pushed"] == []
    assert sorted(u["reference"] for u in second["unchanged"]) == sorted(p["reference"] for p in first["pushed"])


@HTTP_ONLY
@pytest.mark.parametrize("refused_by", ["registry API", "docker push"])
def test_a_wrong_password_is_a_clear_error_and_nothing_is_recorded_as_pushed(
        registry_engine: Any, registry_server: RegistryServer, tiny_image: Callable[[dict[str, str]], str], tmp_path: Path,
        refused_by: str) -> None:
    bad = Credentials(USER, "not-the-password-42", "environment (IMAGESMITH_REGISTRY_USER)")
    sleeps: list[float] = []
    data = release(registry_engine, registry_server, tmp_path, [item(tiny_image, "2.9.1")], creds=bad,
                   registry_creds=bad if refused_by == "registry API" else GOOD, sleep=sleeps.append)

    assert data["ok"] is False and data["pushed"] == [] and data["unchanged"] == [] and sleeps == []
    assert len(data["errors"]) == 1 and f"docker login {registry_server.host}" in data["errors"][0]
    assert ("HTTP 401" if refused_by == "registry API" else "unauthorized: authentication required") in data["errors"][0]
    assert registry_server.list_tags(REPO) == []
    for name in ("release.json", "release.md", "push.log"):
        assert "not-the-password-42" not in (tmp_path / name).read_text()


@HTTP_ONLY
def test_a_registry_stopped_midway_fails_after_retries_and_the_next_run_completes(
        registry_engine: Any, registry_server: RegistryServer, tiny_image: Callable[[dict[str, str]], str], tmp_path: Path) -> None:
    items = [item(tiny_image, "2.9.1", "base"), item(tiny_image, "2.9.1", "cv")]
    pushes: list[str] = []

    def stop_before_second_push(ref: str) -> None:
        pushes.append(ref)
        if len(pushes) == 2:
            registry_server.stop()

    sleeps: list[float] = []
    broken = release(registry_engine, registry_server, tmp_path / "r1", items, before_push=stop_before_second_push, sleep=sleeps.append)
    assert [t["status"] for t in broken["targets"]] == ["pushed", "failed"] and sleeps == [0.05, 0.1]
    assert re.match(rf"push {re.escape(registry_server.host)}/{REPO}:{tag('2.9.1', 'cv')} failed 3 times in \d+\.\ds "
                    r"\(0\.15s of it waiting between tries\); last error: ", broken["errors"][0]), broken["errors"][0]
    assert "connection refused" in broken["errors"][0] and broken["floating"] == []
    assert [p["reference"] for p in broken["pushed"]] == [f"{registry_server.host}/{REPO}:{tag('2.9.1', 'base')}"]

    registry_server.start()
    fixed = release(registry_engine, registry_server, tmp_path / "r2", items)
    assert fixed["ok"] and [t["status"] for t in fixed["targets"]] == ["unchanged", "pushed"]
    assert registry_server.list_tags(REPO) == sorted([tag("2.9.1", "base"), tag("2.9.1", "cv"), "latest", "v2.9", "v2.9-base", "v2.9-cv"])


@HTTP_ONLY
def test_an_image_that_failed_verification_is_neither_tagged_nor_pushed(
        registry_engine: Any, registry_server: RegistryServer, tiny_image: Callable[[dict[str, str]], str], tmp_path: Path) -> None:
    good, bad = item(tiny_image, "2.9.1", "base"), item(tiny_image, "2.9.1", "cv", verified=False)
    data = release(registry_engine, registry_server, tmp_path, [good, bad])

    assert data["ok"] is False and [t["status"] for t in data["targets"]] == ["pushed", "not-verified"]
    assert registry_server.list_tags(REPO) == sorted([tag("2.9.1", "base"), "latest", "v2.9", "v2.9-base"])
    assert not [t for t in registry_engine.image(bad.image_id).tags if t.startswith(registry_server.host)]


@HTTP_ONLY
def test_a_cuda_image_verified_without_a_gpu_lands_marked_and_without_floating_tags(
        registry_engine: Any, registry_server: RegistryServer, tiny_image: Callable[[dict[str, str]], str], tmp_path: Path) -> None:
    cpu_verified = item(tiny_image, "2.9.1", "base", how=ON_CPU)
    refused = release(registry_engine, registry_server, tmp_path / "a", [cpu_verified])
    assert refused["ok"] is False and [t["status"] for t in refused["targets"]] == ["not-gpu-verified"]
    assert registry_server.list_tags(REPO) == []

    allowed = release(registry_engine, registry_server, tmp_path / "b", [cpu_verified], allow_cpu_verification=True)
    assert allowed["ok"] and allowed["floating"] == [] and allowed["targets"][0]["gpu_verified"] is False
    assert registry_server.list_tags(REPO) == [tag("2.9.1", "base") + "-not-gpu-verified"]
    assert "not GPU-verified" in (tmp_path / "b" / "release.md").read_text()

    gpu_verified = release(registry_engine, registry_server, tmp_path / "c", [item(tiny_image, "2.9.0")])
    assert {f["tag"]: f["action"] for f in gpu_verified["floating"]} == {"latest": "created", "v2.9": "created",
                                                                         "v2.9-base": "created"}


@HTTP_ONLY
def test_a_newer_torch_moves_the_floating_tags_and_an_older_one_does_not(
        registry_engine: Any, registry_server: RegistryServer, tiny_image: Callable[[dict[str, str]], str], tmp_path: Path) -> None:
    def digest(tag: str) -> str:
        return str(registry_server.inspect(REPO, tag)["Digest"])

    release(registry_engine, registry_server, tmp_path / "a", [item(tiny_image, "2.9.0")], date="20261101")
    newer = release(registry_engine, registry_server, tmp_path / "b", [item(tiny_image, "2.9.1")], date="20261115")
    assert {f["tag"]: f["action"] for f in newer["floating"]} == {"latest": "moved", "v2.9": "moved", "v2.9-base": "moved"}
    assert digest("latest") == digest("v2.9") == digest(tag("2.9.1", "base", "20261115"))

    older = release(registry_engine, registry_server, tmp_path / "c", [item(tiny_image, "2.9.0")], date="20261130")
    assert older["ok"] and [p["reference"].rsplit(":", 1)[1] for p in older["pushed"]] == [tag("2.9.0", "base")]
    assert {f["tag"]: f["action"] for f in older["floating"]} == {"latest": "kept", "v2.9": "kept", "v2.9-base": "kept"}
    assert digest("latest") == digest("v2.9") == digest(tag("2.9.1", "base", "20261115"))
    assert registry_server.inspect(REPO, "latest")["Labels"]["io.imagesmith.torch"] == "2.9.1"


@pytest.mark.parametrize("registry_server", ["tls"], indirect=True)
def test_the_client_trusts_the_registry_ca_and_says_what_to_do_without_it(
        registry_engine: Any, registry_server: RegistryServer, tiny_image: Callable[[dict[str, str]], str], tmp_path: Path) -> None:
    release(registry_engine, registry_server, tmp_path, [item(tiny_image, "2.9.1")])
    with_ca = Registry(registry_server.host, GOOD, ca_file=registry_server.ca, certs_d=tmp_path / "empty")
    assert with_ca.labels(REPO, "latest")["io.imagesmith.torch"] == "2.9.1"  # type: ignore[index]
    assert with_ca.exists(REPO, "v2.9") and not with_ca.exists(REPO, "v2.10")
    assert with_ca.manifest_digest(REPO, "latest") == registry_server.inspect(REPO, "latest")["Digest"]

    without = Registry(registry_server.host, GOOD, certs_d=tmp_path / "empty")
    with pytest.raises(RegistryHTTPError) as err:
        without.tags(REPO)
    assert str(err.value).startswith(f"TLS to the registry {registry_server.host} failed (CERTIFICATE_VERIFY_FAILED")
    assert str(err.value).endswith(f"--registry-ca FILE or put it at /etc/docker/certs.d/{registry_server.host}/ca.crt (where docker looks too)")


@HTTP_ONLY
@pytest.mark.skipif(not os.environ.get("IMAGESMITH_SLOW_TESTS"), reason="about 70 s (dockerd retries a layer upload for ~50 s); set IMAGESMITH_SLOW_TESTS=1")
def test_a_registry_killed_during_a_layer_upload_fails_clearly_and_the_next_run_completes(
        registry_engine: Any, registry_server: RegistryServer, tiny_image: Callable[..., str], tmp_path: Path) -> None:
    big = item(lambda labels: tiny_image(labels, payload_mb=64), "2.9.1")

    class KillingEngine:
        """The real engine; the registry is killed 0.3 s after the layer upload begins."""

        def __getattr__(self, name: str) -> Any:
            return getattr(registry_engine, name)

        def push(self, repository: str, tag: str, auth: Any, on_line: Callable[[str], None]) -> str:
            def watch(line: str) -> None:
                on_line(line)
                if line.endswith("Preparing") and not killer.is_alive() and not killed:
                    killer.start()
            return str(registry_engine.push(repository, tag, auth, watch))

    killed: list[bool] = []

    def kill() -> None:
        assert registry_server.proc is not None
        registry_server.proc.kill()
        killed.append(True)

    killer = threading.Timer(0.3, kill)

    broken = release(KillingEngine(), registry_server, tmp_path / "r1", [big])
    assert killed and broken["ok"] is False and broken["pushed"] == [] and "connection refused" in broken["errors"][0]
    registry_server.stop()
    registry_server.start()
    fixed = release(registry_engine, registry_server, tmp_path / "r2", [big])
    assert fixed["ok"] and [t["status"] for t in fixed["targets"]] == ["pushed"]
    assert registry_server.inspect(REPO, "latest")["Digest"] == fixed["targets"][0]["digest"]
