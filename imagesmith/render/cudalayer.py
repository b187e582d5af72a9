"""The shared CUDA layer: the Python-independent CUDA wheels a torch build
requires (nvidia-*, cuda-toolkit), unpacked at one prefix as one tar whose
bytes depend only on the wheels.

Every cell whose torch needs the same set of wheels gets a byte-identical
layer, so the registry stores, pushes and serves it once, and cells on one OS
share the whole chain (OS base -> CUDA layer) on a host. The rules:

- entries sorted by path (parents first), directories 0755, files 0644 or
  0755 (the wheel's executable bit), uid/gid 0, no user or group names;
- each file keeps the timestamp its wheel records, clamped to
  ``SOURCE_DATE_EPOCH`` when that is set (as ``tar --clamp-mtime``), and
  directories take the newest file time: the layer does not depend on when,
  where or by whom it is made;
- only library files: no ``.pyc``/``__pycache__``, no installer caches; each
  ``.dist-info`` gets ``INSTALLER`` ("imagesmith") and its ``RECORD`` lists it;
- paths are checked (no absolute paths, no ``..``), so a wheel cannot write
  outside the prefix.

torch finds the libraries through ``imagesmith-cuda.pth`` in the venv, which
puts :data:`PREFIX` on ``sys.path``: ``import nvidia.cudnn`` resolves there,
torch preloads its CUDA libraries from there (its own fallback for CUDA wheels
outside torch's site-packages), and pip counts the distributions as installed.

Standard library only, besides imagesmith.errors (it also runs on a bare GPU
host: bench/cuda_layer_host.py).
"""

from __future__ import annotations

import base64
import calendar
import contextlib
import csv
import datetime as dt
import hashlib
import io
import json
import os
import posixpath
import queue
import tarfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterable, Iterator, Mapping, Protocol, Sequence

from imagesmith.errors import UserError
from imagesmith.model.layout import CUDA_PREFIX

PREFIX = CUDA_PREFIX  # one source of truth: the plan records each set's prefix
PTH_NAME = "imagesmith-cuda.pth"
INSTALLER = b"imagesmith\n"
SKIPPED_SUFFIXES = (".pyc", ".pyo")
SKIPPED_PARTS = ("__pycache__",)
LIBRARY_DATA = ("purelib", "platlib")  # .data/ sub-folders that install next to the package


class LayerError(UserError):
    """A wheel this layer cannot hold (scripts, headers, unsafe paths), or a bad SOURCE_DATE_EPOCH."""


@dataclass(frozen=True)
class Source:
    """One file of the layer: where it goes (relative to the prefix) and where it comes from."""

    path: str
    size: int
    mtime: int
    executable: bool
    origin: str = ""  # a wheel (with ``member``) or a file on disk; "" for ``data``
    member: str = ""
    data: bytes | None = None


@dataclass(frozen=True)
class LayerInfo:
    diff_id: str  # sha256 of the uncompressed tar: the layer's DiffID in an image config
    size: int  # bytes of the tar
    files: int
    content_bytes: int  # bytes of file content (what the layer unpacks to, roughly)


# -- rules (pure) ------------------------------------------------------------------------------


def clamp(mtime: int, epoch: int | None) -> int:
    """``tar --clamp-mtime``: never newer than SOURCE_DATE_EPOCH, when it is set."""
    return min(mtime, epoch) if epoch is not None else mtime


def source_date_epoch(environ: dict[str, str] | None = None) -> int | None:
    value = (os.environ if environ is None else environ).get("SOURCE_DATE_EPOCH", "").strip()
    if not value:
        return None
    if not value.isdigit():
        raise LayerError(f"SOURCE_DATE_EPOCH={value!r}: expected seconds since 1970 (an integer), e.g. $(git log -1 --format=%ct)")
    return int(value)


def safe_path(name: str, origin: str) -> str:
    """A relative POSIX path with no ``..``, or LayerError."""
    norm = posixpath.normpath(name)
    if name.startswith("/") or norm.startswith("..") or norm in ("", ".") or "\\" in name or "\0" in name:
        raise LayerError(f"{origin}: unsafe path {name!r} (absolute, outside the prefix, or empty)")
    return norm


def skipped(path: str) -> bool:
    return path.endswith(SKIPPED_SUFFIXES) or any(part in SKIPPED_PARTS for part in path.split("/"))


def installed_path(name: str, data_dir: str, origin: str) -> str:
    """Where a wheel member installs, relative to site-packages (library data only)."""
    if not name.startswith(data_dir + "/"):
        return name
    parts = name.split("/", 2)
    if len(parts) < 3 or parts[1] not in LIBRARY_DATA:
        raise LayerError(f"{origin}: {name!r} is not library code ({data_dir}/{parts[1] if len(parts) > 1 else ''}); "
                         "the CUDA layer holds library wheels only")
    return parts[2]


# -- sources -----------------------------------------------------------------------------------


def wheel_sources(wheel: Path, epoch: int | None) -> list[Source]:
    """The files ``wheel`` installs, with INSTALLER added and RECORD rewritten to list it."""
    with zipfile.ZipFile(wheel) as zf:
        infos = [i for i in zf.infolist() if not i.is_dir()]
    dist_info = _dist_info(wheel, [i.filename for i in infos])
    data_dir = dist_info[: -len(".dist-info")] + ".data"
    out: list[Source] = []
    record: bytes | None = None
    for info in infos:
        path = safe_path(installed_path(info.filename, data_dir, wheel.name), wheel.name)
        if skipped(path):
            continue
        mtime = clamp(calendar.timegm(info.date_time + (0, 0, -1)), epoch)
        if path == f"{dist_info}/RECORD":
            with zipfile.ZipFile(wheel) as zf:
                record = zf.read(info)
            continue
        executable = bool((info.external_attr >> 16) & 0o111)
        out.append(Source(path, info.file_size, mtime, executable, str(wheel), info.filename))
    newest = max((s.mtime for s in out), default=0)
    installer = _bytes_source(f"{dist_info}/INSTALLER", INSTALLER, newest)
    kept = {s.path for s in out}
    rows = _record_rows(record or b"", dist_info, kept)
    return out + [installer, _bytes_source(f"{dist_info}/RECORD", _record(rows, installer), newest)]


def _dist_info(wheel: Path, names: Sequence[str]) -> str:
    found = sorted({n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")})
    if len(found) != 1:
        raise LayerError(f"{wheel.name}: expected one .dist-info folder, found {len(found)}")
    return found[0]


def _record_rows(record: bytes, dist_info: str, kept: set[str]) -> list[list[str]]:
    """The wheel's RECORD rows for files the layer holds (paths as installed)."""
    rows = [row for row in csv.reader(io.StringIO(record.decode())) if row]
    data_dir = dist_info[: -len(".dist-info")] + ".data"
    out = []
    for row in rows:
        path = posixpath.normpath(installed_path(row[0], data_dir, dist_info))
        if path in kept:
            out.append([path, *row[1:]])
    return out


def _record(rows: list[list[str]], installer: Source) -> bytes:
    b64 = base64.urlsafe_b64encode(hashlib.sha256(INSTALLER).digest()).rstrip(b"=").decode()
    dist_info = installer.path.rsplit("/", 1)[0]
    rows = sorted(rows + [[installer.path, f"sha256={b64}", str(len(INSTALLER))]]) + [[f"{dist_info}/RECORD", "", ""]]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue().encode()


def _bytes_source(path: str, data: bytes, mtime: int) -> Source:
    return Source(path, len(data), mtime, False, data=data)


class _Opener:
    """Opens sources; keeps each wheel's archive open for all its members."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self.stack = stack
        self.zips: dict[str, zipfile.ZipFile] = {}

    def __call__(self, src: Source) -> IO[bytes]:
        if src.data is not None:
            return io.BytesIO(src.data)
        if not src.member:
            return open(src.origin, "rb")
        if src.origin not in self.zips:
            self.zips[src.origin] = self.stack.enter_context(zipfile.ZipFile(src.origin))
        return self.zips[src.origin].open(src.member)


# -- the layer ---------------------------------------------------------------------------------


def layer_sources(wheels: Iterable[Path], epoch: int | None) -> list[Source]:
    """Every file of the layer, sorted; two wheels may install the same path only with the same bytes (the CUDA 12
    wheels each ship an empty ``nvidia/__init__.py``; pip lays one over the other), which the layer then holds once."""
    seen: dict[str, Source] = {}
    out: list[Source] = []
    with contextlib.ExitStack() as stack:
        opener = _Opener(stack)
        for wheel in sorted(wheels, key=lambda p: p.name):
            for src in wheel_sources(wheel, epoch):
                first = seen.get(src.path)
                if first is None:
                    seen[src.path] = src
                    out.append(src)
                elif not _same_bytes(opener, first, src):
                    raise LayerError(f"{wheel.name} and {Path(first.origin).name} both install {src.path}")
    return sorted(out, key=lambda s: s.path.split("/"))


def _same_bytes(opener: _Opener, a: Source, b: Source) -> bool:
    if a.size != b.size:
        return False
    with opener(a) as x, opener(b) as y:
        return x.read() == y.read()


def tar_entries(sources: Sequence[Source], prefix: str = PREFIX) -> list[tuple[tarfile.TarInfo, Source | None]]:
    """Tar headers for the prefix's parents, every directory and every file, parents first."""
    newest = max((s.mtime for s in sources), default=0)
    root = prefix.strip("/")
    dirs = {"/".join(root.split("/")[:i]) for i in range(1, root.count("/") + 2)}
    for src in sources:
        parts = f"{root}/{src.path}".split("/")
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
    entries: list[tuple[tuple[str, ...], tarfile.TarInfo, Source | None]] = [
        (tuple(d.split("/")), _info(d, tarfile.DIRTYPE, 0o755, newest, 0), None) for d in dirs]
    for src in sources:
        path = f"{root}/{src.path}"
        entries.append((tuple(path.split("/")), _info(path, tarfile.REGTYPE, 0o755 if src.executable else 0o644,
                                                        src.mtime, src.size), src))
    return [(info, src) for _, info, src in sorted(entries, key=lambda e: e[0])]


def _info(path: str, kind: bytes, mode: int, mtime: int, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(path)
    info.type, info.mode, info.mtime, info.size = kind, mode, mtime, size
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


ENCODING = ("utf-8", "surrogateescape")
COPY_BUFFER = 1 << 20  # bytes per read of a file into the tar (tarfile's default, 16 KiB, costs a call per 16 KiB)


class Writer(Protocol):
    def write(self, data: bytes, /) -> int: ...


class _Digest(io.RawIOBase):
    """A write-only sink that hashes and counts what passes through to ``out``."""

    def __init__(self, out: Writer | None) -> None:
        self.out, self.sha, self.size = out, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.size

    def write(self, data: Any) -> int:
        self.sha.update(data)
        self.size += len(data)
        if self.out is not None:
            self.out.write(bytes(data))
        return len(data)


def tar_size(sources: Sequence[Source], prefix: str = PREFIX) -> int:
    """The exact size :func:`write_layer` will write (headers + padded data +
    end blocks, padded to a tar record), computed without reading any file."""
    size = sum(len(info.tobuf(tarfile.PAX_FORMAT, *ENCODING)) + _padded(info.size)
               for info, _ in tar_entries(sources, prefix)) + 2 * tarfile.BLOCKSIZE
    return -(-size // tarfile.RECORDSIZE) * tarfile.RECORDSIZE


def _padded(size: int) -> int:
    return -(-size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE


def write_layer(sources: Sequence[Source], out: Writer | None, prefix: str = PREFIX) -> LayerInfo:
    """Write the layer tar to ``out`` (None: only measure); its digest and size."""
    sink = _Digest(out)
    files = content = 0
    with contextlib.ExitStack() as stack:
        opener = _Opener(stack)
        tar = stack.enter_context(tarfile.open(fileobj=sink, mode="w", format=tarfile.PAX_FORMAT,
                                               encoding=ENCODING[0], errors=ENCODING[1]))
        tar.copybufsize = COPY_BUFFER  # type: ignore[attr-defined]  # tarfile has it (3.8+); typeshed does not say
        for info, src in tar_entries(sources, prefix):
            if src is None:
                tar.addfile(info)
                continue
            with opener(src) as fh:
                tar.addfile(info, fh)
            files, content = files + 1, content + src.size
    return LayerInfo("sha256:" + sink.sha.hexdigest(), sink.size, files, content)


def stub_files(pins: Iterable[str]) -> dict[str, bytes]:
    """``<dist>.dist-info/METADATA`` (name and version only) for each ``name==version``:
    what a build stage needs for pip to count the CUDA wheels as installed
    before the layer holding them exists."""
    out = {}
    for pin in pins:
        name, _, version = pin.partition("==")
        folder = f"{name.replace('-', '_')}-{version}.dist-info"
        out[f"{folder}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    return out


def pth_line(prefix: str = PREFIX) -> str:
    """The one line of ``imagesmith-cuda.pth``: the prefix goes on sys.path."""
    return prefix + "\n"


# -- the image: OS base + this layer, as a `docker load` archive ---------------------------------


def iso_time(epoch: int) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def image_epoch(sources: Sequence[Source]) -> int:
    """The image's ``created``: the layer's newest file time (already clamped to
    SOURCE_DATE_EPOCH), so the image ID stays the same while the wheels do."""
    return max((s.mtime for s in sources), default=0)


def image_config(base: Mapping[str, Any], diff_id: str, created: str, labels: Mapping[str, str], created_by: str) -> bytes:
    """The base image's config plus one layer: same environment and command,
    ``labels`` added, ``created`` fixed; the build-container fields of the base
    (which describe how *it* was made) dropped. Canonical JSON, so the image ID
    (its sha256) is the same on every engine."""
    cfg = json.loads(json.dumps(dict(base)))
    for key in ("container", "container_config", "docker_version", "id", "parent"):
        cfg.pop(key, None)
    cfg["created"] = created
    cfg.setdefault("config", {})
    cfg["config"]["Labels"] = {**(cfg["config"].get("Labels") or {}), **labels}
    cfg["rootfs"] = {"type": "layers", "diff_ids": [*cfg.get("rootfs", {}).get("diff_ids", []), diff_id]}
    cfg["history"] = [*cfg.get("history", []), {"created": created, "created_by": created_by, "comment": "imagesmith"}]
    return json.dumps(cfg, sort_keys=True, separators=(",", ":")).encode()


def image_id(config: bytes) -> str:
    return "sha256:" + hashlib.sha256(config).hexdigest()


def image_configs(requests: Sequence["ImageRequest"], diff_id: str, sources: Sequence[Source], labels: Mapping[str, str],
                  created_by: str) -> dict[str, bytes]:
    """Each request's image config (by tag): its base plus the layer ``diff_id``, created at the layer's time."""
    created = iso_time(image_epoch(sources))
    return {req.tag: image_config(req.base_config, diff_id, created, labels, created_by) for req in requests}


@dataclass(frozen=True)
class ImageRequest:
    """One image to make: the base's raw config (from ``docker save``) and the tag to give the result."""

    base_config: Mapping[str, Any]
    tag: str


class _Queue(io.RawIOBase):
    """A writer whose output a generator reads (1 MiB chunks through a bounded queue)."""

    CHUNK = 1 << 20

    def __init__(self) -> None:
        self.q: queue.Queue[bytes | None] = queue.Queue(maxsize=16)
        self.buf = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.buf += data
        if len(self.buf) >= self.CHUNK:
            self.q.put(bytes(self.buf))
            self.buf.clear()
        return len(data)

    def finish(self) -> None:
        if self.buf:
            self.q.put(bytes(self.buf))
        self.q.put(None)

    def chunks(self) -> Iterator[bytes]:
        while (chunk := self.q.get()) is not None:
            yield chunk


@dataclass
class Archive:
    """A streamed ``docker load`` archive of images that share one CUDA layer.

    Iterate :meth:`chunks` (e.g. as a request body); afterwards ``layer`` holds
    the layer's digest and ``configs`` each image's config, by tag. ``also``, when
    given, is written the layer's tar too, as it is made (an upload of it)."""

    sources: Sequence[Source]
    requests: Sequence[ImageRequest]
    labels: Mapping[str, str]
    created_by: str
    prefix: str = PREFIX
    layer: LayerInfo | None = None
    also: Writer | None = None

    def __post_init__(self) -> None:
        self.configs: dict[str, bytes] = {}

    def chunks(self) -> Iterator[bytes]:
        size = tar_size(self.sources, self.prefix)
        yield _member_header("cuda/layer.tar", size)
        yield from self._layer(size)
        yield b"\0" * (_padded(size) - size)
        assert self.layer is not None
        manifest = []
        self.configs.update(image_configs(self.requests, self.layer.diff_id, self.sources, self.labels, self.created_by))
        for req in self.requests:
            config = self.configs[req.tag]
            name = image_id(config).split(":", 1)[1] + ".json"
            yield from _member(name, config)
            bases = len(req.base_config.get("rootfs", {}).get("diff_ids", []))
            manifest.append({"Config": name, "RepoTags": [req.tag],
                             "Layers": [f"base-{i}/layer.tar" for i in range(bases)] + ["cuda/layer.tar"]})
        yield from _member("manifest.json", json.dumps(manifest).encode())
        yield b"\0" * (2 * tarfile.BLOCKSIZE)

    def _layer(self, size: int) -> Iterator[bytes]:
        pipe, failure = _Queue(), []

        def produce() -> None:
            try:
                self.layer = write_layer(self.sources, pipe if self.also is None else _Tee(pipe, self.also), self.prefix)
            except BaseException as exc:  # handed to the consumer below
                failure.append(exc)
            finally:
                pipe.finish()
        thread = threading.Thread(target=produce, name="cuda-layer", daemon=True)
        thread.start()
        yield from pipe.chunks()
        thread.join()
        if failure:
            raise failure[0]
        if self.layer is None or self.layer.size != size:
            raise LayerError(f"the CUDA layer came out {self.layer.size if self.layer else 0} bytes, {size} expected")


class _Tee:
    def __init__(self, *outs: Writer) -> None:
        self.outs = outs

    def write(self, data: bytes, /) -> int:
        for out in self.outs:
            out.write(data)
        return len(data)


def _member_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mode = size, 0o644
    return info.tobuf(tarfile.USTAR_FORMAT, *ENCODING)


def _member(name: str, data: bytes) -> Iterator[bytes]:
    yield _member_header(name, len(data))
    yield data + b"\0" * (_padded(len(data)) - len(data))
