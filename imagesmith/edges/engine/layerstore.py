"""A local Docker engine's own image store, read (never written): an image's config and each layer's exact tar.

``docker push`` gzips every layer it sends on one core (about 37 MB/s here), and Docker 20.10's ``docker save``
writes a whole image to a temporary folder before it sends a byte. Where the engine is this machine's, with the
overlay2 driver, and its data root is readable (``docker info``: ``DockerRootDir``, ``Driver``), the same bytes are on
disk: the config under ``image/overlay2/imagedb``, and each layer as its overlay2 ``diff`` folder plus the
tar-split record (``tar-split.json.gz``: the tar's headers and padding, and the name and size of each file's
content) from which the engine itself reassembles the layer's tar for a push or a save.

Nothing read here is believed on its own: the config's SHA-256 must be the image ID the engine gave, and each
reassembled layer's SHA-256 must be the diff ID that config names, or :class:`StoreUnreadable` is raised (then the
caller pushes through the engine). Every file is read through :mod:`imagesmith.model.loader` (regular files, size
caps, strict JSON); a file's name in the record must stay inside the layer's folder, and a file is opened without
following a link and must be a regular file.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import io
import os
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Protocol

from imagesmith.errors import UserError
from imagesmith.model import loader
from imagesmith.model.buildreport import DIGEST

CONFIG_CAP = 8 << 20  # an image config: history and labels, some KiB
RECORD_CAP = 512 << 20  # a tar-split record, gzipped: about 60 bytes a file (a 2.4 GB torch venv: 1.5 MB)
RECORD_LINE_CAP = 1 << 20  # one record entry: a header segment (a PAX header with long names) is a few KiB
CACHE_ID_CAP = 256
FILE_ENTRY, SEGMENT_ENTRY = 1, 2  # tar-split's storage.FileType and storage.SegmentType
PIECE = 1 << 20


class Sink(Protocol):
    def write(self, data: bytes, /) -> Any: ...


class StoreUnreadable(UserError):
    """This engine's store cannot give this image's bytes (another driver, no access, a digest that differs)."""


@dataclass(frozen=True)
class StoredImage:
    image_id: str
    config: bytes  # the exact bytes whose SHA-256 is the image ID
    diff_ids: tuple[str, ...]


class LayerStore:
    """The overlay2 store under ``root`` (the engine's ``DockerRootDir``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.images = root / "image" / "overlay2"

    @classmethod
    def of(cls, info: Mapping[str, Any]) -> LayerStore | None:
        """The store of an engine that said ``info`` (``docker info``), when it is overlay2 and its image database is
        readable here; None otherwise."""
        root = info.get("DockerRootDir")
        if info.get("Driver") != "overlay2" or not isinstance(root, str) or not root.startswith("/"):
            return None
        store = cls(Path(root))
        return store if os.access(store.images / "imagedb" / "content" / "sha256", os.R_OK | os.X_OK) else None

    def image(self, image_id: str) -> StoredImage:
        if not DIGEST.fullmatch(image_id):
            raise StoreUnreadable(f"{image_id!r} is not an image ID")
        path = self.images / "imagedb" / "content" / "sha256" / image_id.split(":", 1)[1]
        config = self._read(path, CONFIG_CAP)
        if "sha256:" + hashlib.sha256(config).hexdigest() != image_id:
            raise StoreUnreadable(f"{path} does not hash to {image_id}")
        doc = loader.parse_json(config, str(path))
        rootfs = doc.get("rootfs") if isinstance(doc, dict) else None
        diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) and rootfs.get("type") == "layers" else None
        if not isinstance(diff_ids, list) or not all(isinstance(d, str) and DIGEST.fullmatch(d) for d in diff_ids):
            raise StoreUnreadable(f"{path}: rootfs.diff_ids is not a list of sha256 digests")
        return StoredImage(image_id, config, tuple(diff_ids))

    def write_layer(self, image: StoredImage, index: int, out: Sink) -> int:
        """Layer ``index`` of ``image`` as its exact tar, written to ``out``; its size. :class:`StoreUnreadable` when
        it cannot be read or its SHA-256 is not the diff ID (``out`` then holds bytes that must not be used)."""
        folder = self.images / "layerdb" / "sha256" / chain_id(image.diff_ids[: index + 1]).split(":", 1)[1]
        want = image.diff_ids[index]
        if self._read(folder / "diff", 80).decode("ascii", "replace").strip() != want:
            raise StoreUnreadable(f"{folder}/diff does not name {want}")
        cache_id = self._read(folder / "cache-id", CACHE_ID_CAP).decode("ascii", "replace").strip()
        if not cache_id.isalnum():
            raise StoreUnreadable(f"{folder}/cache-id is not a layer folder's name")
        files = Files(self.root / "overlay2" / cache_id / "diff")
        sha, size = hashlib.sha256(), 0
        for piece in self._pieces(folder / "tar-split.json.gz", files):
            sha.update(piece)
            out.write(piece)
            size += len(piece)
        if "sha256:" + sha.hexdigest() != want:
            raise StoreUnreadable(f"layer {want} read from {folder} hashes to sha256:{sha.hexdigest()}")
        return size

    def _pieces(self, record: Path, files: Files) -> Iterator[bytes]:
        """The tar's bytes, in order: each segment as recorded, each file's content from the layer's folder."""
        packed = self._read(record, RECORD_CAP)
        try:
            stream = gzip.GzipFile(fileobj=io.BytesIO(packed))
            while line := stream.readline(RECORD_LINE_CAP + 1):
                if len(line) > RECORD_LINE_CAP:
                    raise StoreUnreadable(f"{record}: an entry over {RECORD_LINE_CAP} bytes")
                kind, name, size, payload = entry(loader.parse_json_line(line, str(record)), record)
                if kind == SEGMENT_ENTRY:
                    yield payload
                elif size:
                    yield from files.content(name, size)
        except (OSError, EOFError, zlib.error) as exc:
            raise StoreUnreadable(f"{record}: not a gzipped tar-split record ({exc})") from None

    def _read(self, path: Path, cap: int) -> bytes:
        try:
            return loader.read_confined(path, root=self.root, cap=cap)
        except UserError as exc:
            raise StoreUnreadable(str(exc)) from None


def entry(doc: Any, record: Path) -> tuple[int, bytes, int, bytes]:
    """One tar-split entry: (kind, file name, file size, segment bytes)."""
    if not isinstance(doc, dict) or doc.get("type") not in (FILE_ENTRY, SEGMENT_ENTRY):
        raise StoreUnreadable(f"{record}: an entry that is neither a file nor a segment")
    try:
        payload = base64.b64decode(doc.get("payload") or "", validate=True)
        if doc["type"] == SEGMENT_ENTRY:
            return SEGMENT_ENTRY, b"", 0, payload
        raw = doc.get("name_raw")
        name = base64.b64decode(raw, validate=True) if isinstance(raw, str) else str(doc.get("name", "")).encode()
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise StoreUnreadable(f"{record}: an entry whose payload or name is not base64 text") from None
    size = doc.get("size", 0)
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise StoreUnreadable(f"{record}: a file entry without a size")
    return FILE_ENTRY, name, size, b""


class Files:
    """A layer's overlay2 folder: a file's content by its name in the tar, never from outside the folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = os.path.realpath(os.fsencode(folder))
        self.checked: dict[bytes, bool] = {}  # folder (relative) -> it resolves inside the layer's folder

    def content(self, name: bytes, size: int) -> Iterator[bytes]:
        parts = [p for p in name.split(b"/") if p not in (b"", b".")]
        if not parts or b".." in parts or name.startswith(b"/"):
            raise StoreUnreadable(f"a file named {name!r} in the record: not a path inside the layer")
        parent = b"/".join(parts[:-1])
        if not self._inside(parent):
            raise StoreUnreadable(f"{name!r}: its folder leaves the layer's folder")
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(os.path.join(self.folder, *parts), flags)
        except OSError as exc:
            raise StoreUnreadable(f"{name!r} in the layer's folder cannot be read ({exc.strerror})") from None
        with os.fdopen(fd, "rb", buffering=0) as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise StoreUnreadable(f"{name!r} in the layer's folder is not a regular file")
            left = size
            while left:
                piece = fh.read(min(left, PIECE))
                if not piece:
                    raise StoreUnreadable(f"{name!r} in the layer's folder is shorter than its record says")
                left -= len(piece)
                yield piece

    def _inside(self, parent: bytes) -> bool:
        if parent not in self.checked:
            real = os.path.realpath(os.path.join(self.folder, parent))
            self.checked[parent] = real == self.folder or real.startswith(self.folder + b"/")
        return self.checked[parent]


def chain_id(diff_ids: tuple[str, ...]) -> str:
    """The layer store's key for a stack of layers (the OCI image spec's ChainID)."""
    chain = diff_ids[0]
    for diff in diff_ids[1:]:
        chain = "sha256:" + hashlib.sha256(f"{chain} {diff}".encode()).hexdigest()
    return chain

