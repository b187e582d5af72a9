"""Version strings as the PyTorch/CUDA world writes them (pure helpers)."""

from __future__ import annotations

import re

_NUM = re.compile(r"\d+")


def version_key(version: str) -> tuple[int, ...]:
    """Sort key for dotted versions: ``"12.10" > "12.9"``, ``"2.9.1+cu128"``
    sorts by its public part."""
    public = version.split("+", 1)[0]
    return tuple(int(n) for n in _NUM.findall(public))


def matches(expected: str, actual: str) -> bool:
    """True when ``actual`` starts with every dotted component of ``expected``
    (``"9"`` matches ``"9.10.2"``, ``"2.9.1"`` matches ``"2.9.1+cu128"``)."""
    want = expected.split("+", 1)[0].split(".")
    have = actual.split("+", 1)[0].split(".")
    return have[: len(want)] == want


def minor(version: str) -> str:
    """``"2.9.1"`` -> ``"2.9"``."""
    return ".".join(version.split(".")[:2])


def major(version: str) -> str:
    return version.split(".", 1)[0]


def cuda_variant(cuda: str) -> str:
    """``"12.8"`` -> ``"cu128"``; ``"cpu"`` -> ``"cpu"``."""
    return "cpu" if cuda == "cpu" else "cu" + cuda.replace(".", "")
