"""A host library's ELF SONAME, read with pyelftools: what ``ldconfig`` names the link to a library
(libcuda.so.580.159.04 has the SONAME libcuda.so.1, the name torch dlopens). verify reads it for the libraries a
CDI spec mounts into an ``update-ldcache`` folder (:func:`imagesmith.model.cdi.translate`).

Only the ELF headers and the dynamic segment are read, from a regular file opened without blocking (a FIFO or a
device is no library); a file that is not an ELF shared object, or is malformed, has no SONAME (None).
"""

from __future__ import annotations

import os
import stat

from elftools.elf.dynamic import DynamicSegment
from elftools.elf.elffile import ELFFile


def soname(path: str) -> str | None:
    """The DT_SONAME of the ELF file at ``path`` (links followed), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode) or fh.read(4) != b"\x7fELF":
            return None
        fh.seek(0)
        try:
            return _dynamic_soname(ELFFile(fh))
        except Exception:  # noqa: BLE001 - pyelftools raises many kinds on a malformed file: it has no SONAME
            return None


def _dynamic_soname(elf: ELFFile) -> str | None:
    """DT_SONAME from the PT_DYNAMIC segment (what the dynamic loader reads; a stripped library keeps it)."""
    for segment in elf.iter_segments():
        if not isinstance(segment, DynamicSegment):
            continue
        for tag in segment.iter_tags():
            if tag.entry.d_tag == "DT_SONAME":
                return str(vars(tag)["soname"])  # set from DT_SONAME by pyelftools, which does not declare it
    return None
