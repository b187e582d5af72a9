"""The shared CUDA layer on the real engine and a real registry: two CUDA cells
(one torch/CUDA, Python 3.11 on bookworm and 3.13 on trixie) carry the same
CUDA layer, the registry stores its blob once, and torch loads cuDNN and NCCL
from it.

The registry test pushes the two CUDA images (OS base + CUDA layer) that the cells are built FROM, not the cells
whole: the first test proves each cell carries that very layer, and the torch layers above it would only add two
venvs of gzip (about 4 GB) to what the test can see."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any, Iterator

import pytest

from imagesmith.edges.engine import Engine
from imagesmith.edges.registry import Credentials, Registry
from imagesmith.render import cudalayer
from imagesmith.stages.building.staging import Stage
from imagesmith.stages.release import publish
from imagesmith.stages.verify import incontainer, verify
from tests.integration.conftest import PASSWORD, USER, RegistryServer
from tests.integration.engine_fixtures import CudaCells, docker_build

pytestmark = [pytest.mark.integration, pytest.mark.registry]


def cuda_layer(cells: CudaCells) -> dict[str, Any]:
    layers = cells.report["cuda_layers"]
    assert len(layers) == 2 and {c["status"] for c in layers} == {"built"}, layers
    assert len({c["diff_id"] for c in layers}) == 1 and len({c["set"] for c in layers}) == 1, layers
    return dict(layers[0])


def test_both_cells_carry_the_same_cuda_layer_directly_on_their_os_base(engine: Engine, cuda_cells: CudaCells) -> None:
    diff_id = cuda_layer(cuda_cells)["diff_id"]
    for entry in cuda_cells.report["cuda_layers"]:
        os_base = engine.image(entry["base_image"])
        cuda_image = engine.image(entry["image_id"])
        assert os_base and cuda_image
        assert cuda_image.layers == os_base.layers + (diff_id,)  # docker inspect RootFS: OS base, then the CUDA layer
        assert cuda_image.labels["io.imagesmith.cuda.libs"] == cudalayer.PREFIX
    for os_key, image_id in cuda_cells.images.items():
        base = engine.image(image_id)
        under = engine.image(next(c["image_id"] for c in cuda_cells.report["cuda_layers"] if c["image"].endswith(os_key)))
        assert base and under and base.layers[:len(under.layers)] == under.layers, f"{os_key}: not built FROM the CUDA image"
        assert base.labels["io.imagesmith.cuda.set"] == cuda_layer(cuda_cells)["set"]  # inherited from the CUDA image


@pytest.fixture()
def registry(tmp_path: Path) -> Iterator[RegistryServer]:
    server = RegistryServer(tmp_path, tls=False)
    server.configure()
    server.start()
    yield server
    server.stop()


def push(engine: Engine, registry: RegistryServer, image_id: str, tag: str) -> list[str]:
    repo = f"{registry.host}/imagesmith-test/cuda"
    engine.tag(image_id, repo, tag)
    lines: list[str] = []
    try:
        engine.push(repo, tag, {"username": USER, "password": PASSWORD}, lines.append)
    finally:
        engine.untag(f"{repo}:{tag}")
    return lines


def cuda_images(cells: CudaCells) -> dict[str, str]:
    """os -> the ID of the CUDA image (OS base + CUDA layer) its cell is built FROM."""
    return {os_key: next(c["image_id"] for c in cells.report["cuda_layers"] if c["image"].endswith(os_key))
            for os_key in cells.images}


def test_the_registry_stores_the_cuda_layer_once(engine: Engine, cuda_cells: CudaCells, registry: RegistryServer) -> None:
    diff_id = cuda_layer(cuda_cells)["diff_id"]
    pushed = {os_key: push(engine, registry, image_id, os_key) for os_key, image_id in sorted(cuda_images(cuda_cells).items())}
    blobs, sent = {}, {}
    for os_key, lines in pushed.items():
        raw = registry.skopeo("inspect", "--raw", f"docker://{registry.host}/imagesmith-test/cuda:{os_key}")
        config = registry.skopeo("inspect", "--config", f"docker://{registry.host}/imagesmith-test/cuda:{os_key}")
        assert raw.returncode == 0 and config.returncode == 0, raw.stderr + config.stderr
        layers, diff_ids = json.loads(raw.stdout)["layers"], json.loads(config.stdout)["rootfs"]["diff_ids"]
        blobs[os_key] = layers[diff_ids.index(diff_id)]
        sent[os_key] = publish.traffic(raw.stdout.encode(), diff_ids, lines)
    assert blobs["debian12"] == blobs["debian13"]  # one blob: same digest, same size
    assert blobs["debian12"]["size"] > 1_000_000_000
    # the second push finds the CUDA blob there and sends only its OS base; the first sent the blob
    assert sent["debian13"].existing_bytes >= blobs["debian12"]["size"]
    assert sent["debian13"].pushed_bytes < 500_000_000 and sent["debian12"].pushed_bytes >= blobs["debian12"]["size"]


def test_a_staged_cuda_layer_is_pulled_and_the_engine_never_gzips_it_again(engine: Engine, registry: RegistryServer,
                                                                            tmp_path: Path) -> None:
    """With a staging repository the engine pulls the CUDA image, so its push of an image built on it finds the
    layer's blob: the staged manifest names the blob imagesmith uploaded (the engine's own gzip would differ).
    imagesmith's own push from the engine's store sends that blob no more either, and a pull of what it sent is the
    same image."""
    rootfs = io.BytesIO()
    with tarfile.open(fileobj=rootfs, mode="w") as tar:
        info = tarfile.TarInfo("etc/os-release")
        info.size = 8
        tar.addfile(info, io.BytesIO(b"ID=tiny\n"))
    base_id = engine.import_rootfs(write(tmp_path / "rootfs.tar", rootfs.getvalue()), "imagesmith-test/tiny-os", "1", [])
    stage = Stage(engine, Registry(registry.host, Credentials(USER, PASSWORD)), "imagesmith-test/staging", tmp_path,
                  Credentials(USER, PASSWORD), direct=False)  # the engine pushes, as with Podman or a remote engine
    # 6.4 MB that gzip cannot shrink, new on every run: the engine keeps what it learnt of a layer's blobs (their
    # digests, by registry) after the layer is gone, and a push checks only the first of them for a layer this size
    data = os.urandom(6_400_000)
    sources = [cudalayer.Source("nvidia/fake/lib/libfake.so.1", len(data), 1_700_000_000, False, data=data)]
    ref, child = "imagesmith-test/local:cuda-fake-tiny", f"{registry.host}/imagesmith-test/staging:child"
    try:
        delivery = stage.cuda_delivery()
        upload = delivery.start_upload()
        layer = cudalayer.write_layer(sources, upload, cudalayer.PREFIX)
        blob = upload.finish()
        config = cudalayer.image_configs([cudalayer.ImageRequest(engine.image_config(base_id), ref)], layer.diff_id, sources,
                                         {"io.imagesmith.cuda.set": "fake"}, "test")[ref]
        image_id = delivery.image(config, base_id, blob, "f" * 64, ref)
        cuda = engine.image(ref)
        assert cuda and cuda.id == image_id and cuda.layers[-1] == layer.diff_id
        docker_build(engine, f"FROM {ref}\nCOPY Dockerfile /child\n", child, tmp_path)
        lines: list[str] = []
        engine.push(child.rsplit(":", 1)[0], "child", {"username": USER, "password": PASSWORD}, lines.append)
        staged = json.loads(registry.skopeo("inspect", "--raw", f"docker://{registry.host}/imagesmith-test/staging:cuda-{'f' * 64}").stdout)
        pushed = json.loads(registry.skopeo("inspect", "--raw", f"docker://{child}").stdout)
        assert pushed["layers"][:2] == staged["layers"]  # the OS base's blob and imagesmith's CUDA blob, as staged
        assert sum("Layer already exists" in line for line in lines) == 2, lines  # only the child's own layer was sent
        # imagesmith's own push, read from the engine's store (root, overlay2): the CUDA blob it was told of is not
        # sent again; the OS base's layer (the engine's gzip above) and the child's are sent, gzipped by imagesmith
        own = Stage(engine, Registry(registry.host, Credentials(USER, PASSWORD)), "imagesmith-test/staging", tmp_path,
                    Credentials(USER, PASSWORD))
        direct = own.direct()
        assert direct is not None
        own.cuda_delivery().uploaded(layer.diff_id, blob)
        child_id = engine.image(child).id  # type: ignore[union-attr]
        sent = json.loads(registry.skopeo("inspect", "--raw", f"docker://{registry.host}/imagesmith-test/staging@"
                                          f"{own._push_image(child_id, 'child-own')}").stdout)
        assert sent["layers"][1] == staged["layers"][1] and sent["config"]["digest"] == child_id
        assert len(direct.sent) == 3 and direct.sent[layer.diff_id].digest == blob.digest
        engine.remove_image(child, force=True)
        assert engine.pull(f"{registry.host}/imagesmith-test/staging:child-own", {"username": USER, "password": PASSWORD}).id == child_id
    finally:
        for image in (child, f"{registry.host}/imagesmith-test/staging:child-own", ref, base_id):
            if engine.image(image):
                engine.remove_image(image, force=True)


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_torch_loads_cudnn_and_nccl_from_the_shared_layer(engine: Engine, cuda_cells: CudaCells) -> None:
    for os_key, image_id in cuda_cells.images.items():
        outcome = incontainer.verify_image(engine, image_id, verify.VerifyOptions(tier="quick", gpus="none", timeout_s=300))
        checks = {c["id"]: c for c in outcome.report.to_json()["checks"]}
        origin = checks["libs.origin"]
        assert origin["status"] == "pass", (os_key, origin)
        libraries = origin["data"]["libraries"]
        assert libraries["cudnn"].startswith(cudalayer.PREFIX + "/nvidia/cudnn/lib/"), libraries
        assert libraries["nccl"].startswith(cudalayer.PREFIX + "/nvidia/nccl/lib/"), libraries
        assert all(path.startswith(cudalayer.PREFIX + "/") for path in libraries.values()), libraries
        assert checks["libs.cudnn"]["status"] == "pass" and checks["versions.nccl"]["status"] == "pass", os_key
