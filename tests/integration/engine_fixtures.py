"""Fixtures for build tests against the real Docker engine.

``engine`` is the engine from the environment (``.ci/run`` starts one);
``debian_base`` bootstraps a Debian 12 base once per session with debootstrap
under a unique tag; ``build_matrix`` writes a matrix on that base whose images
carry a per-test label, and removes every image it made afterwards;
``private_index`` serves a planted wheel behind basic auth.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
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
from imagesmith.stages import bootstrap
from tests.conftest import LOCAL_ROOTS
from tests.loopback import serve

RUN = uuid.uuid4().hex[:8]
TEST_LABEL = "com.example.imagesmith.test-run"  # io.imagesmith.* is imagesmith's own
LOCAL_SOURCES = """\
sources:
  torch_index_url: https://pypi.org/simple
  index_url: https://pypi.org/simple
  find_links: [/opt/wheels]
  ca_bundle: /etc/ssl/certs/ca-certificates.crt
  network: host
"""


@pytest.fixture(scope="session")
def engine() -> Engine:
    engine = Engine()
    try:
        engine.version()
    except EngineError as exc:
        pytest.fail(f"integration tests need a Docker engine ({exc}); run scripts/ensure-host.sh or make test")
    return engine


@pytest.fixture(scope="session")
def debian_base(engine: Engine) -> Iterator[str]:
    """A Debian 12 base made by imagesmith's own bootstrap (debootstrap + import)."""
    if shutil.which("debootstrap") is None:
        pytest.fail("debootstrap is missing: run scripts/ensure-host.sh")
    ref, _ = bootstrap.bootstrap(engine, "debian12", f"imagesmith-test/debian:bookworm-{RUN}")
    yield ref
    engine.remove_image(ref)


def _dangling(engine: Engine) -> set[str]:
    # IDs only: other runs on this engine may remove an image between a list and an inspect
    return set(engine.client.api.images(filters={"dangling": True}, quiet=True))


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
        for info in self.engine.images_with_label(TEST_LABEL, RUN):
            for tag in info.tags:  # its own tags, cache entries and their owner tags (imagesmith-cache/<owner>:<target>)
                if tag.startswith(self.repository) or tag.startswith("imagesmith-cache"):
                    self.engine.remove_image(tag, force=False)
        for info in self.engine.client.images.list(name=self.repository):  # CUDA images (OS base + CUDA layer)
            remove_with_descendants(self.engine, info.id)


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
def build_matrix(engine: Engine, debian_base: str, tmp_path: Path) -> Iterator[MatrixFactory]:
    before = _dangling(engine)
    factory = MatrixFactory(engine, debian_base, tmp_path)
    yield factory
    factory.cleanup()
    for image_id in _dangling(engine) - before:  # builder stages this test left behind
        try:
            engine.remove_image(image_id, force=False)
        except Exception:  # noqa: BLE001 - still used by a kept image: leave it
            pass


def no_stray_containers(engine: Engine, before: set[str]) -> list[str]:
    return sorted({c.id for c in engine.client.containers.list(all=True)} - before)


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
    """Images built once per session by imagesmith itself, for verify tests."""

    cpu_base: str
    repository: str


def _build_base(engine: Engine, debian_base: str, folder: Path) -> tuple[str, MatrixFactory]:
    from imagesmith.model import matrix, plan
    from imagesmith.stages import build

    factory = MatrixFactory(engine, debian_base, folder)
    m = matrix.load(factory("layers:\n  base: {toolchain: false}\n"), allowed_roots=LOCAL_ROOTS)
    report = build.Builder(plan.expand(m, "20261130"), m, engine, folder / "build").run()
    assert report.ok, [r.error for r in report.results]
    return report.results[0].image_id or "", factory


@pytest.fixture(scope="session")
def built_images(engine: Engine, debian_base: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BuiltImages]:
    image, factory = _build_base(engine, debian_base, tmp_path_factory.mktemp("cpu-base"))
    yield BuiltImages(image, factory.repository)
    factory.cleanup()


@pytest.fixture(scope="session")
def trixie_base(engine: Engine) -> Iterator[str]:
    """A Debian 13 base (debootstrap + import), for a second OS."""
    ref, _ = bootstrap.bootstrap(engine, "debian13", f"imagesmith-test/debian:trixie-{RUN}")
    yield ref
    engine.remove_image(ref)


@dataclass
class CudaCells:
    """Two CUDA cells with one torch/CUDA on two OSes, built once per session by imagesmith."""

    report: dict[str, Any]  # the build report (JSON)
    images: dict[str, str]  # os -> the base image's ID
    repository: str


@pytest.fixture(scope="session")
def cuda_cells(engine: Engine, debian_base: str, trixie_base: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CudaCells]:
    """torch 2.14.1 + CUDA 13.0 for Python 3.11 on bookworm and 3.13 on trixie: the
    nvidia-* wheels (one set) in the shared CUDA layer, the rest in each venv."""
    from imagesmith.model import matrix, plan
    from imagesmith.stages import build

    folder = tmp_path_factory.mktemp("cuda-cells")
    factory = MatrixFactory(engine, debian_base, folder)
    include = "  include:\n    - {torch: '2.14', cuda: '13.0', python: '3.13', os: debian13}\n"
    m = matrix.load(factory("layers:\n  base: {toolchain: false}\n", torch="2.14", cuda="13.0", include=include,
                            bases={"debian13": trixie_base}), allowed_roots=LOCAL_ROOTS)
    try:
        report = build.Builder(plan.expand(m, "20261130"), m, engine, folder / "build").run()
        assert report.ok, [r.error for r in report.results] + [c["error"] for c in report.cuda_layers]
        images = {r.target.rsplit("-", 2)[1]: r.image_id or "" for r in report.results}
        yield CudaCells(report.to_json(), images, factory.repository)
    finally:
        factory.cleanup()


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
