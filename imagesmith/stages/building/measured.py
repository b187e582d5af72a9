"""What a built image, and the base it starts from, are held against (pure): the plan's versions against what was
measured inside, a base of another platform, and where an image that failed under emulation can be measured."""

from __future__ import annotations

from typing import Any, Mapping

from imagesmith.edges.protocols import ImageInfo
from imagesmith.model.plan import Target
from imagesmith.model.platform import emulated, foreign
from imagesmith.model.versions import matches

QEMU_MIDR = "MIDR_EL1"  # oneDNN's xbyak_aarch64 reads it from sysfs at torch's import; QEMU on an amd64 host has none


def emulation_hint(error: str, image_platform: str, engine_platform: str) -> str:
    """What to add to a measurement of an ``image_platform`` image that failed on an ``engine_platform`` engine: where
    it runs under QEMU, the native runner that can measure it (and why torch cannot start, when that is the cause)."""
    if not emulated(image_platform, engine_platform):
        return ""
    arch = image_platform.rpartition("/")[2]
    why = (f"; torch cannot start under QEMU on this {engine_platform} host (oneDNN's xbyak_aarch64 reads {QEMU_MIDR} from "
           "sysfs, which only an arm64 kernel has)") if QEMU_MIDR in error else ""
    return (f" [the {image_platform} image ran under emulation{why}: build or measure it on a native {arch} runner "
            f"(docs/matrix.md, Native and emulated builds)]")


def base_mismatch(t: Target, info: ImageInfo, from_os: bool = True) -> str | None:
    """Why the base image ``info`` (``t.base_image`` as the engine holds it) cannot carry ``t``, a root target: its
    config names another OS, architecture or variant than ``t``'s platform. None when it is one of ``t``'s platform,
    or says no architecture (the build's own check then judges the image it made). ``from_os``: the base is the
    plain OS image ``base_images`` names (else an nvidia/cuda image, which the engine pulled for its own platform)."""
    found = foreign(t.platform, info.os, info.architecture, info.variant)
    if found is None:
        return None
    p, os_key = t.platform, t.versions.os
    fix = (f"name a {p} image for it (base_images.{os_key}.{p}; imagesmith base bootstrap --os {os_key} --arch {p.arch} "
           f"makes one), or build this cell on a native {p.arch} runner" if from_os else
           f"build this cell on a native {p.arch} runner (an engine holds one platform's image under a tag)")
    return (f"base {t.base_image} named for {p} is {found}: the engine's copy ({info.id[:19]}) says os {info.os or 'linux'}, "
            f"architecture {info.architecture}{f', variant {info.variant}' if info.variant else ''}, so cell {t.cell} was "
            f"not built; fix: {fix}")


def compare_facts(t: Target, facts: Mapping[str, Any], declared: list[str]) -> list[str]:
    """Where the measured image differs from the plan (empty: it matches)."""
    v = t.versions
    if "torch_error" in facts:
        return [f"torch does not import: {facts['torch_error']}"]
    want = {"torch": v.torch, "python": v.python, "os": v.os,
            "cuda": None if v.cuda == "cpu" else v.cuda, "cudnn": v.cudnn, "nccl": v.nccl}
    out = [_differs(k, w, facts.get(k)) for k, w in want.items()]
    pkgs = facts.get("packages", {})
    for spec in declared:
        name, _, version = spec.partition("==")
        out.append(_differs(f"package {name}", version, pkgs.get(name.lower().replace("_", "-"))))
    return [o for o in out if o]


def _differs(what: str, want: str | None, have: Any) -> str:
    if want is None:
        return "" if not have else f"{what}: plan says none, image has {have}"
    if have is None or not matches(".".join(want.split(".")[:3]), str(have)):
        return f"{what}: plan says {want}, image has {have or 'none'}"
    return ""
