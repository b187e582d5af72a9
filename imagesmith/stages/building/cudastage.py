"""The CUDA images through the staging repository (``build --stage``).

Without a stage, :mod:`imagesmith.stages.building.cudabuild` hands the engine the CUDA layer with ``docker load``.
With one, the layer also goes to the staging repository, compressed once by imagesmith with ISA-L's gzip (about
20 times as fast as the engine's, for a few per cent more bytes) as it is written, beside each OS base it goes
on (pushed by the engine, a few MB of gzip); a manifest per CUDA image names them. The first OS base's image is
still loaded; the engine pulls the others by digest (:meth:`imagesmith.stages.building.cudabuild.CudaImages._staged`).
The image ID is the same as a load gives (the config is the same bytes). What changes is what the engine knows:
it pulled the layer's blob from the staging repository, so pushing any image built on it there (every CUDA
image's targets are staged) finds the blob and sends the layer no more, where the engine would otherwise gzip
all of it again, on one core, for the first target that reaches the registry.
"""

from __future__ import annotations

import hashlib
import io
import json
import queue
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from isal import isal_zlib

from imagesmith.edges.oci import DOCKER_V2, entries, manifest_document
from imagesmith.edges.protocols import EngineProtocol, RegistryProtocol
from imagesmith.errors import BuildError
from imagesmith.model.buildreport import DIGEST
from imagesmith.render import cudalayer

LAYER_MEDIA = "application/vnd.docker.image.rootfs.diff.tar.gzip"
CONFIG_MEDIA = "application/vnd.docker.container.image.v1+json"
PIECE = 1 << 20  # bytes the writer hands the upload's thread at a time
LEVEL = 1  # ISA-L's levels are 0-3; 1 compresses the CUDA libraries about as well as zlib's 6 (0.70 against 0.68)
OS_TAG = "os-"
CUDA_TAG = "cuda-"


@dataclass(frozen=True)
class Blob:
    digest: str
    size: int
    media_type: str = LAYER_MEDIA

    def descriptor(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "size": self.size, "digest": self.digest}


class GzipUpload(io.RawIOBase):
    """A writer whose bytes go, gzipped, to ``repo`` as one blob. The writer's thread only queues them (in pieces of
    ``piece`` bytes); a thread of the upload's own compresses, hashes and streams them in one PATCH, so writing the
    layer, compressing it and sending it overlap. :meth:`finish` closes the upload (the registry checks the digest)
    and says what was stored; :meth:`cancel` drops it."""

    def __init__(self, registry: RegistryProtocol, repo: str, piece: int = PIECE) -> None:
        self.registry, self.repo, self.piece = registry, repo, piece
        self.location = registry.start_upload(repo)
        self.queue: queue.Queue[bytes | None] = queue.Queue(maxsize=8)
        self.buf, self.sha, self.size = bytearray(), hashlib.sha256(), 0
        self.failure: list[BaseException] = []
        self.sender = threading.Thread(target=self._send, name="cuda-upload", daemon=True)
        self.sender.start()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.buf += data
        if len(self.buf) >= self.piece:
            self._put(bytes(self.buf))
            self.buf.clear()
        return len(data)

    def _put(self, item: bytes | None) -> None:
        """Queue ``item`` for the sender; an error, never a hang, when the sender has stopped."""
        while True:
            if self.failure or not self.sender.is_alive():
                why = f": {self.failure[0]}" if self.failure else ""
                raise BuildError(f"the upload of the CUDA layer to {self.registry.host}/{self.repo} stopped{why}")
            try:
                self.queue.put(item, timeout=0.5)
                return
            except queue.Full:
                continue

    def _body(self) -> Iterator[bytes]:
        gzip = isal_zlib.compressobj(LEVEL, isal_zlib.DEFLATED, 31)  # wbits 31: one gzip member
        while True:
            item = self.queue.get()
            out = gzip.compress(item) if item is not None else gzip.flush()
            self.sha.update(out)
            self.size += len(out)
            if out:
                yield out
            if item is None:
                return

    def _send(self) -> None:
        try:
            self.location = self.registry.stream_upload(self.repo, self.location, self._body())
        except BaseException as exc:  # the writer's next piece (or finish) raises it
            self.failure.append(exc)

    def finish(self) -> Blob:
        if self.buf:
            self._put(bytes(self.buf))
            self.buf.clear()
        self._put(None)
        self.sender.join()
        if self.failure:
            raise self.failure[0]
        digest = "sha256:" + self.sha.hexdigest()
        self.registry.finish_upload(self.repo, self.location, digest)
        return Blob(digest, self.size)

    def cancel(self) -> None:
        if self.sender.is_alive():
            try:
                self.queue.put(None, timeout=5)  # ends the body, so the request returns
            except queue.Full:
                pass
            self.sender.join(timeout=60)
        self.registry.cancel_upload(self.repo, self.location)


class Delivery:
    """The staging repository's side of the CUDA images: ``push_tag`` is the stage's engine push of
    ``name:tag`` (retried as every staging push is); ``auth`` its login for pulls."""

    def __init__(self, engine: EngineProtocol, registry: RegistryProtocol, path: str, name: str,
                 auth: Mapping[str, str] | None, push_tag: Callable[[str], str], piece: int = PIECE) -> None:
        self.engine, self.registry, self.path, self.name, self.auth, self.push_tag = engine, registry, path, name, auth, push_tag
        self.piece = piece

    def start_upload(self) -> GzipUpload:
        """An upload of the layer into the staging repository, written as the layer is made (a ``docker load``'s
        archive writes it as it goes: :class:`imagesmith.render.cudalayer.Archive`)."""
        return GzipUpload(self.registry, self.path, self.piece)

    def image(self, config: bytes, base_id: str, blob: Blob, key: str, ref: str) -> str:
        """One CUDA image: its OS base's layers (pushed by the engine unless the repository has them), ``config`` and
        a manifest naming them and ``blob``, tagged by its cache ``key``; the engine pulls it by digest and tags it
        ``ref``. Its ID, checked to be the config's."""
        config_digest, _ = self.registry.push_blob(self.path, config)
        doc = {"schemaVersion": 2, "mediaType": DOCKER_V2, "config": {"mediaType": CONFIG_MEDIA, "size": len(config),
                                                                       "digest": config_digest},
               "layers": self._os_layers(base_id) + [blob.descriptor()]}
        pushed = self.registry.push_manifest(self.path, CUDA_TAG + key, DOCKER_V2, json.dumps(doc, indent=3).encode())
        info = self.engine.pull(f"{self.name}@{pushed.digest}", self.auth)
        want = cudalayer.image_id(config)
        if info.id != want:
            raise BuildError(f"pulled {self.name}@{pushed.digest} as image {info.id}, expected {want}")
        self.engine.tag(info.id, *ref.rsplit(":", 1))
        return info.id

    def _os_layers(self, base_id: str) -> list[dict[str, Any]]:
        """The OS base's layer descriptors in the staging repository (pushed by the engine unless there)."""
        tag = OS_TAG + base_id.split(":", 1)[-1]
        have = self.registry.manifest(self.path, tag)
        if have is None or have.config_digest != base_id:
            self.engine.tag(base_id, self.name, tag)
            try:
                self.push_tag(tag)
            finally:
                self.engine.untag(f"{self.name}:{tag}")
            have = self.registry.manifest(self.path, tag)
        where = f"{self.name}:{tag}"
        if have is None or have.config_digest != base_id or have.media_type != DOCKER_V2:
            raise BuildError(f"{where}: the registry does not serve the OS base {base_id} just pushed; something else writes there")
        layers = [Blob(str(e.get("digest", "")), e.get("size", -1), str(e.get("mediaType", "")))
                  for e in entries(manifest_document(have.raw, where), "layers")]
        if not layers or any(not isinstance(b.size, int) or b.size < 0 or not DIGEST.fullmatch(b.digest) for b in layers):
            raise BuildError(f"{where}: its manifest names no layers, or a layer without a size and sha256 digest")
        return [b.descriptor() for b in layers]
