"""The compatibility knowledge base: one data file, pure query functions.

``data/compat.yaml`` is the single source of truth for which PyTorch release
ships wheels for which Python and CUDA, which cuDNN/NCCL each variant bundles,
which driver each CUDA needs, and what each OS provides.  Nothing here does
I/O beyond reading that file once.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from imagesmith.model.platform import DEFAULT as DEFAULT_PLATFORM
from imagesmith.model.platform import Platform
from imagesmith.model.versions import major, version_key

DATA_FILE = "compat.yaml"


@dataclass(frozen=True)
class Wheel:
    """One pinned wheel: its distribution name, exact version and file size."""

    name: str
    version: str
    bytes: int

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class Variant:
    """One wheel variant of a torch release: ``cpu`` or ``cuXYZ``."""

    name: str
    index: str
    cuda: str | None = None
    cudnn: str | None = None
    nccl: str | None = None
    arch: tuple[str, ...] = ()
    wheels: tuple[Wheel, ...] = ()  # the Python-independent CUDA wheels torch requires (the shared CUDA layer)

@dataclass(frozen=True)
class TorchRelease:
    version: str
    python: tuple[str, ...]
    variants: Mapping[str, Variant]
    torchvision: str | None = None
    torchaudio: str | None = None
    pypi_variant: str | None = None
    released: str | None = None

    @property
    def line(self) -> str:
        return ".".join(self.version.split(".")[:2])

    def cuda_versions(self) -> list[str]:
        found = {v.cuda for v in self.variants.values() if v.cuda}
        return sorted(found, key=version_key)

    def variant_for(self, cuda: str) -> Variant | None:
        """The variant for ``cuda`` ("12.8" or "cpu"), or None."""
        if cuda == "cpu":
            return self.variants.get("cpu")
        return next((v for v in self.variants.values() if v.cuda == cuda), None)


@dataclass(frozen=True)
class CudaUpdate:
    """One toolkit release (``12.8.1`` = 12.8 Update 1): its CUDA runtime
    component version and the Linux driver it ships with (release notes Table 3)."""

    release: str
    cudart: str
    driver: str

    def to_json(self) -> dict[str, str]:
        return {"release": self.release, "cudart": self.cudart, "driver": self.driver}


@dataclass(frozen=True)
class CudaInfo:
    version: str
    latest: str
    min_driver: str
    updates: tuple[CudaUpdate, ...] = ()
    cudnn_tag: str | None = None
    image_os: tuple[str, ...] = ()
    driver_of_latest: str | None = None  # a replacement file may give it without updates

    @property
    def toolkit_driver(self) -> str:
        """The driver of the ``latest`` release (what doctor and ``compat`` show for the minor)."""
        found = next((u.driver for u in self.updates if u.release == self.latest), None)
        return found or self.driver_of_latest or (self.updates[-1].driver if self.updates else "")


@dataclass(frozen=True)
class OSInfo:
    key: str
    family: str
    version: str
    codename: str
    python: str
    image: str
    glibc: str  # the distro's glibc (major.minor): the newest manylinux tag its wheels may carry
    eol: str | None = None


# What the knowledge base knows of a variant's wheel set on a platform other than linux/amd64 (whose facts are
# the torch table itself): "resolves": torch and every pin it requires resolved for that machine from the index
# it was checked against; "listed": torch's wheels are published (an index listing) but the set was not resolved
# here; "incomplete": torch's wheels are published but a pin they require is not on the index they were checked
# against, so a build from it fails: validation refuses such cells (a site whose index has the pin says so in
# its own knowledge base, IMAGESMITH_COMPAT).
WHEEL_STATUS = ("resolves", "listed", "incomplete")


@dataclass(frozen=True)
class PlatformWheels:
    """A torch variant's wheels for one platform: their newest manylinux tag and how far they were checked."""

    platform: Platform
    manylinux: str | None = None  # e.g. manylinux_2_28_aarch64; None: not recorded (linux/amd64: every OS here runs them)
    status: str = "resolves"
    note: str = ""
    pypi: str = ""  # "cpu": PyPI's wheel of these releases for this platform is the CPU build, whatever the variant

    @property
    def available(self) -> bool:
        """Whether a cell may be built from these wheels (an incomplete set is not)."""
        return self.status != "incomplete"

    @property
    def glibc(self) -> str | None:
        """The glibc the manylinux tag needs: ``manylinux_2_28_aarch64`` -> ``2.28``, ``manylinux2014_*`` -> ``2.17``."""
        return manylinux_glibc(self.manylinux) if self.manylinux else None

    def runs_on(self, glibc: str) -> bool:
        """Whether an OS with this glibc (``2.36``) runs these wheels (a set with no recorded tag runs on every OS here)."""
        return self.glibc is None or version_key(glibc) >= version_key(self.glibc)


LEGACY_MANYLINUX = {"manylinux2014": "2.17", "manylinux2010": "2.12", "manylinux1": "2.5"}  # PEP 600's aliases


def manylinux_glibc(tag: str) -> str | None:
    """The glibc (``2.N``) a manylinux platform tag needs; None for a tag that is not manylinux."""
    parts = tag.split("_")
    if len(parts) >= 3 and parts[0] == "manylinux" and parts[1].isdigit() and parts[2].isdigit():
        return f"{parts[1]}.{parts[2]}"
    return LEGACY_MANYLINUX.get(parts[0])


@dataclass(frozen=True)
class PlatformRow:
    """One row of a platform's wheel table: the torch releases (PEP 440 range) and variant it covers."""

    torch: str
    variant: str
    wheels: PlatformWheels

    def holds(self, torch: str, variant: str) -> bool:
        return variant == self.variant and SpecifierSet(self.torch).contains(Version(torch).base_version)


@dataclass(frozen=True)
class NumpyRow:
    """The numpy a base layer pins, per Python, for the torch releases in ``torch`` (a PEP 440 range)."""

    torch: str
    python: Mapping[str, str]

    def holds(self, torch: str) -> bool:
        """``torch`` ("2.13.0+cpu" counts as 2.13.0) is in this row's range."""
        return SpecifierSet(self.torch).contains(Version(torch).base_version)


@dataclass(frozen=True)
class KnowledgeBase:
    torch: Mapping[str, TorchRelease]
    cuda: Mapping[str, CudaInfo]
    os: Mapping[str, OSInfo]
    gpus: Mapping[str, str]
    numpy: tuple[NumpyRow, ...] = ()
    platform_rows: tuple[PlatformRow, ...] = ()  # platforms other than linux/amd64, rows tried in order

    def numpy_for(self, torch: str, python: str) -> str | None:
        """The numpy pin of a cell (``torch`` "2.14.1", ``python`` "3.11"): the first row whose range
        holds ``torch``; None where the knowledge base has none (a replacement file without the table)."""
        row = next((r for r in self.numpy if r.holds(torch)), None)
        return row.python.get(python) if row else None

    # -- platforms -----------------------------------------------------
    def wheels_for(self, release: TorchRelease, variant: str, platform: Platform) -> PlatformWheels | None:
        """The wheels of ``release``'s ``variant`` ("cu128", "cpu") for ``platform``, or None where none are
        recorded. The torch table is linux/amd64's: every variant in it has linux/amd64 wheels."""
        if variant not in release.variants:
            return None
        if platform is DEFAULT_PLATFORM:
            return PlatformWheels(platform)
        row = next((r for r in self.platform_rows
                    if r.wheels.platform is platform and r.holds(release.version, variant)), None)
        return row.wheels if row else None

    def platforms_of(self, release: TorchRelease, variant: str) -> tuple[Platform, ...]:
        """The platforms ``release``'s ``variant`` can be built for (recorded, and not incomplete)."""
        found = (self.wheels_for(release, variant, p) for p in Platform)
        return tuple(w.platform for w in found if w is not None and w.available)

    def nearest(self, release: TorchRelease, variant: str, platform: Platform, python: str, glibc: str,
                limit: int = 3) -> list[tuple[str, str]]:
        """Up to ``limit`` (torch line, variant) whose newest patch has ``platform`` wheels for ``python`` that run on
        ``glibc``, nearest first: the same line with another CUDA, then the nearest lines with the same CUDA major,
        then the nearest lines with any CUDA (newer before older at the same distance). CPU cells get CPU wheels."""
        lines = self.torch_lines()
        here, cuda = lines.index(release.line), release.variants[variant].cuda
        ranked = []
        for i, line in enumerate(lines):
            other = self.resolve_torch(line)
            if other is None or python not in other.python:
                continue
            for v in other.variants.values():
                wheels = self.wheels_for(other, v.name, platform)
                if (v.cuda is None) != (cuda is None) or (other.version, v.name) == (release.version, variant) \
                        or wheels is None or not wheels.available or not wheels.runs_on(glibc):
                    continue
                group = 0 if i == here else 1 if v.cuda and cuda and major(v.cuda) == major(cuda) else 2
                ranked.append(((group, abs(i - here), -i, _cuda_distance(v.cuda, cuda)), (line, v.name)))
        return [found for _, found in sorted(ranked)[:limit]]

    # -- torch ---------------------------------------------------------
    def torch_versions(self) -> list[str]:
        return sorted(self.torch, key=version_key)

    def torch_lines(self) -> list[str]:
        return sorted({r.line for r in self.torch.values()}, key=version_key)

    def resolve_torch(self, spec: str) -> TorchRelease | None:
        """``"2.9.1"`` exactly, or ``"2.9"`` as the newest patch of that line."""
        if spec in self.torch:
            return self.torch[spec]
        line = [v for v in self.torch_versions() if self.torch[v].line == spec]
        return self.torch[line[-1]] if line else None

    # -- cuda / driver -------------------------------------------------
    def driver_status(self, cuda: str, driver: str) -> str:
        """``pass`` (>= the toolkit's driver), ``compat`` (minor-version
        compatibility), ``too-old``, or ``unknown`` for an unknown CUDA."""
        info = self.cuda.get(cuda)
        if info is None:
            return "unknown"
        if version_key(driver) >= version_key(info.toolkit_driver):
            return "pass"
        if version_key(driver) >= version_key(info.min_driver):
            return "compat"
        return "too-old"

    def cuda_releases(self) -> list[dict[str, str]]:
        """Every toolkit release with its cudart, driver and minor-compat minimum (for the payload)."""
        return [u.to_json() | {"min_driver": info.min_driver} for info in self.cuda.values() for u in info.updates]

    def gpu_capability(self, name: str) -> str | None:
        return self.gpus.get(name)


def _cuda_distance(a: str | None, b: str | None) -> int:
    """How far apart two CUDA versions are, in minor releases of one major (0 for two CPU variants)."""
    if a is None or b is None:
        return 0
    (a1, a2), (b1, b2) = ((*version_key(v), 0)[:2] for v in (a, b))
    return abs((a1 * 100 + a2) - (b1 * 100 + b2))


def _variant(name: str, raw: Mapping[str, Any]) -> Variant:
    return Variant(
        name=name,
        index=str(raw["index"]),
        cuda=raw.get("cuda"),
        cudnn=raw.get("cudnn"),
        nccl=raw.get("nccl"),
        arch=tuple(raw.get("arch", ())),
        wheels=tuple(Wheel(str(n), str(v), int(b)) for n, v, b in raw.get("wheels", ())),
    )


def _release(version: str, raw: Mapping[str, Any]) -> TorchRelease:
    variants = {n: _variant(n, v) for n, v in raw.get("variants", {}).items()}
    return TorchRelease(
        version=version,
        python=tuple(raw.get("python", ())),
        variants=variants,
        torchvision=raw.get("torchvision"),
        torchaudio=raw.get("torchaudio"),
        pypi_variant=raw.get("pypi_variant"),
        released=raw.get("released"),
    )


def _cuda(version: str, raw: Mapping[str, Any]) -> CudaInfo:
    updates = tuple(CudaUpdate(str(u["release"]), str(u["cudart"]), str(u["driver"])) for u in raw.get("updates", ()))
    return CudaInfo(
        version=version,
        latest=str(raw.get("latest", version)),
        min_driver=str(raw["min_driver"]),
        updates=updates,
        driver_of_latest=raw.get("toolkit_driver"),
        cudnn_tag=raw.get("cudnn_tag"),
        image_os=tuple(raw.get("image_os", ())),
    )


def _os(key: str, raw: Mapping[str, Any]) -> OSInfo:
    fields = {k: str(raw[k]) for k in ("family", "version", "codename", "python", "image", "glibc")}
    return OSInfo(key=key, eol=raw.get("eol"), **fields)


def _platform_rows(raw: Mapping[str, Any]) -> tuple[PlatformRow, ...]:
    rows = []
    for name, table in raw.items():
        platform = Platform(name)
        for r in table.get("wheels", ()):
            status = str(r.get("status", "resolves"))
            if status not in WHEEL_STATUS:
                raise ValueError(f"platforms.{name}: status {status!r} is not one of {', '.join(WHEEL_STATUS)}")
            wheels = PlatformWheels(platform, r.get("manylinux"), status, " ".join(str(r.get("note", "")).split()),
                                    str(r.get("pypi", "")))
            rows.append(PlatformRow(str(r["torch"]), str(r["variant"]), wheels))
    return tuple(rows)


def parse(raw: Mapping[str, Any]) -> KnowledgeBase:
    return KnowledgeBase(
        torch={v: _release(v, r) for v, r in raw["torch"].items()},
        cuda={v: _cuda(v, r) for v, r in raw["cuda"].items()},
        os={k: _os(k, r) for k, r in raw["os"].items()},
        gpus=dict(raw.get("gpus", {})),
        numpy=tuple(NumpyRow(str(r["torch"]), {str(p): str(v) for p, v in r["python"].items()}) for r in raw.get("numpy", ())),
        platform_rows=_platform_rows(raw.get("platforms", {})),
    )


@functools.lru_cache(maxsize=1)
def load() -> KnowledgeBase:
    """The packaged knowledge base (read once). ``IMAGESMITH_COMPAT`` names a
    replacement file, for sites with their own builds of torch."""
    override = os.environ.get("IMAGESMITH_COMPAT")
    if override:  # the operator's file: through the one loader (regular file, bounded, UTF-8)
        from imagesmith.model import loader as files

        text = files.strict_text(files.read_regular(Path(override), cap=16 << 20, what="IMAGESMITH_COMPAT"), override)
    else:
        text = resources.files(__package__).joinpath("data").joinpath(DATA_FILE).read_text()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when PyYAML has it: 10x faster
    return parse(yaml.load(text, Loader=loader))
