"""Registry faults through the real engine: a registry whose storage is a tiny
tmpfs (disk full), and Ctrl-C during a push. What the registry said reaches the
release report; nothing is retried that retrying cannot fix; the engine keeps
no release tag from a push that did not land; release.json says how the run ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from imagesmith.edges.registry import Registry
from imagesmith.stages.release.publish import Backoff, Publisher
from tests.integration.conftest import CERTS_D, RegistryServer
from tests.integration.engine_fixtures import CountingEngine
from tests.integration.test_registry import GOOD, POLICY, REPO, item, tag

pytestmark = [pytest.mark.integration, pytest.mark.registry]


@pytest.fixture()
def full_registry(registry_engine: Any, tmp_path: Path) -> Iterator[RegistryServer]:
    """A registry whose storage is a 2 MiB tmpfs (needs root to mount); always unmounted."""
    server = RegistryServer(tmp_path / "registry", tls=False)
    data = server.root / "data"
    data.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(data)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the registry's storage: {mounted.stderr.strip()}")
    try:
        server.configure()
        server.start()
        yield server
    finally:
        server.stop()
        subprocess.run(["umount", str(data)], capture_output=True)


def publisher(engine: Any, server: RegistryServer, out: Path, **seams: Any) -> Publisher:
    from imagesmith.model.matrix.records import ImageSpec

    seams.setdefault("backoff", Backoff(tries=3, first=0.05))
    return Publisher(engine, Registry(server.host, GOOD), ImageSpec(REPO, server.host), POLICY, "20261130", out,
                     credentials=GOOD, **seams)


def upload_starts(server: RegistryServer) -> int:
    """How many blob uploads the registry was asked to start (its access log)."""
    return (server.root / "registry.log").read_text(errors="replace").count(f'"POST /v2/{REPO}/blobs/uploads/')


def engine_tags(engine: Any, image_id: str, host: str) -> list[str]:
    return [t for t in engine.image(image_id).tags if t.startswith(host)]


def test_a_full_registry_says_so_at_once_and_is_not_retried(registry_engine: Any, full_registry: RegistryServer,
                                                            tiny_image: Callable[..., str], tmp_path: Path) -> None:
    filler = Path(full_registry.root / "data" / "filler")
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k", "count=64"], capture_output=True)  # the disk is full
    one = item(tiny_image, "2.9.1")
    sleeps: list[float] = []
    counting = CountingEngine(registry_engine)
    publisher(counting, full_registry, tmp_path, sleep=sleeps.append).run([one])
    data = json.loads((tmp_path / "release.json").read_text())
    # no retries: imagesmith never waited to try again, the engine never pushed, the registry was asked once
    assert sleeps == [] and counting.calls["push"] == 0, (sleeps, counting.calls)
    assert upload_starts(full_registry) == 1, (full_registry.root / "registry.log").read_text()[-3000:]
    assert data["state"] == "complete" and data["ok"] is False and data["pushed"] == []
    (error,) = data["errors"]
    assert error.startswith(f"starting an upload to {full_registry.host}/{REPO}: push {full_registry.host}/{REPO} failed: HTTP 500 "
                            "UNKNOWN: unknown error (filesystem: write ")
    assert ": No space left on device (errno 28)" in error and "the registry's storage is full or refuses writes" in error
    assert engine_tags(registry_engine, one.image_id or "", full_registry.host) == []


def test_a_registry_filling_up_during_a_push_shows_its_answer(registry_engine: Any, full_registry: RegistryServer,
                                                              tiny_image: Callable[..., str], tmp_path: Path) -> None:
    big = item(lambda labels: tiny_image(labels, payload_mb=4), "2.9.1")  # 4 MiB of noise into 2 MiB of storage
    sleeps: list[float] = []
    publisher(registry_engine, full_registry, tmp_path, sleep=sleeps.append).run([big])
    data = json.loads((tmp_path / "release.json").read_text())
    assert data["ok"] is False and data["pushed"] == [] and sleeps == [], data["errors"]
    (error,) = data["errors"]
    ref = f"{full_registry.host}/{REPO}:{tag('2.9.1', 'base')}"
    assert error.startswith(f"push {ref} failed: ") and "the registry says: " in error
    assert "No space left on device (errno 28)" in error and "looks down or overloaded" not in error
    assert engine_tags(registry_engine, big.image_id or "", full_registry.host) == []  # the release tag went with the push


@pytest.mark.parametrize("registry_server", ["http"], indirect=True)
def test_ctrl_c_during_a_push_leaves_an_interrupted_release_and_no_tag(registry_engine: Any, registry_server: RegistryServer,
                                                                       tiny_image: Callable[..., str], tmp_path: Path) -> None:
    big = item(lambda labels: tiny_image(labels, payload_mb=96), "2.9.1")

    class CtrlC:
        """The real engine; Ctrl-C arrives once the layer upload is under way."""

        def __getattr__(self, name: str) -> Any:
            return getattr(registry_engine, name)

        def push(self, repository: str, tag_: str, auth: Any, on_line: Callable[[str], None]) -> str:
            def watch(line: str) -> None:
                on_line(line)
                if line.endswith("Preparing") and not sent:
                    sent.append(True)
                    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
            return str(registry_engine.push(repository, tag_, auth, watch))

    sent: list[bool] = []
    with pytest.raises(KeyboardInterrupt):
        publisher(CtrlC(), registry_server, tmp_path).run([big])
    assert sent
    data = json.loads((tmp_path / "release.json").read_text())
    assert (data["state"], data["interrupted_by"], data["ok"]) == ("interrupted", "SIGINT", False)
    assert data["pushed"] == [] and data["targets"][0]["status"] == "not-pushed"
    assert data["targets"][0]["error"] == "not pushed: the release was interrupted (SIGINT)"
    assert engine_tags(registry_engine, big.image_id or "", registry_server.host) == []
    time.sleep(2)  # the engine stops the push when its client goes
    assert registry_server.list_tags(REPO) == []
    assert not (CERTS_D / registry_server.host).exists()
