"""Fixtures for tests against the real Docker engine and a real registry.

``registry_server`` starts Debian's ``docker-registry`` (CNCF distribution
2.8) on 127.0.0.1 with a free port, htpasswd (bcrypt) auth and storage in a
temporary folder; ``tls=True`` serves HTTPS with a CA this fixture makes
with openssl, installed for the docker engine (and skopeo) at
``/etc/docker/certs.d/127.0.0.1:PORT/ca.crt``. ``tiny_image`` makes small
labelled images with ``docker import``; ``plain_registry`` is one more
registry (plain HTTP) and ``second_engine`` a second ``dockerd`` (another CI
runner, for the staging tests). Every fixture stops what it started and
removes what it created, whatever the test did.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tarfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.integration import groups, timeline
from tests.integration.disk import WORKER_KEY, DiskWatch

# The build tests' fixtures live in engine_fixtures.py; registered here.
from tests.integration.engine_fixtures import (  # noqa: F401
    build_matrix,
    built_images,
    cuda_base,
    cuda_cells,
    debian_base,
    engine,
    private_index,
    sources_port,
    trixie_base,
)
from tests.integration.multiarch_fixtures import python_images  # noqa: F401
from tests.integration.slurm_fixtures import fleet_images, slurm_cluster, slurm_env  # noqa: F401
from tests.loopback import unused_port

CERTS_D = Path("/etc/docker/certs.d")
USER, PASSWORD = "robot$ml+ci", "it-s3cret:pw"


def _missing_tools(*tools: str) -> list[str]:
    return [t for t in tools if shutil.which(t) is None]


def _docker_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def registry_engine() -> Any:
    """The Docker engine, or a skip saying what is missing for the registry tests."""
    missing = _missing_tools("docker", "docker-registry", "skopeo", "htpasswd", "openssl")
    if missing:
        pytest.skip(f"registry tests need {', '.join(missing)} (bash scripts/ensure-host.sh installs them)")
    if not _docker_answers():
        pytest.skip("`docker info` fails: no Docker engine (bash scripts/ensure-host.sh starts one)")
    from imagesmith.edges.engine import Engine

    return Engine()


def free_port() -> int:
    return unused_port()


@dataclass
class RegistryServer:
    """One docker-registry process; ``stop``/``start`` keep port and storage."""

    root: Path
    tls: bool
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    ca: Path | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def configure(self) -> None:
        (self.root / "htpasswd").write_text(subprocess.run(
            ["htpasswd", "-Bbn", USER, PASSWORD], check=True, capture_output=True, text=True).stdout)
        http: dict[str, Any] = {"addr": self.host}
        if self.tls:
            self.ca = make_certificates(self.root)
            http["tls"] = {"certificate": str(self.root / "server.crt"), "key": str(self.root / "server.key")}
        config = {"version": 0.1, "log": {"level": "warn"}, "http": http,
                  "storage": {"filesystem": {"rootdirectory": str(self.root / "data")}, "delete": {"enabled": True}},
                  "auth": {"htpasswd": {"realm": "imagesmith-test", "path": str(self.root / "htpasswd")}}}
        (self.root / "config.yml").write_text(json.dumps(config))  # JSON is YAML

    def start(self) -> None:
        log = (self.root / "registry.log").open("ab")
        self.proc = subprocess.Popen(["docker-registry", "serve", str(self.root / "config.yml")], stdout=log, stderr=log)
        deadline = time.monotonic() + 120  # a hang guard: a loaded host starts it slowly
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"docker-registry exited {self.proc.returncode}: {(self.root / 'registry.log').read_text()[-2000:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"docker-registry did not listen on {self.host} within 120 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def skopeo(self, *args: str, creds: str = f"{USER}:{PASSWORD}") -> subprocess.CompletedProcess[str]:
        tls = ["--tls-verify=true"] if self.tls else ["--tls-verify=false"]
        cmd = ["skopeo", args[0], *tls, "--creds", creds, *args[1:]]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

    def inspect(self, repo: str, tag: str) -> dict[str, Any]:
        done = self.skopeo("inspect", f"docker://{self.host}/{repo}:{tag}")
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout))

    def list_tags(self, repo: str) -> list[str]:
        done = self.skopeo("list-tags", f"docker://{self.host}/{repo}")
        if done.returncode != 0 and ("NAME_UNKNOWN" in done.stderr or "404 (Not Found)" in done.stderr):
            return []
        assert done.returncode == 0, done.stderr
        return sorted(json.loads(done.stdout)["Tags"] or [])


def make_certificates(root: Path) -> Path:
    """A CA and a server certificate for 127.0.0.1 signed by it; returns the CA file."""
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=root)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=imagesmith test CA")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (root / "san.ext").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.crt", "-days", "2", "-extfile", "san.ext")
    return root / "ca.crt"


@pytest.fixture(params=["http", "tls"])
def registry_server(request: pytest.FixtureRequest, registry_engine: Any, tmp_path: Path) -> Iterator[RegistryServer]:
    """A running registry (plain HTTP and TLS variants); always stopped, CA always removed."""
    server = RegistryServer(tmp_path / "registry", tls=request.param == "tls")
    server.root.mkdir()
    server.configure()
    created_certs_d = not CERTS_D.exists()
    trust = CERTS_D / server.host
    try:
        if server.ca:
            trust.mkdir(parents=True, exist_ok=True)
            shutil.copy(server.ca, trust / "ca.crt")
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(trust, ignore_errors=True)
        if created_certs_d and CERTS_D.is_dir() and not any(CERTS_D.iterdir()):
            CERTS_D.rmdir()


@pytest.fixture()
def second_engine(registry_engine: Any) -> Iterator[Any]:
    """Another Docker engine on this machine (its own dockerd, data root, exec root, socket and
    bridge; see tests/integration/second_engine.py), always stopped and removed afterwards."""
    from tests.integration.second_engine import SecondEngine

    missing = _missing_tools("dockerd", "ip")
    if missing:
        pytest.fail(f"the two-engine tests need {', '.join(missing)} (bash scripts/ensure-host.sh installs docker.io)")
    other = SecondEngine()
    try:
        yield other.start()
    finally:
        other.stop()


@pytest.fixture()
def plain_registry(registry_engine: Any, tmp_path: Path) -> Iterator[RegistryServer]:
    """One registry over plain HTTP on 127.0.0.1 (which every engine may use without TLS)."""
    server = RegistryServer(tmp_path / "registry", tls=False)
    server.root.mkdir()
    server.configure()
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture()
def tiny_image(registry_engine: Any, tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Make a tiny labelled image (``docker import`` of a one-file tarball);
    every image made (with every tag publish added) is removed afterwards."""
    made: list[str] = []
    repo = f"imagesmith-test/{uuid.uuid4().hex[:12]}"

    def make(labels: dict[str, str], payload_mb: int = 0) -> str:
        root = tmp_path / f"rootfs-{len(made)}"
        (root / "etc").mkdir(parents=True)
        (root / "etc" / "imagesmith-test").write_text(uuid.uuid4().hex + "\n")
        if payload_mb:  # incompressible, so the push takes a while
            with (root / "etc" / "payload.bin").open("wb") as fh:
                for _ in range(payload_mb):
                    fh.write(os.urandom(1 << 20))
        tar = tmp_path / f"rootfs-{len(made)}.tar"
        with tarfile.open(tar, "w") as out:
            out.add(root, arcname=".")
        label = " ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        image_id = str(registry_engine.import_rootfs(tar, repo, f"t{len(made)}", [f"LABEL {label}", 'CMD ["/bin/true"]']))
        made.append(image_id)
        return image_id

    try:
        yield make
    finally:
        for image_id in made:
            registry_engine.remove_image(image_id, force=True)


# -- two workers: which modules run where, in which order (tests/integration/groups.py) ---------------------


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """The run's order: the groups' modules first, as groups.py lists them, then the other modules, longest first.
    Under xdist, work units go out to the workers in this order."""
    items.sort(key=lambda item: groups.rank(item.nodeid))


# -- disk: where the suite's space goes (tests/integration/disk.py) ---------------------------------------


_DISK = DiskWatch()
_TIMELINE = timeline.Timeline()


@pytest.fixture(scope="session", autouse=True)
def disk_watch() -> DiskWatch:
    """Starts the disk watch with the first integration test (this conftest loads at collection, after the
    session started)."""
    _DISK.begin()
    return _DISK


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """Each test's span, in the process that runs it (an xdist controller runs none)."""
    _TIMELINE.start(item.nodeid, os.environ.get("PYTEST_XDIST_WORKER", "main"))
    try:
        return (yield)
    finally:
        _TIMELINE.finish(item.nodeid)


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    if _DISK.paths:
        _DISK.sample(nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """An xdist worker hands its samples to the controller, which prints the run's summary (tests/conftest.py)."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None and _DISK.paths:
        output[WORKER_KEY] = _DISK.to_json()
    if output is not None:
        output[timeline.WORKER_KEY] = _TIMELINE.to_json()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if _DISK.paths:
        terminalreporter.section("disk")
        for line in _DISK.lines():
            terminalreporter.write_line(line)
    if _TIMELINE.spans:
        terminalreporter.section("timeline (modules by start)")
        for line in _TIMELINE.lines():
            terminalreporter.write_line(line)
