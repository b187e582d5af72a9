"""The platform value (imagesmith.model.platform): its grammar, and what it derives."""

from __future__ import annotations

import json

import pytest

from imagesmith.model import platform
from imagesmith.model.platform import Platform

ALLOWED = "platforms: linux/amd64, linux/arm64"

# (value, exact problem or None)
GRAMMAR = [
    ("linux/amd64", None),
    ("linux/arm64", None),
    ("arm64", f"'arm64' names no OS; write linux/arm64 ({ALLOWED})"),
    ("amd64", f"'amd64' names no OS; write linux/amd64 ({ALLOWED})"),
    ("aarch64", f"'aarch64' names no OS; write linux/arm64 ({ALLOWED})"),
    ("x86_64", f"'x86_64' names no OS; write linux/amd64 ({ALLOWED})"),
    ("linux/aarch64", f"'linux/aarch64' is written linux/arm64, as Docker writes it ({ALLOWED})"),
    ("linux/x86_64", f"'linux/x86_64' is written linux/amd64, as Docker writes it ({ALLOWED})"),
    ("linux/arm64/v8", f"'linux/arm64/v8' is written linux/arm64, as Docker writes it ({ALLOWED})"),
    ("Linux/ARM64", f"'Linux/ARM64' is written linux/arm64, as Docker writes it ({ALLOWED})"),
    ("linux/arm/v7", f"'linux/arm/v7' is not a platform imagesmith builds; {ALLOWED}"),
    ("linux/ppc64le", f"'linux/ppc64le' is not a platform imagesmith builds; {ALLOWED}"),
    ("windows/amd64", f"'windows/amd64' is not a platform imagesmith builds; {ALLOWED}"),
    ("linux", f"'linux' is not a platform imagesmith builds; {ALLOWED}"),
    ("", f"'' is not a platform imagesmith builds; {ALLOWED}"),
]


@pytest.mark.parametrize("value, expected", GRAMMAR, ids=[v or "empty" for v, _ in GRAMMAR])
def test_platform_grammar(value: str, expected: str | None) -> None:
    assert platform.problem(value) == expected
    if expected is None:
        assert platform.parse(value).value == value
    else:
        with pytest.raises(ValueError) as info:
            platform.parse(value)
        assert str(info.value) == expected


DERIVED = [
    (Platform.AMD64, "linux", "amd64", "x86_64", "linux/amd64", "", (), "manylinux_2_28_x86_64"),
    (Platform.ARM64, "linux", "arm64", "aarch64", "linux/arm64", "arm64", ("linux/arm64",), "manylinux_2_28_aarch64"),
]


@pytest.mark.parametrize("p, os_, arch, uname, docker, marker, cache, wheel", DERIVED, ids=["amd64", "arm64"])
def test_what_a_platform_derives(p: Platform, os_: str, arch: str, uname: str, docker: str, marker: str,
                                 cache: tuple[str, ...], wheel: str) -> None:
    assert (p.os, p.arch, p.uname, p.docker, p.marker, p.cache_parts, p.wheel_tag("2.28")) == \
        (os_, arch, uname, docker, marker, cache, wheel)
    assert str(p) == f"{p}" == docker and json.dumps(p) == f'"{docker}"'


def test_the_default_is_linux_amd64_and_there_are_two() -> None:
    assert platform.DEFAULT is Platform.AMD64
    assert platform.NAMES == ("linux/amd64", "linux/arm64")
