"""The build's CUDA step: for every CUDA wheel set of the plan, the image each
of its cells builds FROM: the cell's OS base plus one layer holding the set.

Per set, once: build its rendered context (``build/cuda-<set>/``: the OS's
python3 downloads the pinned wheels into /wheels), copy the wheels out, write
the layer (``imagesmith.cudalayer``) and ``docker load`` one image per OS base
from a single streamed archive. The image ID is the sha256 of a canonical
config, so the same base and the same set give the same image, layer and ID on
any engine. A cache tag per (base image, set, SOURCE_DATE_EPOCH) makes warm
runs a single lookup. Runs beside the DAG: a base target waits only for its own
CUDA image.
"""

from __future__ import annotations

import hashlib
import shutil
import threading
import time
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from imagesmith import cudalayer
from imagesmith.engine import Engine
from imagesmith.errors import BuildError
from imagesmith.plan import CudaSet, Plan, Target, cuda_image
from imagesmith.progress import Display
from imagesmith.render import cuda_set_folder
from imagesmith.units import gb

KEY_SCHEMA = "imagesmith.cuda-layer/1"
LABEL = "io.imagesmith.cuda."
# Builds a rendered context that is not a target: (folder, tag, target whose sources it uses, base image ID) -> image ID
ContextBuilder = Callable[[str, str, Target, str], str]


@dataclass
class CudaResult:
    """One CUDA image: what the build report records."""

    set: str
    base_image: str
    image: str
    status: str = "queued"  # built | cached | failed
    image_id: str | None = None
    diff_id: str | None = None
    layer_bytes: int = 0  # the layer's tar (unpacked size)
    image_bytes: int = 0  # the CUDA image: OS base + layer
    seconds: float = 0.0
    error: str | None = None


def cache_key(base_id: str, cuda_set: CudaSet, epoch: int | None) -> str:
    text = "\0".join([KEY_SCHEMA, base_id, cuda_set.prefix, str(epoch), *cuda_set.pins])
    return hashlib.sha256(text.encode()).hexdigest()


def labels(cuda_set: CudaSet) -> dict[str, str]:
    """What the CUDA image (and every image built on it) declares about the layer."""
    return {LABEL + "set": cuda_set.id, LABEL + "libs": cuda_set.prefix, LABEL + "wheels": " ".join(cuda_set.pins)}


def users(plan: Plan) -> dict[CudaSet, list[Target]]:
    """The base targets of each CUDA wheel set, in plan order."""
    out: dict[CudaSet, list[Target]] = {}
    for t in plan.targets:
        if t.cuda_set is not None:
            out.setdefault(t.cuda_set, []).append(t)
    return out


class CudaImages:
    def __init__(self, plan: Plan, repository: str, engine: Engine, out: Path, base_ids: Mapping[str, str],
                 build_context: ContextBuilder, display: Display, epoch: int | None, cache_repository: str) -> None:
        self.plan, self.repository, self.engine, self.out = plan, repository, engine, out
        self.cache_repository = cache_repository
        self.base_ids, self.build_context, self.display, self.epoch = base_ids, build_context, display, epoch
        self.futures: dict[tuple[str, str], Future[str]] = {}
        self.results: dict[tuple[str, str], CudaResult] = {}
        for cuda_set, targets in users(plan).items():
            for t in targets:
                key = (cuda_set.id, t.base_image)
                self.futures.setdefault(key, Future())
                self.results.setdefault(key, CudaResult(cuda_set.id, t.base_image, cuda_image(t, repository)))

    def start(self) -> None:
        for cuda_set, targets in users(self.plan).items():
            threading.Thread(target=self._run, args=(cuda_set, targets), name=f"cuda-{cuda_set.id}", daemon=True).start()

    def key_for(self, t: Target) -> str:
        """The cache key of ``t``'s CUDA image (known before it is made)."""
        assert t.cuda_set is not None
        return self._key(t.cuda_set, t)

    def image_for(self, t: Target) -> str:
        """The image ID ``t`` builds FROM (waits until it is made)."""
        assert t.cuda_set is not None
        return self.futures[(t.cuda_set.id, t.base_image)].result()

    def report(self) -> list[dict[str, Any]]:
        return [asdict(r) for r in self.results.values()]

    # -- one set ------------------------------------------------------------------------
    def _run(self, cuda_set: CudaSet, targets: list[Target]) -> None:
        t0 = time.monotonic()
        pending = list(dict((t.base_image, t) for t in targets).values())
        try:
            pending = [t for t in pending if not self._cached(cuda_set, t)]
            if pending:
                self._make(cuda_set, pending)
        except Exception as exc:  # every waiting base target fails with this message
            for t in pending:
                self._fail(cuda_set, t, exc)
        for t in pending:
            self.results[(cuda_set.id, t.base_image)].seconds = round(time.monotonic() - t0, 2)

    def _cached(self, cuda_set: CudaSet, t: Target) -> bool:
        info = self.engine.image(f"{self.cache_repository}:{self._key(cuda_set, t)}")
        if info is None:
            return False
        self.engine.tag(info.id, *cuda_image(t, self.repository).split(":", 1))
        base = self.engine.image(self.base_ids[t.base_image])
        self.results[(cuda_set.id, t.base_image)].layer_bytes = info.size - (base.size if base else 0)
        self._done(cuda_set, t, info.id, info.layers[-1] if info.layers else None, "cached")
        return True

    def _make(self, cuda_set: CudaSet, targets: list[Target]) -> None:
        item = cuda_set_folder(cuda_set)
        self.display.update(item, "building", f"downloading {len(cuda_set.wheels)} wheels")
        wheels_dir = self.out / item / "wheels"
        try:
            wheels = self._download(cuda_set, targets[0], wheels_dir)
            self.display.update(item, "building", f"writing the layer onto {len(targets)} OS base(s)")
            archive = self._load(cuda_set, targets, cudalayer.layer_sources(wheels, self.epoch))
        finally:
            shutil.rmtree(wheels_dir, ignore_errors=True)
        assert archive.layer is not None
        for t in targets:
            self._check(cuda_set, t, archive)
        self.display.update(item, "done", f"{gb(archive.layer.size)} layer {archive.layer.diff_id[:19]}")

    def _download(self, cuda_set: CudaSet, t: Target, dest: Path) -> list[Path]:
        tag = f"imagesmith-cuda-wheels:{cuda_set.id}"
        image = self.build_context(cuda_set_folder(cuda_set), tag, t, self.base_ids[t.base_image])
        try:
            shutil.rmtree(dest, ignore_errors=True)
            wheels = [p for p in self.engine.export_dir(image, "/wheels", dest) if p.suffix == ".whl"]
        finally:  # its 2 GB of wheels; the steps below it are shared with other builder stages (layer cache)
            self.engine.remove_image(tag, keep_parents=True)
        if len(wheels) != len(cuda_set.wheels):
            raise BuildError(f"cuda set {cuda_set.id}: pip downloaded {len(wheels)} wheels, the set has {len(cuda_set.wheels)}")
        return wheels

    def _load(self, cuda_set: CudaSet, targets: list[Target], sources: list[cudalayer.Source]) -> cudalayer.Archive:
        requests = [cudalayer.ImageRequest(self.engine.image_config(self.base_ids[t.base_image]), cuda_image(t, self.repository))
                    for t in targets]
        archive = cudalayer.Archive(sources, requests, labels(cuda_set), self._created_by(cuda_set), cuda_set.prefix)
        self.engine.load(archive.chunks())
        return archive

    def _check(self, cuda_set: CudaSet, t: Target, archive: cudalayer.Archive) -> None:
        ref = cuda_image(t, self.repository)
        want = cudalayer.image_id(archive.configs[ref])
        info = self.engine.image(ref)
        if info is None or info.id != want:
            raise BuildError(f"docker load made {info.id if info else 'nothing'} for {ref}, expected {want}")
        self.engine.tag(info.id, self.cache_repository, self._key(cuda_set, t))
        assert archive.layer is not None
        self.results[(cuda_set.id, t.base_image)].layer_bytes = archive.layer.size
        self._done(cuda_set, t, info.id, archive.layer.diff_id, "built")

    # -- bookkeeping -------------------------------------------------------------------------
    def _key(self, cuda_set: CudaSet, t: Target) -> str:
        return cache_key(self.base_ids[t.base_image], cuda_set, self.epoch)

    def _created_by(self, cuda_set: CudaSet) -> str:
        return f"imagesmith: CUDA wheel set {cuda_set.id} ({len(cuda_set.wheels)} wheels) at {cuda_set.prefix}"

    def _done(self, cuda_set: CudaSet, t: Target, image_id: str, diff_id: str | None, status: str) -> None:
        result = self.results[(cuda_set.id, t.base_image)]
        result.status, result.image_id, result.diff_id = status, image_id, diff_id
        info = self.engine.image(image_id)
        result.image_bytes = info.size if info else 0
        future = self.futures[(cuda_set.id, t.base_image)]
        if not future.done():
            future.set_result(image_id)

    def _fail(self, cuda_set: CudaSet, t: Target, exc: Exception) -> None:
        if self.futures[(cuda_set.id, t.base_image)].done():
            return
        result = self.results[(cuda_set.id, t.base_image)]
        result.status, result.error = "failed", f"{type(exc).__name__}: {exc}"
        self.display.update(cuda_set_folder(cuda_set), "failed", str(exc).splitlines()[0][:120] if str(exc) else "")
        future = self.futures[(cuda_set.id, t.base_image)]
        if not future.done():
            future.set_exception(BuildError(f"the CUDA layer {cuda_set.id} for {t.base_image} failed: {exc}"))
