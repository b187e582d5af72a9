"""The build cache's keys (pure): the context hash a cached image is found by (every file of its build context, its
build arguments, its parent's image and its platform), the cache index's repository, and the tags that say which
checkout owns an entry (an entry no owner uses any more is pruned)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Mapping

HASH_SCHEMA = "imagesmith.context/1"


LABEL_HASH = "io.imagesmith.context-hash"


# The cache index: one tag per context hash. (A label cannot serve: the classic
# builder copies build labels onto intermediate images, and children inherit them.)
CACHE_REPOSITORY = "imagesmith-cache"


# A builder stage made ahead (shared-CUDA bases), until the full build: imagesmith-prebuild/<owner>:<context hash>.
PREBUILD_REPOSITORY = "imagesmith-prebuild"


# Who uses a cache entry: one tag per (checkout, target), imagesmith-cache/<owner>:<target>,
# where the owner is the matrix file and output folder of a checkout. An entry
# a run stops using is pruned only when no other owner's tag points at it.
OWNER_REPOSITORY = CACHE_REPOSITORY + "/"


def context_hash(files: Mapping[str, bytes], buildargs: Mapping[str, str], parent_id: str, platform: str = "") -> str:
    """What decides an image's content: the context, the logical build
    arguments (not loopback ports), the exact parent image and, for any
    platform but linux/amd64 (whose hashes stay as they were), the platform."""
    h = hashlib.sha256(HASH_SCHEMA.encode())
    if platform:
        h.update(f"\0platform\0{platform}".encode())
    for name, data in sorted(files.items()):
        h.update(f"\0file\0{name}\0{len(data)}\0".encode())
        h.update(data)
    for key, value in sorted(buildargs.items()):
        h.update(f"\0arg\0{key}={value}".encode())
    h.update(f"\0parent\0{parent_id}".encode())
    return "sha256:" + h.hexdigest()


def owner_id(matrix_file: Path, out: Path) -> str:
    """A checkout's identity for cache ownership: its matrix file and output folder."""
    where = f"{Path(matrix_file).resolve()}\0{Path(out).resolve()}"
    return hashlib.sha256(where.encode()).hexdigest()[:16]


def owner_tag(target_id: str) -> str:
    """The tag of a target under its owner's repository (target ids are tags; others are hashed)."""
    if re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", target_id):
        return target_id
    return "t-" + hashlib.sha256(target_id.encode()).hexdigest()[:40]
