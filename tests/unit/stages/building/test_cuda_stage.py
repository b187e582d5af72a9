"""The CUDA images through a staging repository: the layer is uploaded once, gzipped, in chunks; each image's
manifest names its OS base's layers (pushed by the stage unless the repository has them) and that blob; the
engine pulls each image by digest and must get the image the config names."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import threading
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import pytest

from imagesmith.edges.oci import DOCKER_V2
from imagesmith.edges.protocols import ImageInfo, LineSink
from imagesmith.edges.registry import Manifest
from imagesmith.errors import BuildError
from imagesmith.model import matrix, plan
from imagesmith.progress import QuietDisplay
from imagesmith.render import cudalayer
from imagesmith.stages.building import cudabuild, cudastage, directpush
from tests.doubles import EngineBase, MemRegistry, sha

BASE_ID = "sha256:" + "b" * 64
BASE_CONFIG = {"architecture": "amd64", "os": "linux", "config": {"Env": ["PATH=/usr/bin"]},
               "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "1" * 64]}}
OS_LAYER = {"mediaType": directpush.LAYER_MEDIA, "size": 1234, "digest": "sha256:" + "2" * 64}


@dataclass
class PullingEngine(EngineBase):
    """Pushes an OS base as one manifest in ``registry``; a pull gives the image its config names (or ``wrong``)."""

    registry: MemRegistry
    wrong: str = ""
    pushes: list[str] = field(default_factory=list)
    pulls: list[str] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        self.tags[f"{repository}:{tag}"] = image_id

    def untag(self, ref: str) -> None:
        self.tags.pop(ref)

    def push(self, repository: str, tag: str, auth: Mapping[str, str] | None, on_line: LineSink) -> str:
        assert self.tags[f"{repository}:{tag}"] == BASE_ID
        self.pushes.append(tag)
        raw = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_V2, "layers": [OS_LAYER],
                          "config": {"mediaType": directpush.CONFIG_MEDIA, "size": 9, "digest": BASE_ID}}).encode()
        self.registry.manifests[tag] = Manifest(sha(raw), DOCKER_V2, BASE_ID, raw)
        return sha(raw)

    def pull(self, ref: str, auth: Mapping[str, str] | None = None) -> ImageInfo:
        self.pulls.append(ref)
        manifest = next(m for m in self.registry.manifests.values() if ref.endswith("@" + m.digest))
        return ImageInfo(self.wrong or str(manifest.config_digest), (), {}, 0, "")


def delivery(engine: PullingEngine, registry: MemRegistry, piece: int = 1 << 20) -> cudastage.Delivery:
    def push_image(image_id: str, tag: str) -> str:  # as the stage's push through the engine
        engine.tag(image_id, "registry.test/ml/staging", tag)
        try:
            return engine.push("registry.test/ml/staging", tag, None, lambda line: None)
        finally:
            engine.untag(f"registry.test/ml/staging:{tag}")
    return cudastage.Delivery(engine, registry, "ml/staging", "registry.test/ml/staging", {"username": "u"}, push_image, piece=piece)


def sources() -> list[cudalayer.Source]:
    data = bytes(range(256)) * 4096 + b"".join(hashlib.sha256(b"%d" % i).digest() for i in range(20000))  # 1.6 MB, 0.6 incompressible
    return [cudalayer.Source("nvidia/cublas/lib/libcublas.so.13", len(data), 1_700_000_000, False, data=data),
            cudalayer.Source("nvidia/cublas/__init__.py", 0, 1_700_000_000, False, data=b"")]


@dataclass(frozen=True)
class Made:
    layer: cudalayer.LayerInfo
    config: bytes
    image_id: str


def make(engine: PullingEngine, registry: MemRegistry, piece: int = 1 << 20) -> Made:
    d = delivery(engine, registry, piece)
    upload = d.start_upload()
    layer = cudalayer.write_layer(sources(), upload, cudalayer.PREFIX)
    blob = upload.finish()
    config = cudalayer.image_configs([cudalayer.ImageRequest(BASE_CONFIG, "ml/local:cuda-set-debian12")], layer.diff_id,
                                     sources(), {"io.imagesmith.cuda.set": "set"}, "made")["ml/local:cuda-set-debian12"]
    return Made(layer, config, d.image(config, BASE_ID, blob, "k" * 64, "ml/local:cuda-set-debian12"))


def test_the_layer_is_uploaded_once_gzipped_in_chunks_and_each_image_pulled_by_its_digest() -> None:
    registry = MemRegistry()
    engine = PullingEngine(registry)
    made = make(engine, registry, piece=256 << 10)
    manifest = registry.manifests["cuda-" + "k" * 64]
    doc = json.loads(manifest.raw)
    assert doc["mediaType"] == DOCKER_V2 and doc["layers"][:-1] == [OS_LAYER]
    layer = doc["layers"][-1]
    blob = registry.blobs[layer["digest"]]
    assert layer["size"] == len(blob) and layer["mediaType"] == directpush.LAYER_MEDIA
    assert sha(gzip.decompress(blob)) == made.layer.diff_id  # the blob is the layer tar the config names, gzipped
    assert registry.chunks > 1  # streamed as it is made, never held whole
    config = made.config
    assert registry.blobs[doc["config"]["digest"]] == config and json.loads(config)["rootfs"]["diff_ids"][-1] == made.layer.diff_id
    assert engine.pulls == [f"registry.test/ml/staging@{manifest.digest}"]
    assert made.image_id == cudalayer.image_id(config)
    assert engine.tags == {"ml/local:cuda-set-debian12": cudalayer.image_id(config)}  # the OS base's push tag is gone
    assert engine.pushes == ["os-" + "b" * 64]


def test_an_os_base_the_repository_has_is_not_pushed_again() -> None:
    registry = MemRegistry()
    engine = PullingEngine(registry)
    make(engine, registry)
    make(engine, registry)
    assert engine.pushes == ["os-" + "b" * 64]


def test_a_pull_that_gives_another_image_fails_the_set() -> None:
    registry = MemRegistry()
    with pytest.raises(BuildError, match="expected sha256:"):
        make(PullingEngine(registry, wrong="sha256:" + "e" * 64), registry)


def test_an_os_manifest_without_layers_is_refused() -> None:
    registry = MemRegistry()
    raw = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_V2, "layers": [{"digest": "md5:x", "size": 1}],
                      "config": {"digest": BASE_ID}}).encode()
    registry.manifests["os-" + "b" * 64] = Manifest(sha(raw), DOCKER_V2, BASE_ID, raw)
    with pytest.raises(BuildError, match="without a size and sha256 digest"):
        make(PullingEngine(registry), registry)


def test_a_cancelled_upload_stores_nothing() -> None:
    registry = MemRegistry()
    upload = delivery(PullingEngine(registry), registry).start_upload()
    upload.write(b"part of a layer")
    upload.cancel()
    assert registry.cancelled == ["/v2/ml/staging/blobs/uploads/0"] and not registry.blobs


# -- the build's side: each base target starts as soon as its own CUDA image is pulled ------------------------------

MATRIX = """\
version: 1
matrix:
  torch: ["2.14.1"]
  cuda: ["13.0"]
  python: ["3.11"]
  os: [debian12, debian13]
layers:
  base: {}
"""


@dataclass
class TaggingEngine(EngineBase):
    """``docker load`` of imagesmith's archive: each image its manifest.json names, tagged, with its config's ID."""

    tags: dict[str, str] = field(default_factory=dict)
    loads: int = 0

    def image_config(self, ref: str) -> dict[str, Any]:
        return BASE_CONFIG

    def image(self, ref: str) -> ImageInfo | None:
        image_id = self.tags.get(ref, ref if ref.startswith("sha256:") else "")
        return ImageInfo(image_id, (), {}, 1, "") if image_id else None

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        self.tags[f"{repository}:{tag}"] = image_id

    def load(self, chunks: Iterable[bytes]) -> list[str]:
        self.loads += 1
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        for entry in manifest:
            self.tags[entry["RepoTags"][0]] = "sha256:" + entry["Config"].removesuffix(".json")
        return [entry["RepoTags"][0] for entry in manifest]


class Upload:
    def __init__(self) -> None:
        self.data, self.finished = bytearray(), False

    def write(self, data: bytes) -> int:
        self.data += data
        return len(data)

    def finish(self) -> directpush.Blob:
        self.finished = True
        return directpush.Blob(sha(bytes(self.data)), len(self.data))

    def cancel(self) -> None:
        raise AssertionError("nothing failed")


class HeldDelivery(cudastage.Delivery):
    """Takes the layer as it is written; the pull waits until the test lets it go."""

    def __init__(self, engine: TaggingEngine) -> None:
        super().__init__(engine, MemRegistry(), "ml/staging", "registry.test/ml/staging", None, lambda image_id, tag: "")
        self.go, self.pulling, self.pulls, self.uploads = threading.Event(), threading.Event(), list[str](), list[Upload]()

    def start_upload(self) -> Any:
        self.uploads.append(Upload())
        return self.uploads[-1]

    def image(self, config: bytes, base_id: str, blob: directpush.Blob, key: str, ref: str) -> str:
        self.pulls.append(ref)
        self.pulling.set()
        assert self.go.wait(60), "the test never let the pull go"
        image_id = cudalayer.image_id(config)
        self.engine.tag(image_id, *ref.rsplit(":", 1))
        return image_id


def wheels(t: Any, pins: Any, dest: Path, log: Path) -> None:
    """A downloader: one small wheel per pin."""
    for i in range(len(pins)):
        with zipfile.ZipFile(dest / f"w{i}.whl", "w") as wheel:
            wheel.writestr(f"nvidia/w{i}/lib/libw{i}.so", b"x" * 1000)
            wheel.writestr(f"nvidia_w{i}-1.dist-info/RECORD", f"nvidia/w{i}/lib/libw{i}.so,,\n")


def test_the_first_os_base_is_loaded_the_others_pulled_and_pushes_wait_for_the_pull(
        write_matrix: Any, tmp_path: Path) -> None:
    """With a staging repository: the first CUDA image is loaded while the layer streams to the repository (its
    target starts at once), the second is pulled from there; pushes wait until the engine has pulled it."""
    p = plan.expand(matrix.load(write_matrix(MATRIX)), "20261130")
    first, second = [t for t in p.targets if t.cuda_set]
    assert first.cuda_set is not None and second.cuda_set is not None
    engine = TaggingEngine()
    held = HeldDelivery(engine)

    images = cudabuild.CudaImages(p, "ml/local", engine, tmp_path, {first.base_image: BASE_ID, second.base_image: "sha256:" + "a" * 64},
                                  wheels, QuietDisplay(), None, "cache", held)
    images.start()
    assert images.futures[(first.cuda_set.id, first.base_image)].result(timeout=60) == engine.tags[plan.cuda_image(first, "ml/local")]
    assert held.pulling.wait(60)
    assert engine.loads == 1 and held.pulls == [plan.cuda_image(second, "ml/local")]
    assert not images.futures[(second.cuda_set.id, second.base_image)].done()  # its pull is still held
    assert not images.known[first.cuda_set.id].is_set()  # a push would wait: the engine has not pulled the blob yet
    held.go.set()
    assert images.image_for(second) == engine.tags[plan.cuda_image(second, "ml/local")]
    images.wait_known(first)
    (upload,) = held.uploads
    layer = images.report()[0]
    assert upload.finished and sha(bytes(upload.data)) == layer.diff_id  # the layer the load got, byte for byte
    assert {c.status for c in images.report()} == {"built"}


def test_a_set_with_one_os_base_pulls_it(write_matrix: Any, tmp_path: Path) -> None:
    """One OS base: its image is pulled, not loaded, or the engine would never learn that staging has the blob."""
    p = plan.expand(matrix.load(write_matrix(MATRIX.replace("[debian12, debian13]", "[debian12]"))), "20261130")
    (only,) = [t for t in p.targets if t.cuda_set]
    engine = TaggingEngine()
    held = HeldDelivery(engine)
    held.go.set()
    images = cudabuild.CudaImages(p, "ml/local", engine, tmp_path, {only.base_image: BASE_ID}, wheels, QuietDisplay(), None,
                                  "cache", held)
    images.start()
    assert images.image_for(only) == engine.tags[plan.cuda_image(only, "ml/local")]
    images.wait_known(only)
    assert engine.loads == 0 and held.pulls == [plan.cuda_image(only, "ml/local")] and held.uploads[0].finished


class StoppedUpload(Upload):
    """An upload whose sender stopped: the next write fails, as GzipUpload's does."""

    cancelled = False

    def write(self, data: bytes) -> int:
        raise BuildError("the upload of the CUDA layer to registry.test/ml/staging stopped")

    def cancel(self) -> None:
        self.cancelled = True


def test_an_upload_that_stops_is_cancelled_and_fails_the_set(write_matrix: Any, tmp_path: Path) -> None:
    p = plan.expand(matrix.load(write_matrix(MATRIX)), "20261130")
    first, second = [t for t in p.targets if t.cuda_set]
    engine = TaggingEngine()
    held = HeldDelivery(engine)
    stopped = StoppedUpload()
    held.start_upload = lambda: stopped  # type: ignore[method-assign]
    images = cudabuild.CudaImages(p, "ml/local", engine, tmp_path, {first.base_image: BASE_ID, second.base_image: "sha256:" + "a" * 64},
                                  wheels, QuietDisplay(), None, "cache", held)
    images.start()
    for t in (first, second):
        with pytest.raises(BuildError, match="stopped"):
            images.image_for(t)
    images.wait_known(first)  # a failed set keeps no push waiting
    assert stopped.cancelled and not held.pulls and {c.status for c in images.report()} == {"failed"}
