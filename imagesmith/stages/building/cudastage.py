"""The CUDA images through the staging repository (``build --stage``).

Without a stage, :mod:`imagesmith.stages.building.cudabuild` hands the engine the CUDA layer with ``docker load``.
With one, the layer also goes to the staging repository, compressed once by imagesmith with ISA-L's gzip (about
20 times as fast as the engine's, for a few per cent more bytes) as it is written, beside each OS base it goes
on (pushed by the stage, a few MB); a manifest per CUDA image names them. The first OS base's image is still
loaded; the engine pulls the others by digest (:meth:`imagesmith.stages.building.cudabuild.CudaImages._staged`).
The image ID is the same as a load gives (the config is the same bytes). No push of an image built on the layer
sends it again: the stage's own pushes (:mod:`imagesmith.stages.building.directpush`) are told of the blob, and an
engine's push finds it because the engine pulled it from there, where it would otherwise gzip all of it again,
on one core, for the first target that reaches the registry.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from imagesmith.edges.oci import DOCKER_V2, entries, manifest_document
from imagesmith.edges.protocols import EngineProtocol, RegistryProtocol
from imagesmith.errors import BuildError
from imagesmith.model.buildreport import DIGEST
from imagesmith.render import cudalayer
from imagesmith.stages.building.directpush import PIECE, Blob, GzipUpload, push_image_manifest

OS_TAG = "os-"
CUDA_TAG = "cuda-"


class Delivery:
    """The staging repository's side of the CUDA images: ``push_image(image_id, tag)`` is the stage's push (retried as
    every staging push is); ``auth`` its login for pulls; ``uploaded(diff_id, blob)`` tells the stage's own pushes
    (:class:`imagesmith.stages.building.directpush.DirectPush`) that the layer is there."""

    def __init__(self, engine: EngineProtocol, registry: RegistryProtocol, path: str, name: str,
                 auth: Mapping[str, str] | None, push_image: Callable[[str, str], str],
                 uploaded: Callable[[str, Blob], None] = lambda diff_id, blob: None, piece: int = PIECE) -> None:
        self.engine, self.registry, self.path, self.name, self.auth = engine, registry, path, name, auth
        self.push_image, self.uploaded, self.piece = push_image, uploaded, piece

    def start_upload(self) -> GzipUpload:
        """An upload of the layer into the staging repository, written as the layer is made (a ``docker load``'s
        archive writes it as it goes: :class:`imagesmith.render.cudalayer.Archive`)."""
        return GzipUpload(self.registry, self.path, self.piece)

    def image(self, config: bytes, base_id: str, blob: Blob, key: str, ref: str) -> str:
        """One CUDA image: its OS base's layers (pushed unless the repository has them), ``config`` and
        a manifest naming them and ``blob``, tagged by its cache ``key``; the engine pulls it by digest and tags it
        ``ref``. Its ID, checked to be the config's."""
        digest = push_image_manifest(self.registry, self.path, CUDA_TAG + key, config,
                                     self._os_layers(base_id) + [blob.descriptor()])
        info = self.engine.pull(f"{self.name}@{digest}", self.auth)
        want = cudalayer.image_id(config)
        if info.id != want:
            raise BuildError(f"pulled {self.name}@{digest} as image {info.id}, expected {want}")
        self.engine.tag(info.id, *ref.rsplit(":", 1))
        return info.id

    def _os_layers(self, base_id: str) -> list[dict[str, Any]]:
        """The OS base's layer descriptors in the staging repository (pushed unless there)."""
        tag = OS_TAG + base_id.split(":", 1)[-1]
        have = self.registry.manifest(self.path, tag)
        if have is None or have.config_digest != base_id:
            self.push_image(base_id, tag)
            have = self.registry.manifest(self.path, tag)
        where = f"{self.name}:{tag}"
        if have is None or have.config_digest != base_id or have.media_type != DOCKER_V2:
            raise BuildError(f"{where}: the registry does not serve the OS base {base_id} just pushed; something else writes there")
        layers = [Blob(str(e.get("digest", "")), e.get("size", -1), str(e.get("mediaType", "")))
                  for e in entries(manifest_document(have.raw, where), "layers")]
        if not layers or any(not isinstance(b.size, int) or b.size < 0 or not DIGEST.fullmatch(b.digest) for b in layers):
            raise BuildError(f"{where}: its manifest names no layers, or a layer without a size and sha256 digest")
        return [b.descriptor() for b in layers]
