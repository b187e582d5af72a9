"""Fixtures for build tests against the real Docker engine.

``engine`` is the engine from the environment (``.ci/run`` starts one);
``debian_base`` bootstraps a Debian 12 base once per run with debootstrap
under a unique tag; ``built_images`` is the torch CPU base imagesmith builds on
it, once per run: the one cold build of the torch venv, whose layers make
every later build of that base in the run a build from the engine's layer
cache, as in a user's CI;
``build_matrix`` writes a matrix on that base whose images carry a per-test
repository, and removes every image it made afterwards; ``private_index``
serves a planted wheel behind basic auth. What is made once per run is shared
by the run's pytest-xdist workers (tests/integration/shared.py).
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import os
import shutil
import subprocess
import sys
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from imagesmith.edges import signing
from imagesmith.edges.engine import Engine
from imagesmith.errors import EngineError
from imagesmith.stages.tools import bootstrap
from tests.conftest import LOCAL_ROOTS
from tests.integration import shared
from tests.loopback import serve, unused_port

RUN = shared.run_id()  # one per run, the same in every xdist worker
TEST_LABEL = "com.example.imagesmith.test-run"  # io.imagesmith.* is imagesmith's own
LOCAL_SOURCES = """\
sources:
  torch_index_url: https://pypi.org/simple
  index_url: https://pypi.org/simple
  find_links: [/opt/wheels]
  ca_bundle: /etc/ssl/certs/ca-certificates.crt
  network: host
"""


@pytest.fixture(scope="session", autouse=True)
def sources_port() -> Iterator[int]:
    """This process's own loopback port for the package sources (IMAGESMITH_SOURCES_PORT, inherited by the CLI
    processes the tests start). The port is in the build arguments, so in the engine's layer cache key: the torch
    CPU base's cold build and every later build of it in this worker use one port, whatever else runs on the host
    (the other worker, another engineer's tests with the same sources), and so they keep hitting the cache."""
    from imagesmith.edges.sources import PORT_ENV

    before = os.environ.get(PORT_ENV)
    os.environ[PORT_ENV] = str(unused_port())
    yield int(os.environ[PORT_ENV])
    if before is None:
        os.environ.pop(PORT_ENV, None)
    else:
        os.environ[PORT_ENV] = before


@pytest.fixture(scope="session")
def engine() -> Engine:
    engine = Engine()
    try:
        engine.version()
    except EngineError as exc:
        pytest.fail(f"integration tests need a Docker engine ({exc}); run scripts/ensure-host.sh or make test")
    return engine


def bootstrapped(engine: Engine, os_key: str, codename: str) -> str:
    """A Debian base made by imagesmith's own bootstrap (debootstrap + import), once per run."""
    def make() -> dict[str, Any]:
        if shutil.which("debootstrap") is None:
            pytest.fail("debootstrap is missing: run scripts/ensure-host.sh")
        ref, _ = bootstrap.bootstrap(engine, os_key, tag)
        return {"ref": ref}
    tag = f"imagesmith-test/debian:{codename}-{RUN}"
    # the base, and whatever a build of the run left on it
    return str(shared.once(f"base-{os_key}", make, {"trees": [tag]})["ref"])


@pytest.fixture(scope="session")
def debian_base(engine: Engine) -> str:
    """A Debian 12 base made by imagesmith's own bootstrap (debootstrap + import)."""
    return bootstrapped(engine, "debian12", "bookworm")


def _dangling(engine: Engine) -> set[str]:
    # IDs only: other runs on this engine may remove an image between a list and an inspect
    return set(engine.client.api.images(filters={"dangling": True}, quiet=True))


def context_hashes(folder: Path) -> set[str]:
    """The context hashes of every target built under ``folder`` (build reports and artifacts): a builder stage
    carries its target's as a label (io.imagesmith.context-hash)."""
    found: set[str] = set()
    for path in [*folder.rglob("report.json"), *folder.rglob("build.json")]:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        entries = doc.get("targets", []) if "targets" in doc else [doc.get("result", {})]
        found |= {str(e["context_hash"]) for e in entries if isinstance(e, dict) and e.get("context_hash")}
    return found


@dataclass
class MatrixFactory:
    engine: Engine
    base: str
    folder: Path
    repository: str = field(default_factory=lambda: f"imagesmith-test/m{uuid.uuid4().hex[:8]}")

    def __call__(self, layers: str, extra: str = LOCAL_SOURCES, files: dict[str, str] | None = None,
                 torch: str = "2.13", cuda: str = "cpu", include: str = "", bases: dict[str, str] | None = None,
                 registry: str | None = None) -> Path:
        for name, text in (files or {}).items():
            (self.folder / name).write_text(text)
        path = self.folder / "matrix.yaml"
        base_images = "".join(f"  {os_key}: {ref}\n" for os_key, ref in {"debian12": self.base, **(bases or {})}.items())
        path.write_text(
            f"image:\n  repository: {self.repository}\n  labels: {{{TEST_LABEL}: '{RUN}'}}\n"
            + (f"  registry: {registry}\n" if registry else "") +
            f"matrix:\n  torch: ['{torch}']\n  cuda: ['{cuda}']\n  python: ['3.11']\n  os: [debian12]\n{include}"
            f"base_images:\n{base_images}" + layers + extra)
        return path

    def cleanup(self) -> None:
        remove_repository(self.engine, self.repository)


def remove_repository(engine: Engine, repository: str) -> None:
    """Every image a matrix of ``repository`` made: the images its templates label with it (its own tags, cache
    entries and their owner tags, imagesmith-cache/<owner>:<target>), then its CUDA images (OS base + CUDA layer).
    Only these: other tests of the run (other xdist workers) and other runs on this engine keep theirs."""
    for info in engine.images_with_label("org.opencontainers.image.title", repository):
        for tag in info.tags:
            if tag.startswith(repository) or tag.startswith("imagesmith-cache"):
                engine.remove_image(tag, force=False)
    for info in engine.client.images.list(name=repository):  # CUDA images (OS base + CUDA layer)
        remove_with_descendants(engine, info.id)


def remove_with_descendants(engine: Engine, image_id: str) -> None:
    """An image of ours and every image built on it (a failed build leaves its steps behind)."""
    for child in engine.client.images.list(all=True):
        if child.attrs.get("Parent") == image_id:
            remove_with_descendants(engine, child.id)
    try:
        engine.remove_image(image_id, force=True)
    except Exception:  # noqa: BLE001 - gone already, or still used by a container: leave it
        pass


@pytest.fixture()
def build_matrix(engine: Engine, debian_base: str, built_images: BuiltImages, tmp_path: Path) -> Iterator[MatrixFactory]:
    """A matrix on the run's Debian 12 base; its torch CPU base builds from the engine's layer cache that
    ``built_images`` filled (every step up to the labels)."""
    before = _dangling(engine)
    factory = MatrixFactory(engine, debian_base, tmp_path)
    yield factory
    factory.cleanup()
    mine = context_hashes(tmp_path)
    for image_id in _dangling(engine) - before:  # builder stages this test's builds left behind (theirs only)
        info = engine.image(image_id)
        if info is None or info.labels.get("io.imagesmith.context-hash") not in mine:
            continue
        try:
            engine.remove_image(image_id, force=False)
        except Exception:  # noqa: BLE001 - still used by a kept image: leave it
            pass


class CountingEngine:
    """The real engine, counting the calls a test judges by (``calls["build"]``, ``calls["run"]``, ...): a test says
    what a run did, never how long it took."""

    COUNTED = ("build", "run", "push", "pull", "load")

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.calls: dict[str, int] = dict.fromkeys(self.COUNTED, 0)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.engine, name)
        if name not in self.COUNTED:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)
        return counted


def no_stray_containers(engine: Engine, before: set[str], repository: str) -> list[str]:
    """Containers made from an image of ``repository`` (a test's matrix: a build step's, a measurement's; they
    carry its images' labels) that were not there ``before``. Other tests' containers (other xdist workers, other
    runs on a shared engine) are none of the test's business."""
    return sorted(set(containers_of_repository(engine, repository)) - before)


def containers_of_repository(engine: Engine, repository: str) -> list[str]:
    return sorted(engine.containers_with_label("org.opencontainers.image.title", repository))


def left_containers(engine: Engine, pid: int | None = None) -> list[str]:
    """The containers imagesmith started in process ``pid`` (this one by default) and did not remove: verify,
    probe and facts label theirs io.imagesmith.run=<kind>-<pid>."""
    pid = os.getpid() if pid is None else pid
    return sorted(c for kind in ("verify", "probe", "facts") for c in engine.containers_with_label("io.imagesmith.run", f"{kind}-{pid}"))


def containers_created(engine: Engine, since: float, pid: int) -> list[str]:
    """The containers imagesmith created in process ``pid`` since ``since`` (time.time()), removed or not: the
    engine's own event log, so a container that came and went is counted too."""
    import time

    events = engine.client.events(since=int(since) - 1, until=int(time.time()) + 1, decode=True,
                                  filters={"type": "container", "event": "create"})
    return sorted(e["id"] for e in events
                  if str(e.get("Actor", {}).get("Attributes", {}).get("io.imagesmith.run", "")).endswith(f"-{pid}"))


# -- a private index behind basic auth ------------------------------------------------


def planted_wheel(name: str = "imagesmith_planted", version: str = "1.0") -> tuple[str, bytes]:
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": b"PLANTED = True\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: imagesmith-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\n"
                     for p, d in files.items()) + f"{dist}/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path, data in {**files, f"{dist}/RECORD": record.encode()}.items():
            zf.writestr(path, data)
    return f"{name}-{version}-py3-none-any.whl", buf.getvalue()


@dataclass
class PrivateIndex:
    port: int
    user: str
    password: str
    authorized_requests: int = 0
    refused_requests: int = 0


@pytest.fixture()
def private_index() -> Iterator[PrivateIndex]:
    user, password = "ci-robot", f"PLANTED-{uuid.uuid4().hex}"
    wheel_name, wheel = planted_wheel()
    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    state = PrivateIndex(0, user, password)

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return

        def do_GET(self) -> None:  # noqa: N802
            if self.headers.get("Authorization") != expected:
                state.refused_requests += 1
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="private"')
                self.end_headers()
                return
            state.authorized_requests += 1
            body, ctype = self._page()
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", ctype)
            self.end_headers()
            self.wfile.write(body or b"")

        def _page(self) -> tuple[bytes | None, str]:
            if self.path.rstrip("/") == "/simple/imagesmith-planted":
                return f'<a href="/files/{wheel_name}">{wheel_name}</a>'.encode(), "text/html"
            if self.path == f"/files/{wheel_name}":
                return wheel, "application/octet-stream"
            return None, "text/plain"

    with serve(Handler) as state.port:
        yield state


def docker_save_contains(ref: str, needles: list[str]) -> list[str]:
    """Which of ``needles`` occur anywhere in ``docker save`` of ``ref`` (layers,
    config, history), searched as bytes, also inside gzip-less tar members."""
    data = subprocess.run(["docker", "save", ref], capture_output=True, check=True).stdout
    return [n for n in needles if n.encode() in data]


Factory = Callable[..., Path]


@dataclass
class BuiltImages:
    """Images built once per run by imagesmith itself, for verify tests."""

    cpu_base: str
    repository: str


CPU_REPOSITORY = f"imagesmith-test/cpu-{RUN}"
CUDA_REPOSITORY = f"imagesmith-test/cuda-{RUN}"


def _build_base(engine: Engine, debian_base: str, folder: Path) -> dict[str, Any]:
    """The torch 2.13.0+cpu base, built cold: nothing of it can be in the engine (its Debian base is this run's
    own), so every step runs, and the image is measured. It stays for the run: later builds of this base in the run
    (other repositories, the same steps) take every step up to the labels from the layer cache."""
    from imagesmith.model import matrix, plan
    from imagesmith.stages.building import build

    factory = MatrixFactory(engine, debian_base, folder, repository=CPU_REPOSITORY)
    m = matrix.load(factory("layers:\n  base: {toolchain: false}\n"), allowed_roots=LOCAL_ROOTS)
    builder = build.Builder(plan.expand(m, "20261130"), m, engine, folder / "build", prune=False)
    report = builder.run()
    assert report.ok, [r.error for r in report.results]
    base = report.results[0]
    assert base.status == "built" and base.cached_steps == 0 and base.steps > 0, (base.status, base.cached_steps)  # cold
    assert base.facts and base.facts["torch"].startswith("2.13.0"), base.facts
    return {"cpu_base": base.image_id or "", "repository": factory.repository}


@pytest.fixture(scope="session")
def built_images(engine: Engine, debian_base: str, tmp_path_factory: pytest.TempPathFactory) -> BuiltImages:
    made = shared.once("torch-cpu-base", lambda: _build_base(engine, debian_base, tmp_path_factory.mktemp("cpu-base")),
                       {"repositories": [CPU_REPOSITORY]})
    return BuiltImages(made["cpu_base"], made["repository"])


@pytest.fixture(scope="session")
def trixie_base(engine: Engine) -> str:
    """A Debian 13 base (debootstrap + import), for a second OS."""
    return bootstrapped(engine, "debian13", "trixie")


@dataclass
class CudaCells:
    """Two CUDA cells with one torch/CUDA on two OSes, built once per session by imagesmith."""

    report: dict[str, Any]  # the build report (JSON)
    images: dict[str, str]  # os -> the base image's ID
    repository: str


def _build_cuda_cells(engine: Engine, debian_base: str, trixie_base: str, folder: Path) -> dict[str, Any]:
    from imagesmith.model import matrix, plan
    from imagesmith.stages.building import build

    factory = MatrixFactory(engine, debian_base, folder, repository=CUDA_REPOSITORY)
    include = "  include:\n    - {torch: '2.14', cuda: '13.0', python: '3.13', os: debian13}\n"
    m = matrix.load(factory("layers:\n  base: {toolchain: false}\n", torch="2.14", cuda="13.0", include=include,
                            bases={"debian13": trixie_base}), allowed_roots=LOCAL_ROOTS)
    report = build.Builder(plan.expand(m, "20261130"), m, engine, folder / "build").run()
    assert report.ok, [r.error for r in report.results] + [c.error for c in report.cuda_layers]
    images = {r.target.rsplit("-", 2)[1]: r.image_id or "" for r in report.results}
    return {"report": report.to_json(), "images": images, "repository": factory.repository}


@pytest.fixture(scope="session")
def cuda_cells(engine: Engine, debian_base: str, trixie_base: str, tmp_path_factory: pytest.TempPathFactory) -> CudaCells:
    """torch 2.14.1 + CUDA 13.0 for Python 3.11 on bookworm and 3.13 on trixie: the
    nvidia-* wheels (one set) in the shared CUDA layer, the rest in each venv. Built once per run (cold: the
    CUDA layer and both venvs), removed at the end of the run."""
    made = shared.once("cuda-cells", lambda: _build_cuda_cells(engine, debian_base, trixie_base,
                                                               tmp_path_factory.mktemp("cuda-cells")),
                       {"repositories": [CUDA_REPOSITORY]})
    return CudaCells(made["report"], made["images"], made["repository"])


@pytest.fixture(scope="session")
def cuda_base(cuda_cells: CudaCells) -> str:
    """torch 2.14.1 with CUDA 13.0 (Python 3.11, Debian 12): its nvidia-* wheels in the shared CUDA layer."""
    return cuda_cells.images["debian12"]


def docker_build(engine: Engine, dockerfile: str, tag: str, folder: Path) -> str:
    """A hand-written image (planted faults) with the plain docker CLI."""
    (folder / "Dockerfile").write_text(dockerfile)
    proc = subprocess.run(["docker", "build", "-q", "-t", tag, str(folder)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return tag


# -- CI jobs as separate processes ------------------------------------------------------------------


def cli_job(*args: str, cwd: Path, docker_host: str | None = None) -> subprocess.CompletedProcess[str]:
    """One CI job: the imagesmith CLI in its own process, with no signing key from the environment, against the
    suite's engine (``DOCKER_HOST`` as the tests run with it), or ``docker_host`` (another engine, or none)."""
    env = {k: v for k, v in os.environ.items() if k != signing.ENV_KEY} | {"NO_COLOR": "1", "SOURCE_DATE_EPOCH": "1796083200"}
    env["IMAGESMITH_ALLOW_ROOT"] = os.pathsep.join(map(str, LOCAL_ROOTS))  # LOCAL_SOURCES' wheels and CA (a CI variable)
    if docker_host:
        env["DOCKER_HOST"] = docker_host
    return subprocess.run([sys.executable, "-m", "imagesmith.cli", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=1800)


def ok(done: subprocess.CompletedProcess[str]) -> str:
    """A job's stdout; its exit status, stdout and stderr when it failed."""
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout
