"""A real one-node Slurm cluster and a registry holding a good and a bad image.

``slurm_cluster`` starts slurmctld, slurmd and munge from Debian's packages
with scripts/local-slurm.sh in a temporary folder, on free ports, and always
stops them (and cancels their jobs). ``fleet_images`` pushes two images to a
registry with htpasswd auth: the torch CPU base imagesmith built (passes
``imagesmith verify`` in CPU mode) and the same image labelled with another
torch (fails versions.torch). Each is an image of its own (a label on the
base), so the containers the fleet starts from them are told apart from other
tests' containers of the base (another xdist worker verifying it meanwhile).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from imagesmith.edges.engine import Engine
from tests.integration.engine_fixtures import BuiltImages, docker_build
from tests.loopback import unused_port

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "local-slurm.sh"
SLURM_TOOLS = ("slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "munged")


@dataclass
class SlurmCluster:
    folder: Path
    conf: Path

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def cmd(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env, timeout=60)

    def active_jobs(self, ids: list[str]) -> list[str]:
        """Which of ``ids`` squeue still shows as pending or running."""
        out = self.cmd("squeue", "--noheader", "--states=PENDING,RUNNING,COMPLETING,CONFIGURING", "-o", "%i").stdout
        return sorted(set(out.split()) & set(ids))

    def pids(self, job_id: str) -> list[int]:
        lines = self.cmd("scontrol", "listpids", job_id).stdout.splitlines()[1:]
        return [int(line.split()[0]) for line in lines if line.split() and line.split()[0].isdigit()]


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    missing = [t for t in SLURM_TOOLS if shutil.which(t) is None]
    if missing:
        pytest.fail(f"Slurm tests need {', '.join(missing)}: run scripts/ensure-host.sh (installs slurmctld slurmd slurm-client munge)")
    folder = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "IMAGESMITH_SLURM_DIR": str(folder), "IMAGESMITH_SLURM_PORT": str(unused_port(3))}
    try:
        done = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, f"local-slurm.sh start failed: {done.stderr}"
        yield SlurmCluster(folder, folder / "slurm.conf")
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop"], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture()
def slurm_env(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> SlurmCluster:
    """SLURM_CONF for this process (the fleet runner's sbatch/squeue inherit it)."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    return slurm_cluster


@dataclass
class FleetImages:
    good: str  # REF@sha256:...
    bad: str
    good_id: str
    bad_id: str
    credentials: Path
    registry: Any


@pytest.fixture(scope="session")
def fleet_images(engine: Engine, built_images: BuiltImages, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetImages]:
    from tests.integration.conftest import PASSWORD, USER, RegistryServer

    folder = tmp_path_factory.mktemp("fleet-registry")
    server = RegistryServer(folder / "registry", tls=False)
    server.root.mkdir()
    server.configure()
    server.start()
    creds = folder / "credentials"
    creds.write_text(f"{USER}:{PASSWORD}\n")
    suffix = uuid.uuid4().hex[:8]
    good_tag, bad_tag = f"imagesmith-test/fleet-good:{suffix}", f"imagesmith-test/fleet-bad:{suffix}"
    repo = f"{server.host}/imagesmith-test/fleet-{uuid.uuid4().hex[:8]}"
    try:
        docker_build(engine, f"FROM {built_images.cpu_base}\nLABEL com.example.imagesmith.fleet=good\n", good_tag, folder)
        docker_build(engine, f"FROM {built_images.cpu_base}\nLABEL io.imagesmith.torch=2.9.1\n", bad_tag, folder)
        good_id, bad_id = engine.image(good_tag).id, engine.image(bad_tag).id  # type: ignore[union-attr]
        auth = {"username": USER, "password": PASSWORD}
        refs = {}
        for name, image_id in (("good", good_id), ("bad", bad_id)):
            engine.tag(image_id, repo, name)
            refs[name] = f"{repo}@{engine.push(repo, name, auth, lambda line: None)}"
        yield FleetImages(refs["good"], refs["bad"], good_id, bad_id, creds, server)
    finally:
        server.stop()
        for ref in (*engine.tags_in(repo), good_tag, bad_tag):  # the tests' releases tag there too
            try:
                engine.remove_image(ref, force=False)
            except Exception:  # noqa: BLE001 - already gone
                pass
