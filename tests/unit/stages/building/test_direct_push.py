"""Staging pushes read from the engine's own store: each layer's tar reassembled from its overlay2 folder and
tar-split record, byte for byte, gzipped and sent once; anything that does not hash to what the config names is
dropped, and the stage then pushes through the engine."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import pytest

from imagesmith.edges.engine.layerstore import LayerStore, StoreUnreadable, chain_id
from imagesmith.edges.protocols import LineSink
from imagesmith.stages.building.directpush import DirectPush
from imagesmith.stages.building.staging import Stage
from tests.doubles import EngineBase, MemRegistry, sha

FILES = {"opt/venv/lib/torch.so": os.urandom(3000) * 5, "opt/venv/bin/python": b"#!/bin/sh\n", "opt/venv/empty": b"",
         "opt/venv/" + "long-name/" * 12 + "deep.py": b"x = 1\n"}


def layer_tar(files: Mapping[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("opt/venv/link")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/shadow"
        tar.addfile(link)
    return out.getvalue()


def record(tar: bytes) -> bytes:
    """What the engine keeps for a layer (vbatts/tar-split): its headers and padding as segments, each file as its
    name and size."""
    lines: list[dict[str, Any]] = []
    at = 0
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        for member in archive.getmembers():
            lines.append({"type": 2, "payload": base64.b64encode(tar[at:member.offset_data]).decode(), "position": len(lines)})
            lines.append({"type": 1, "name": member.name, "size": member.size, "payload": None, "position": len(lines)})
            at = member.offset_data + member.size
    lines.append({"type": 2, "payload": base64.b64encode(tar[at:]).decode(), "position": len(lines)})
    return gzip.compress(b"".join(json.dumps(line).encode() + b"\n" for line in lines))


@dataclass
class Store:
    """An engine's data root with overlay2 layers and their images, written the way Docker 20.10 keeps them."""

    root: Path
    diff_ids: list[str] = field(default_factory=list)

    def add_layer(self, files: Mapping[str, bytes], content: Mapping[str, bytes] | None = None) -> str:
        """A layer holding ``files`` (on disk: ``content`` where given, else the same bytes); its diff ID."""
        tar = layer_tar(files)
        self.diff_ids.append(sha(tar))
        folder = self.root / "image/overlay2/layerdb/sha256" / chain_id(tuple(self.diff_ids)).split(":")[1]
        folder.mkdir(parents=True)
        cache = hashlib.sha256(tar).hexdigest()
        (folder / "diff").write_text(self.diff_ids[-1])
        (folder / "cache-id").write_text(cache)
        (folder / "tar-split.json.gz").write_bytes(record(tar))
        for name, data in (content or files).items():
            path = self.root / "overlay2" / cache / "diff" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return self.diff_ids[-1]

    def add_image(self) -> str:
        config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": self.diff_ids}}).encode()
        folder = self.root / "image/overlay2/imagedb/content/sha256"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / hashlib.sha256(config).hexdigest()).write_bytes(config)
        return sha(config)


def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "docker")


def layer_store(s: Store) -> LayerStore:
    found = LayerStore.of({"Driver": "overlay2", "DockerRootDir": str(s.root)})
    assert found is not None
    return found


def test_each_layer_is_the_exact_tar_and_is_sent_once_and_the_image_keeps_its_id(tmp_path: Path) -> None:
    s = store(tmp_path)
    os_layer = s.add_layer({"etc/os-release": b"ID=debian\n"})
    venv = s.add_layer(FILES)
    base = s.add_image()
    s.add_layer({"opt/venv/lib/cv.py": b"import torch\n"})
    child = s.add_image()
    registry = MemRegistry()
    push = DirectPush(layer_store(s), registry, "ml/staging", piece=4096)
    push.push(base, "ctx-base")
    uploads = len(registry.blobs)
    push.push(child, "ctx-child")
    assert len(registry.blobs) == uploads + 2  # the child's own layer and config: the base's layers are not sent again
    doc = json.loads(registry.manifests["ctx-child"].raw)
    assert doc["config"]["digest"] == child and registry.blobs[child] == layer_store(s).image(child).config
    tars = [gzip.decompress(registry.blobs[layer["digest"]]) for layer in doc["layers"]]
    assert [sha(t) for t in tars] == s.diff_ids and s.diff_ids[:2] == [os_layer, venv]
    with tarfile.open(fileobj=io.BytesIO(tars[1])) as tar:
        member = tar.extractfile("opt/venv/lib/torch.so")
        assert member is not None and member.read() == FILES["opt/venv/lib/torch.so"]
    assert [layer["size"] for layer in doc["layers"]] == [len(registry.blobs[layer["digest"]]) for layer in doc["layers"]]


def test_a_layer_whose_files_differ_from_its_record_is_dropped_before_the_upload_closes(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.add_layer(FILES, content=FILES | {"opt/venv/bin/python": b"#!/bin/sh\n".upper()})
    image, registry = s.add_image(), MemRegistry()
    with pytest.raises(StoreUnreadable, match="hashes to"):
        DirectPush(layer_store(s), registry, "ml/staging").push(image, "ctx-1")
    assert (registry.blobs, registry.manifests, len(registry.cancelled)) == ({}, {}, 1)


@pytest.mark.parametrize(("name", "why"), [("../../../etc/passwd", "not a path inside the layer"),
                                           ("/etc/passwd", "not a path inside the layer"),
                                           ("opt/venv/escape/passwd", "leaves the layer's folder")])
def test_a_record_naming_a_file_outside_the_layer_is_refused(tmp_path: Path, name: str, why: str) -> None:
    s = store(tmp_path)
    s.add_layer({"opt/venv/a": b"a"})
    folder = next((s.root / "image/overlay2/layerdb/sha256").iterdir())
    (s.root / "overlay2" / (folder / "cache-id").read_text() / "diff/opt/venv/escape").symlink_to("/etc")
    lines = gzip.decompress((folder / "tar-split.json.gz").read_bytes()).replace(b'"opt/venv/a"', json.dumps(name).encode())
    (folder / "tar-split.json.gz").write_bytes(gzip.compress(lines))
    image, registry = s.add_image(), MemRegistry()
    with pytest.raises(StoreUnreadable, match=why):
        DirectPush(layer_store(s), registry, "ml/staging").push(image, "ctx-1")
    assert registry.blobs == {}


def test_a_config_that_is_not_the_image_or_a_store_of_another_kind_is_not_read(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.add_layer({"a": b"a"})
    image = s.add_image()
    (s.root / "image/overlay2/imagedb/content/sha256" / image.split(":")[1]).write_bytes(b'{"rootfs": {}}')
    with pytest.raises(StoreUnreadable, match="does not hash to"):
        layer_store(s).image(image)
    assert LayerStore.of({"Driver": "btrfs", "DockerRootDir": str(s.root)}) is None
    assert LayerStore.of({"Driver": "overlay2", "DockerRootDir": str(tmp_path / "elsewhere")}) is None


@dataclass
class EnginePush(EngineBase):
    """A Docker engine whose store is ``root``; its own push answers ``sha256:eee...`` and records the tag."""

    root: Path = Path("/nonexistent")
    pushed: list[str] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)

    def info(self) -> dict[str, Any]:
        return {"Driver": "overlay2", "DockerRootDir": str(self.root)}

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        self.tags[f"{repository}:{tag}"] = image_id

    def untag(self, ref: str) -> None:
        self.tags.pop(ref)

    def push(self, repository: str, tag: str, auth: Mapping[str, str] | None, on_line: LineSink) -> str:
        self.pushed.append(f"{repository}:{tag}")
        return "sha256:" + "e" * 64


class Notes:
    def __init__(self) -> None:
        self.notes: list[str] = []

    def update(self, *args: Any) -> None: ...

    def note(self, message: str) -> None:
        self.notes.append(message)


def test_the_stage_pushes_from_the_store_and_through_the_engine_when_the_store_fails_it(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.add_layer(FILES)
    good = s.add_image()
    s.add_layer({"opt/x": b"x"}, content={"opt/x": b"y"})
    bad = s.add_image()
    engine, registry, notes = EnginePush(s.root), MemRegistry(), Notes()
    stage = Stage(engine, registry, "ml/staging", tmp_path, display=notes)  # type: ignore[arg-type]
    assert stage._push_image(good, "ctx-good") == registry.manifests["ctx-good"].digest
    assert stage._push_image(bad, "ctx-bad") == "sha256:" + "e" * 64
    assert (engine.pushed, engine.tags) == (["registry.test/ml/staging:ctx-bad"], {})
    assert len(notes.notes) == 1 and notes.notes[0].startswith(
        "staging push registry.test/ml/staging:ctx-bad: through the engine: its store did not give the image's bytes (layer sha256:")
