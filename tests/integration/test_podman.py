"""The Podman tier: imagesmith against Debian's podman 4.3 through its Docker-compatible API
(``podman system service`` on a socket, as ``runtime: podman`` fleets and Podman hosts use it).

One build of a torch CPU base on the suite's Debian base (carried over from the Docker engine by the engines'
own save and load), that image verified, a GPU request Podman's Docker API drops (found after create, never
silently), GPUs by CDI name through Podman's own API (a spec whose device node is /dev/null), and a push to a
registry on loopback whose digest is the registry's. Skipped, saying why, where podman or its socket is missing
(``bash scripts/ensure-host.sh`` installs it and starts the service).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from imagesmith.edges.engine import Engine, RunSpec, build_step
from imagesmith.edges.registry import Credentials, Registry
from imagesmith.errors import GpuRequestDropped, GpuRuntimeMissing
from imagesmith.model import engines, matrix, plan
from imagesmith.model.buildreport import BuildReport
from imagesmith.model.ref import ImageRef
from imagesmith.stages.building import build
from imagesmith.stages.verify import incontainer, served, verify
from tests.conftest import LOCAL_ROOTS
from tests.integration.engine_fixtures import MatrixFactory

pytestmark = [pytest.mark.integration, pytest.mark.podman]
SOCKET = os.environ.get("IMAGESMITH_PODMAN_HOST", engines.PODMAN_SOCKET)
RUN = uuid.uuid4().hex[:8]
CPU = verify.VerifyOptions(tier="quick", gpus="none", timeout_s=300)
CDI_KIND = f"imagesmith-test-{RUN}.example/gpu"  # a kind of its own: no other lookup of the CDI folders sees it


@pytest.fixture(scope="session")
def podman() -> Engine:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed: bash scripts/ensure-host.sh installs it and starts its Docker API")
    import docker

    try:
        engine = Engine(client=docker.DockerClient(base_url=SOCKET, timeout=600))
        kind = engine.kind()
    except Exception as exc:  # noqa: BLE001 - any answer but Podman's is a skip with the reason
        pytest.skip(f"Podman's Docker API does not answer at {SOCKET} ({exc}): bash scripts/ensure-host.sh starts it")
    assert kind.podman, f"{SOCKET} answers as {kind.describe()}, not Podman"
    return engine


@pytest.fixture(scope="session")
def podman_base(podman: Engine, engine: Engine, debian_base: str) -> Iterator[str]:
    """The suite's Debian 12 base, carried from the Docker engine into Podman (docker save | podman load)."""
    loaded = podman.load(engine.client.api.get_image(debian_base))
    assert loaded, f"Podman loaded nothing from the archive of {debian_base}"
    yield debian_base
    podman.remove_image(debian_base, force=True)


class Recorder:
    def __init__(self) -> None:
        self.updates: list[tuple[str, str, str]] = []
        self.notes: list[str] = []

    def update(self, item: str, state: str, detail: str = "") -> None:
        self.updates.append((item, state, detail))

    def note(self, message: str) -> None:
        self.notes.append(message)

    def close(self) -> None:
        pass


def _dangling(podman: Engine) -> set[str]:
    return set(podman.client.api.images(filters={"dangling": True}, quiet=True))


@pytest.fixture(scope="session")
def podman_built(podman: Engine, podman_base: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BuildReport, build.Builder, Recorder]]:
    """One build through Podman: a torch CPU base (one stage) and a child layer (two stages: a builder, then only
    the files of its new distributions copied out)."""
    folder = tmp_path_factory.mktemp("podman-build")
    factory = MatrixFactory(podman, podman_base, folder, repository=f"imagesmith-test/podman-{RUN}")
    before = _dangling(podman)
    m = matrix.load(factory("layers:\n  base: {toolchain: false}\n  tools: {packages: ['tabulate==0.9.0']}\n"), allowed_roots=LOCAL_ROOTS)
    shown = Recorder()
    builder = build.Builder(plan.expand(m, "20261130"), m, podman, folder / "build", display=shown)
    report = builder.run()
    yield report, builder, shown
    factory.cleanup()
    for image_id in _dangling(podman) - before:
        try:
            podman.remove_image(image_id, force=False)
        except Exception:  # noqa: BLE001 - still used by a kept image: leave it
            pass


def test_a_build_through_podman_shows_its_steps_prunes_its_stages_and_tags_as_named(podman: Engine,
                                                                                    podman_built: Any) -> None:
    report, builder, shown = podman_built
    base, result = report.results  # the child: two stages
    assert report.ok, [base.error, result.error]
    log = Path(result.log).read_text()
    steps = [line for line in log.splitlines() if build_step(line)]
    assert "[1/2] STEP 1/" in log and "[2/2] STEP 1/" in log, log[:2000]
    assert result.steps == len(steps) > 0  # every stage's steps, as Podman numbers them per stage
    progress = [detail for _, state, detail in shown.updates if state == "building" and "step" in detail]
    assert any(d.startswith("stage 1/2 step ") for d in progress) and any(d.startswith("stage 2/2 step ") for d in progress), progress
    assert builder.stages, "no builder stage was recorded from Podman's '--> <id>' lines"
    assert all(podman.image(stage) is None for stage in builder.stages), "a builder stage this run made was left behind"
    assert f"pruned {len(builder.stages)} builder stages this run made" in shown.notes
    image = podman.image(result.image_id or "")
    assert image is not None
    target = builder.plan.targets[1].image
    assert target in image.tags and not any(t.startswith(("docker.io/", "localhost/")) for t in image.tags), image.tags
    assert "not consumed" not in log, "Podman was given build args the Dockerfile does not use"
    assert report.to_json()["engine"] | {"version": "?"} == {"name": "Podman", "version": "?", "api": "1.41", "rootless": False}


def test_verify_through_podman_names_the_engine_and_no_digest_podman_made_up(podman: Engine, podman_built: Any) -> None:
    _, builder, _ = podman_built
    outcome = incontainer.verify_image(podman, builder.plan.targets[0].image, CPU, pull=False)
    failed = [c for c in outcome.report.to_json()["checks"] if c["status"] == "fail"]
    assert outcome.ok, failed
    assert outcome.report.to_json()["engine"]["name"] == "Podman" and outcome.report.to_json()["mode"]["mode"] == "cpu"
    held = podman.image(builder.plan.targets[0].image)
    assert held is not None and held.repo_digests  # Podman's own digest of an image no registry has seen ...
    assert outcome.report.to_json()["image"]["digests"] == []  # ... is never recorded as verified
    assert any("none read back from a registry" in n for n in outcome.report.to_json()["notes"])
    assert podman.containers_with_label("io.imagesmith.run") == []


def test_a_gpu_request_podman_drops_is_found_after_create_and_said(podman: Engine, podman_base: str, podman_built: Any) -> None:
    with pytest.raises(GpuRequestDropped) as dropped:
        podman.run(RunSpec(image=podman_base, command=["true"], gpus="all", labels={"io.imagesmith.run": f"podman-{RUN}"}))
    assert "Podman 4.3.1 (API 1.41, rootful) created it without the GPUs asked for (--gpus all: " \
           "HostConfig.DeviceRequests came back empty)" in str(dropped.value)
    assert dropped.value.fix == engines.FIX_PODMAN_GPU
    assert podman.containers_with_label("io.imagesmith.run", f"podman-{RUN}") == []  # removed, never started
    # verify --gpu-runtime nvidia --require-gpu: the reason travels to the verdict, never "none visible" alone
    _, builder, _ = podman_built
    options = verify.VerifyOptions(tier="quick", gpus="all", gpu_runtime="nvidia", require_gpu=True, timeout_s=300)
    outcome = incontainer.verify_image(podman, builder.plan.targets[0].image, options, pull=False)
    assert not outcome.ok
    assert outcome.report.to_json()["gpu_path"]["path"] == "none"
    assert outcome.report.to_json()["gpu_path"]["why"].startswith("the engine did not honour --gpus (creating a container of ")
    assert f"ran without GPUs: {engines.FIX_PODMAN_GPU}" in outcome.report.to_json()["notes"]


@pytest.fixture()
def cdi_spec() -> Iterator[str]:
    """A spec Podman reads (/var/run/cdi: Podman 4.3 has no other folder) naming /dev/null as a GPU; always removed."""
    folder = Path("/var/run/cdi")
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"imagesmith-test-{RUN}.json"
    path.write_text(json.dumps({
        "cdiVersion": "0.5.0", "kind": CDI_KIND,
        "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/imagesmith-gpu0", "hostPath": "/dev/null"}]}}],
        "containerEdits": {"env": ["IMAGESMITH_CDI=applied"]}}))
    try:
        yield f"{CDI_KIND}=0"
    finally:
        path.unlink(missing_ok=True)
        if made and not any(folder.iterdir()):
            folder.rmdir()


def test_gpus_reach_a_podman_container_by_cdi_name_and_a_name_no_spec_offers_is_refused(podman: Engine, podman_base: str,
                                                                                          cdi_spec: str) -> None:
    script = "test -c /dev/imagesmith-gpu0 && echo node=char; echo env=$IMAGESMITH_CDI; ulimit -n"
    done = podman.run(RunSpec(image=podman_base, command=["sh", "-c", script], cdi_devices=(cdi_spec,), mem_limit="1g",
                              labels={"io.imagesmith.run": f"podman-{RUN}"}))
    assert (done.exit_code, done.stdout.split()[:2]) == (0, ["node=char", "env=applied"]), done.stderr
    with pytest.raises(GpuRuntimeMissing) as refused:
        podman.run(RunSpec(image=podman_base, command=["true"], cdi_devices=(f"{CDI_KIND}=7",)))
    assert f"setting up CDI devices: unresolvable CDI devices {CDI_KIND}=7" in str(refused.value)
    assert refused.value.fix == engines.FIX_PODMAN_GPU
    assert podman.containers_with_label("io.imagesmith.run", f"podman-{RUN}") == []


def test_a_push_through_podman_records_the_digest_the_registry_serves(podman: Engine, podman_base: str, plain_registry: Any) -> None:
    from tests.integration.conftest import PASSWORD, USER

    repository = f"{plain_registry.host}/imagesmith-test/podman-{RUN}"
    info = podman.image(podman_base)
    assert info is not None
    podman.tag(info.id, repository, "t1")
    try:
        lines: list[str] = []
        digest = podman.push(repository, "t1", {"username": USER, "password": PASSWORD}, lines.append)
        client = Registry(plain_registry.host, Credentials(USER, PASSWORD))
        back = client.manifest(f"imagesmith-test/podman-{RUN}", "t1")
        assert back is not None and back.digest == digest and back.config_digest == info.id
        outcome_digests, said = served.served_digests(client, ImageRef.parse(f"{repository}:t1"), podman.image(f"{repository}:t1"), podman.kind())
        assert (outcome_digests, said) == ([f"{repository}@{digest}"], "")
    finally:
        podman.untag(f"{repository}:t1")
