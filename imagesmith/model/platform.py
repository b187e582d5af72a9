"""The platforms an image is built for (pure): one typed value, parsed once.

A platform is written as Docker and OCI write it (``os/arch``, the ``platform``
of an image index); imagesmith builds ``linux/amd64`` and ``linux/arm64``,
the two for which torch publishes Linux wheels. Everything else (the wheel
tag's machine, the marker in target names) is derived from it here.
"""

from __future__ import annotations

from enum import Enum

from imagesmith.model.located import printable

# what uname -m (and a wheel's platform tag) calls each Docker architecture
UNAME = {"amd64": "x86_64", "arm64": "aarch64"}


class Platform(str, Enum):
    """``linux/amd64`` or ``linux/arm64``; ``str(p)`` is the Docker spelling."""

    AMD64 = "linux/amd64"
    ARM64 = "linux/arm64"

    def __str__(self) -> str:  # the value, on every Python (3.12 changed format() of str enums)
        return self.value

    @property
    def os(self) -> str:
        return self.value.split("/")[0]

    @property
    def arch(self) -> str:
        """Docker's architecture: ``amd64``, ``arm64``."""
        return self.value.split("/")[1]

    @property
    def uname(self) -> str:
        """The machine as ``uname -m`` and wheel tags write it: ``x86_64``, ``aarch64``."""
        return UNAME[self.arch]

    @property
    def docker(self) -> str:
        """``--platform`` for docker build/pull and the index entry: ``linux/arm64``."""
        return self.value

    @property
    def marker(self) -> str:
        """What target names and cache keys add for this platform: nothing for linux/amd64 (names stay as they
        were before platforms), the architecture otherwise (``2.9.1-cu128-py3.12-debian12-arm64-base``)."""
        return "" if self is DEFAULT else self.arch

    @property
    def cache_parts(self) -> tuple[str, ...]:
        """What a cache key adds for this platform: nothing for linux/amd64 (its keys stay as they were), the
        platform otherwise, so images of two machines never share a cache entry (moby/moby#47823)."""
        return () if self is DEFAULT else (self.value,)

    def wheel_tag(self, glibc: str) -> str:
        """The manylinux tag of this machine for glibc ``2.N``: ``manylinux_2_28_aarch64``."""
        return f"manylinux_{glibc.replace('.', '_')}_{self.uname}"


# the variants an image of each architecture may declare and still run on that platform ("": none declared)
VARIANTS = {"amd64": ("", "v1", "v2", "v3", "v4"), "arm64": ("", "v8")}


def foreign(platform: Platform, os: str, arch: str, variant: str = "") -> str | None:
    """``None`` if an image whose config says ``os``/``arch``/``variant`` is one of ``platform`` (or does not say
    its architecture); else the image's own platform as OCI writes it (``linux/amd64``)."""
    if not arch:
        return None
    if (os or "linux") == platform.os and arch == platform.arch and variant in VARIANTS.get(arch, ("",)):
        return None
    return "/".join(filter(None, (os or "linux", arch, variant)))


DEFAULT = Platform.AMD64  # a matrix without matrix.platform, and every artifact written before platforms
NAMES = tuple(p.value for p in Platform)
# other spellings of the two architectures (uname -m, the arm64 variant): named in the error, never accepted
ALIASES = {"amd64": "amd64", "x86_64": "amd64", "x86-64": "amd64", "arm64": "arm64", "aarch64": "arm64", "arm64/v8": "arm64"}


def platform_tag(tag: str, platform: str) -> str:
    """The tag one platform's image of an image index is pushed under: ``<tag>-arm64`` (jupyter/docker-stacks' way)."""
    return f"{tag}-{platform.rpartition('/')[2]}"


def emulated(image: str, host: str) -> bool:
    """Whether an image of platform ``image`` (``linux/arm64``) runs under emulation on an engine of platform ``host``;
    not when either side is unknown (no ``os/arch``)."""
    return "/" in image and bool(host.partition("/")[2]) and image != host


def problem(value: str) -> str | None:
    """``None`` if ``value`` is a platform imagesmith builds, else why not and what to write."""
    if value in NAMES:
        return None
    allowed = f"platforms: {', '.join(NAMES)}"
    text = value.strip().lower()
    os_name, _, arch = text.partition("/") if text.startswith("linux/") else ("", "", text)
    known = ALIASES.get(arch)
    if known and not os_name:
        return f"{printable(value)} names no OS; write linux/{known} ({allowed})"
    if known:
        return f"{printable(value)} is written linux/{known}, as Docker writes it ({allowed})"
    return f"{printable(value)} is not a platform imagesmith builds; {allowed}"


def parse(value: str) -> Platform:
    """``value`` as a Platform (ValueError with :func:`problem`'s sentence otherwise)."""
    why = problem(value)
    if why:
        raise ValueError(why)
    return Platform(value)
