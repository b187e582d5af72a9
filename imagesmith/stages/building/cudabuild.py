"""The build's CUDA step: for every CUDA wheel set of the plan, the image each
of its cells builds FROM: the cell's OS base plus one layer holding the set.

Per set, once: download the pinned wheels (``pip download --no-deps
--only-binary=:all:`` with imagesmith's own pip, from the cells' package
sources only, for the wheel platforms the OS's glibc accepts; log in
``build/cuda-<set>/download.log``), write the layer (``imagesmith.render.cudalayer``)
and ``docker load`` one image per OS base from a single streamed archive (with a staging repository, the
layer goes there instead and the engine pulls each image: :mod:`imagesmith.stages.building.cudastage`). The image ID is the sha256 of a canonical
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
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from imagesmith.edges.protocols import EngineProtocol
from imagesmith.errors import BuildError
from imagesmith.model.buildreport import CudaLayer
from imagesmith.model.plan import CudaSet, Plan, Target, cuda_image
from imagesmith.progress import Display
from imagesmith.render import cudalayer
from imagesmith.stages.building.cudastage import Delivery
from imagesmith.units import gb

KEY_SCHEMA = "imagesmith.cuda-layer/1"
LABEL = "io.imagesmith.cuda."
# Downloads a set's wheels: (a target whose package sources it uses, pins, destination folder, log file)
Downloader = Callable[[Target, Sequence[str], Path, Path], None]
ARCH = "x86_64"  # linux/amd64's (uname -m); another platform's sets pass Platform.uname
LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}  # PEP 600's aliases, by glibc 2.N


def cuda_set_folder(cuda_set: CudaSet) -> str:
    """The set's folder under the build's output (its download log) and its line in the progress display."""
    return f"cuda-{cuda_set.id}"


def platforms(glibc: str, arch: str = ARCH) -> list[str]:
    """The wheel platform tags an OS with this glibc (``major.minor``) accepts, newest first."""
    major, minor = (int(part) for part in glibc.split(".")[:2])
    if major != 2 or minor < 5:
        raise BuildError(f"glibc {glibc}: manylinux wheels need glibc 2.5 or newer")
    return [f"manylinux_2_{m}_{arch}" for m in range(minor, 4, -1)] + \
           [f"{name}_{arch}" for m, name in LEGACY_MANYLINUX.items() if m <= minor]


def download_argv(python: str, pins: Sequence[str], dest: Path, sources: Mapping[str, str], glibc: str,
                  python_version: str, ca_bundle: Path | None, arch: str = ARCH) -> list[str]:
    """pip download of exactly ``pins`` (no dependencies, wheels only) from ``sources`` (the build's
    PIP_* arguments) alone: ``--isolated`` and PIP_CONFIG_FILE=/dev/null (the caller's environment)
    keep the host's pip configuration out, as the build container never saw it."""
    argv = [python, "-m", "pip", "download", "--isolated", "--no-cache-dir", "--disable-pip-version-check",
            "--progress-bar", "off", "--no-deps", "--only-binary=:all:", "--dest", str(dest),
            "--python-version", python_version, *(f"--platform={tag}" for tag in platforms(glibc, arch))]
    if sources.get("PIP_INDEX_URL"):
        argv += ["--index-url", sources["PIP_INDEX_URL"]]
    for option, key in (("--extra-index-url", "PIP_EXTRA_INDEX_URL"), ("--find-links", "PIP_FIND_LINKS"),
                        ("--trusted-host", "PIP_TRUSTED_HOST")):
        for value in sources.get(key, "").split():
            argv += [option, value]
    if ca_bundle is not None:
        argv += ["--cert", str(ca_bundle)]
    return argv + list(pins)


def cache_key(base_id: str, cuda_set: CudaSet, epoch: int | None) -> str:
    """The CUDA image's cache key; it names the set's platform (linux/amd64's keys are unchanged), so an image of one
    machine is never taken for another's even where the engine hands out a base of the wrong one (moby/moby#47823)."""
    text = "\0".join([KEY_SCHEMA, base_id, cuda_set.prefix, str(epoch), *cuda_set.pins, *cuda_set.platform.cache_parts])
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
    def __init__(self, plan: Plan, repository: str, engine: EngineProtocol, out: Path, base_ids: Mapping[str, str],
                 download: Downloader, display: Display, epoch: int | None, cache_repository: str,
                 delivery: Delivery | None = None) -> None:
        self.plan, self.repository, self.engine, self.out = plan, repository, engine, out
        self.delivery = delivery  # the staging repository's route for the layer (None: docker load)
        self.cache_repository = cache_repository
        self.base_ids, self.download, self.display, self.epoch = base_ids, download, display, epoch
        self.futures: dict[tuple[str, str], Future[str]] = {}
        self.known: dict[str, threading.Event] = {s.id: threading.Event() for s in users(plan)}  # wait_known
        self.results: dict[tuple[str, str], CudaLayer] = {}  # what the build report records, replaced as it goes
        for cuda_set, targets in users(plan).items():
            for t in targets:
                key = (cuda_set.id, t.base_image)
                self.futures.setdefault(key, Future())
                self.results.setdefault(key, CudaLayer(cuda_set.id, t.base_image, cuda_image(t, repository), "queued"))

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

    def report(self) -> list[CudaLayer]:
        return list(self.results.values())

    # -- one set ------------------------------------------------------------------------
    def _run(self, cuda_set: CudaSet, targets: list[Target]) -> None:
        try:
            self._run_set(cuda_set, targets)
        finally:
            self.known[cuda_set.id].set()  # however the set ended, no push waits for it any more

    def _run_set(self, cuda_set: CudaSet, targets: list[Target]) -> None:
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
            self._record(cuda_set, t, seconds=round(time.monotonic() - t0, 2))

    def _cached(self, cuda_set: CudaSet, t: Target) -> bool:
        info = self.engine.image(f"{self.cache_repository}:{self._key(cuda_set, t)}")
        if info is None:
            return False
        self.engine.tag(info.id, *cuda_image(t, self.repository).split(":", 1))
        base = self.engine.image(self.base_ids[t.base_image])
        self._record(cuda_set, t, layer_bytes=info.size - (base.size if base else 0))
        self._done(cuda_set, t, info.id, info.layers[-1] if info.layers else None, "cached")
        return True

    def _make(self, cuda_set: CudaSet, targets: list[Target]) -> None:
        item = cuda_set_folder(cuda_set)
        self.display.update(item, "building", f"downloading {len(cuda_set.wheels)} wheels")
        wheels_dir = self.out / item / "wheels"
        try:
            wheels = self._download(cuda_set, targets[0], wheels_dir)
            self.display.update(item, "building", f"writing the layer onto {len(targets)} OS base(s)")
            sources = cudalayer.layer_sources(wheels, self.epoch)
            if self.delivery is not None:
                layer = self._staged(cuda_set, targets, sources)
            else:
                layer, configs = self._load(cuda_set, targets, sources)
                for t in targets:
                    self._check(cuda_set, t, layer, configs)
        finally:
            shutil.rmtree(wheels_dir, ignore_errors=True)
        self.display.update(item, "done", f"{gb(layer.size)} layer {layer.diff_id[:19]}")

    def _download(self, cuda_set: CudaSet, t: Target, dest: Path) -> list[Path]:
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        self.download(t, cuda_set.pins, dest, self.out / cuda_set_folder(cuda_set) / "download.log")
        wheels = sorted(dest.glob("*.whl"))
        if len(wheels) != len(cuda_set.wheels):
            raise BuildError(f"cuda set {cuda_set.id}: pip downloaded {len(wheels)} wheels, the set has {len(cuda_set.wheels)}")
        return wheels

    def _requests(self, targets: list[Target]) -> list[cudalayer.ImageRequest]:
        return [cudalayer.ImageRequest(self.engine.image_config(self.base_ids[t.base_image]), cuda_image(t, self.repository))
                for t in targets]

    def _load(self, cuda_set: CudaSet, targets: list[Target],
              sources: list[cudalayer.Source]) -> tuple[cudalayer.LayerInfo, Mapping[str, bytes]]:
        archive = cudalayer.Archive(sources, self._requests(targets), labels(cuda_set), self._created_by(cuda_set), cuda_set.prefix)
        self.engine.load(archive.chunks())
        assert archive.layer is not None
        return archive.layer, archive.configs

    def _staged(self, cuda_set: CudaSet, targets: list[Target], sources: list[cudalayer.Source]) -> cudalayer.LayerInfo:
        """With a staging repository: the first OS base's image by ``docker load`` while the layer streams to the
        repository too, the others pulled from there, each target free to start as soon as its own image is there.
        A pull is what tells the engine that the repository has the layer's blob (the pushes wait for it:
        :meth:`wait_known`), so a set with one OS base pulls that one."""
        assert self.delivery is not None
        item, delivery = cuda_set_folder(cuda_set), self.delivery
        requests = self._requests(targets)
        loaded, pulled = (targets[:1], targets[1:]) if len(targets) > 1 else ([], targets)
        self.display.update(item, "building", f"writing the layer to {delivery.name} (gzip)" +
                            (" and onto the first OS base" if loaded else ""))
        upload = delivery.start_upload()
        try:
            if loaded:
                archive = cudalayer.Archive(sources, requests[:1], labels(cuda_set), self._created_by(cuda_set),
                                            cuda_set.prefix, also=upload)
                self.engine.load(archive.chunks())
                assert archive.layer is not None
                layer = archive.layer
            else:
                layer = cudalayer.write_layer(sources, upload, cuda_set.prefix)
            configs = cudalayer.image_configs(requests, layer.diff_id, sources, labels(cuda_set), self._created_by(cuda_set))
            for t in loaded:
                self._check(cuda_set, t, layer, configs)
            blob = upload.finish()
        except BaseException:
            upload.cancel()
            raise
        delivery.uploaded(layer.diff_id, blob)
        for t, req in zip(pulled, requests[len(loaded):]):
            self.display.update(item, "building", f"pulling {req.tag.rsplit(':', 1)[-1]} from {delivery.name}")
            delivery.image(configs[req.tag], self.base_ids[t.base_image], blob, self._key(cuda_set, t), req.tag)
            self.known[cuda_set.id].set()
            self._check(cuda_set, t, layer, configs)
        return layer

    def wait_known(self, t: Target) -> None:
        """Before ``t``'s staging push: until the engine has pulled its CUDA set's layer from the staging repository
        (so the push finds the blob there) or the set's images are all made either way."""
        if t.cuda_set is not None and t.cuda_set.id in self.known:
            self.known[t.cuda_set.id].wait()

    def _check(self, cuda_set: CudaSet, t: Target, layer: cudalayer.LayerInfo, configs: Mapping[str, bytes]) -> None:
        ref = cuda_image(t, self.repository)
        want = cudalayer.image_id(configs[ref])
        info = self.engine.image(ref)
        if info is None or info.id != want:
            raise BuildError(f"docker load made {info.id if info else 'nothing'} for {ref}, expected {want}")
        self.engine.tag(info.id, self.cache_repository, self._key(cuda_set, t))
        self._record(cuda_set, t, layer_bytes=layer.size)
        self._done(cuda_set, t, info.id, layer.diff_id, "built")

    # -- bookkeeping -------------------------------------------------------------------------
    def _key(self, cuda_set: CudaSet, t: Target) -> str:
        return cache_key(self.base_ids[t.base_image], cuda_set, self.epoch)

    def _created_by(self, cuda_set: CudaSet) -> str:
        return f"imagesmith: CUDA wheel set {cuda_set.id} ({len(cuda_set.wheels)} wheels) at {cuda_set.prefix}"

    def _record(self, cuda_set: CudaSet, t: Target, **changes: Any) -> None:
        key = (cuda_set.id, t.base_image)
        self.results[key] = replace(self.results[key], **changes)

    def _done(self, cuda_set: CudaSet, t: Target, image_id: str, diff_id: str | None, status: str) -> None:
        info = self.engine.image(image_id)
        self._record(cuda_set, t, status=status, image_id=image_id, diff_id=diff_id, image_bytes=info.size if info else 0)
        future = self.futures[(cuda_set.id, t.base_image)]
        if not future.done():
            future.set_result(image_id)

    def _fail(self, cuda_set: CudaSet, t: Target, exc: Exception) -> None:
        if self.futures[(cuda_set.id, t.base_image)].done():
            return
        self._record(cuda_set, t, status="failed", error=f"{type(exc).__name__}: {exc}")
        self.display.update(cuda_set_folder(cuda_set), "failed", str(exc).splitlines()[0][:120] if str(exc) else "")
        future = self.futures[(cuda_set.id, t.base_image)]
        if not future.done():
            future.set_exception(BuildError(f"the CUDA layer {cuda_set.id} for {t.base_image} failed: {exc}"))
