"""matrix.platform: the grammar, include/exclude with platform, and validation against the wheels each platform has."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Callable

import pytest
import yaml

from imagesmith.errors import ValidationError
from imagesmith.model import compat, matrix
from imagesmith.model.matrix.records import sort_cells
from imagesmith.model.platform import Platform

AMD64, ARM64 = Platform.AMD64, Platform.ARM64
ALLOWED = "platforms: linux/amd64, linux/arm64"
BASE = """\
version: 1
matrix:
  torch: ["2.9"]
  cuda: ["12.8"]
  python: ["3.12"]
  os: [debian12]
"""


def messages(path: Path, kb: compat.KnowledgeBase | None = None) -> list[str]:
    with pytest.raises(ValidationError) as info:
        matrix.load(path, kb)
    return [str(p) for p in info.value.problems]


def cells(m: matrix.Matrix) -> list[tuple[str, str, str, str]]:
    return [(c.torch, c.cuda, c.os, str(c.platform)) for c in m.cells]


# -- the axis ----------------------------------------------------------------------------------------------

def test_no_platform_key_means_linux_amd64_alone(write_matrix: Callable[..., Path]) -> None:
    m = matrix.load(write_matrix(BASE))
    assert [c.platform for c in m.cells] == [AMD64] and m.warnings == ()
    assert m.cells[0].label() == "torch=2.9 cuda=12.8 python=3.12 os=debian12"  # as before platforms


@pytest.mark.parametrize("value, platforms", [
    ("[linux/amd64, linux/arm64]", [AMD64, ARM64]),
    ("[linux/arm64, linux/amd64]", [ARM64, AMD64]),
    ("linux/arm64", [ARM64]),          # one string is a list of one
    ("[linux/amd64]", [AMD64]),
])
def test_platform_is_a_list_or_one_string(write_matrix: Callable[..., Path], value: str, platforms: list[Platform]) -> None:
    m = matrix.load(write_matrix(BASE + f"  platform: {value}\n"))
    assert [c.platform for c in m.cells] == platforms


BAD = [
    ("linux/arm/v7", f"matrix.yaml:7 matrix.platform: 'linux/arm/v7' is not a platform imagesmith builds; {ALLOWED}"),
    ("arm64", f"matrix.yaml:7 matrix.platform: 'arm64' names no OS; write linux/arm64 ({ALLOWED})"),
    ("[linux/amd64, aarch64]", f"matrix.yaml:7 matrix.platform[1]: 'aarch64' names no OS; write linux/arm64 ({ALLOWED})"),
    ("[linux/aarch64]", f"matrix.yaml:7 matrix.platform[0]: 'linux/aarch64' is written linux/arm64, as Docker writes it ({ALLOWED})"),
    ("[windows/amd64]", f"matrix.yaml:7 matrix.platform[0]: 'windows/amd64' is not a platform imagesmith builds; {ALLOWED}"),
    ("[]", "matrix.yaml:7 matrix.platform: give at least one platform (linux/amd64, linux/arm64), or leave platform out to build linux/amd64"),
    ("{os: linux}", "matrix.yaml:7 matrix.platform: expected a list, got a mapping"),
]


@pytest.mark.parametrize("value, expected", BAD, ids=[v for v, _ in BAD])
def test_a_platform_outside_the_grammar_is_a_located_error(write_matrix: Callable[..., Path], value: str, expected: str) -> None:
    assert messages(write_matrix(BASE + f"  platform: {value}\n"))[0] == expected


def test_a_platform_listed_twice_is_built_once_with_a_warning(write_matrix: Callable[..., Path]) -> None:
    m = matrix.load(write_matrix(BASE + "  platform: [linux/arm64, linux/arm64]\n"))
    assert [c.platform for c in m.cells] == [ARM64]
    assert [str(w) for w in m.warnings] == ["matrix.yaml:7 matrix.platform[1]: warning: linux/arm64 is listed twice; it is built once"]


# -- include / exclude ---------------------------------------------------------------------------------------

TWO = BASE.replace('torch: ["2.9"]', 'torch: ["2.9", "2.10"]') + "  platform: [linux/amd64, linux/arm64]\n"


@pytest.mark.parametrize("extra, expected", [
    pytest.param("  exclude:\n    - {platform: linux/arm64, torch: '2.10'}\n",
                 [("2.9", "12.8", "debian12", "linux/amd64"), ("2.9", "12.8", "debian12", "linux/arm64"),
                  ("2.10", "12.8", "debian12", "linux/amd64")], id="exclude-one-platform-of-a-line"),
    pytest.param("  exclude:\n    - {platform: linux/amd64}\n",
                 [("2.9", "12.8", "debian12", "linux/arm64"), ("2.10", "12.8", "debian12", "linux/arm64")], id="exclude-a-platform"),
    pytest.param("  include:\n    - {torch: '2.13', cuda: cpu, python: '3.12', os: debian12, platform: linux/arm64}\n",
                 [("2.9", "12.8", "debian12", "linux/amd64"), ("2.9", "12.8", "debian12", "linux/arm64"),
                  ("2.10", "12.8", "debian12", "linux/amd64"), ("2.10", "12.8", "debian12", "linux/arm64"),
                  ("2.13", "cpu", "debian12", "linux/arm64")], id="include-a-cell-for-one-platform"),
    pytest.param("  include:\n    - {torch: '2.13', cuda: cpu, python: '3.12', os: debian12}\n",
                 [("2.9", "12.8", "debian12", "linux/amd64"), ("2.9", "12.8", "debian12", "linux/arm64"),
                  ("2.10", "12.8", "debian12", "linux/amd64"), ("2.10", "12.8", "debian12", "linux/arm64"),
                  ("2.13", "cpu", "debian12", "linux/amd64"), ("2.13", "cpu", "debian12", "linux/arm64")],
                 id="include-a-cell-for-every-platform-of-the-matrix"),
])
def test_include_and_exclude_name_platform_like_the_other_axes(write_matrix: Callable[..., Path], extra: str,
                                                                expected: list[tuple[str, str, str, str]]) -> None:
    assert cells(matrix.load(write_matrix(TWO + extra))) == expected


def test_an_include_naming_a_platform_adds_its_keys_to_that_platform_s_cells_only(write_matrix: Callable[..., Path]) -> None:
    m = matrix.load(write_matrix(TWO + "  include:\n    - {torch: '2.9', platform: linux/arm64, cudnn: '9'}\n"))
    assert [(c.torch, str(c.platform), c.cudnn) for c in m.cells] == [
        ("2.9", "linux/amd64", None), ("2.9", "linux/arm64", "9"), ("2.10", "linux/amd64", None), ("2.10", "linux/arm64", None)]


def test_a_bad_platform_in_include_or_exclude_is_a_located_error(write_matrix: Callable[..., Path]) -> None:
    path = write_matrix(TWO + "  exclude:\n    - {platform: arm64}\n  include:\n    - {torch: '2.9', platform: linux/arm/v7}\n")
    assert messages(path) == [
        f"matrix.yaml:9 matrix.exclude[0].platform: 'arm64' names no OS; write linux/arm64 ({ALLOWED})",
        f"matrix.yaml:11 matrix.include[0].platform: 'linux/arm/v7' is not a platform imagesmith builds; {ALLOWED}",
    ]


def test_a_layer_can_be_limited_to_a_platform(write_matrix: Callable[..., Path]) -> None:
    m = matrix.load(write_matrix(TWO + "layers:\n  base: {}\n  cv: {when: {platform: linux/arm64}}\n"))
    assert [str(c.platform) for c in m.cells if m.layer("cv").applies_to(c)] == ["linux/arm64", "linux/arm64"]
    bad = write_matrix(TWO + "layers:\n  base: {}\n  cv: {when: {platform: [arm64]}}\n")
    assert messages(bad) == [f"matrix.yaml:10 layers.cv.when.platform[0]: 'arm64' names no OS; write linux/arm64 ({ALLOWED})"]


# -- validation against the wheels each platform has -------------------------------------------------------------

REJECT = [
    pytest.param(BASE.replace('"2.9"', '"2.8"') + "  platform: [linux/amd64, linux/arm64]\n",
                 ["matrix.yaml:7 matrix.platform[1]: torch 2.8 cu128 has no linux/arm64 wheels here (triton==3.4.0, which it requires, "
                  "has no aarch64 wheel on PyPI); nearest cells with linux/arm64 wheels: torch 2.9 cu128, torch 2.10 cu128, torch 2.11 cu130"],
                 id="incomplete-set"),
    pytest.param(BASE.replace('"2.9"', '"2.14"').replace('"12.8"', '"12.6"') + "  platform: linux/arm64\n",
                 ["matrix.yaml:7 matrix.platform: torch 2.14 cu126 has no linux/arm64 wheels here; "
                  "nearest cells with linux/arm64 wheels: torch 2.14 cu130, torch 2.10 cu128, torch 2.9 cu128"],
                 id="no-wheels-recorded"),
    pytest.param(BASE.replace('"2.9"', '"2.5"').replace('"12.8"', "cpu") + "  platform: linux/arm64\n",
                 ["matrix.yaml:7 matrix.platform: torch 2.5 cpu has no linux/arm64 wheels here; "
                  "nearest cells with linux/arm64 wheels: torch 2.6 cpu, torch 2.7 cpu, torch 2.8 cpu"],
                 id="cpu-cell-gets-cpu-suggestions"),
    pytest.param(BASE + "  platform: linux/amd64\n  include:\n    - {torch: '2.9', cuda: '13.0', python: '3.12', os: debian12, platform: linux/arm64}\n",
                 ["matrix.yaml:9 matrix.include[0].platform: torch 2.9 cu130 has no linux/arm64 wheels here; "
                  "nearest cells with linux/arm64 wheels: torch 2.9 cu128, torch 2.11 cu130, torch 2.12 cu130"],
                 id="include-located-at-its-platform"),
]


@pytest.mark.parametrize("text, expected", REJECT)
def test_a_cell_without_wheels_for_its_platform_names_the_nearest_valid_cells(write_matrix: Callable[..., Path],
                                                                             text: str, expected: list[str]) -> None:
    assert messages(write_matrix(text)) == expected


@pytest.mark.parametrize("torch, cuda", [("2.9", "12.8"), ("2.9.1", "12.8"), ("2.10", "12.8"), ("2.14", "13.0"), ("2.12.0", "13.0"), ("2.13", "cpu")])
def test_cells_with_wheels_for_both_platforms_are_accepted(write_matrix: Callable[..., Path], torch: str, cuda: str) -> None:
    text = BASE.replace('"2.9"', f'"{torch}"').replace('"12.8"', f'"{cuda}"') + "  platform: [linux/amd64, linux/arm64]\n"
    m = matrix.load(write_matrix(text))
    assert [c.platform for c in m.cells] == [AMD64, ARM64] and m.warnings == ()


def raw_kb() -> dict[str, object]:
    from importlib import resources

    return dict(yaml.safe_load(resources.files("imagesmith.model.compat").joinpath("data").joinpath("compat.yaml").read_text()))


def test_an_os_whose_glibc_is_older_than_the_wheels_manylinux_tag_is_rejected(write_matrix: Callable[..., Path]) -> None:
    raw = raw_kb()
    raw["platforms"] = {"linux/arm64": {"wheels": [{"torch": ">=2.9", "variant": "cu128", "manylinux": "manylinux_2_38_aarch64"}]}}
    kb = compat.parse(raw)
    text = BASE.replace("[debian12]", "[debian12, ubuntu24.04]") + "  platform: [linux/amd64, linux/arm64]\n"
    assert messages(write_matrix(text), kb) == [
        "matrix.yaml:6 matrix.os[0]: debian12 has glibc 2.36, but the linux/arm64 wheels of torch 2.9 cu128 are "
        "manylinux_2_38_aarch64 (glibc 2.38 or newer); use an OS with a newer glibc: ubuntu24.04, debian13",
    ]


def test_nearest_cells_skip_wheels_the_cell_s_os_cannot_run(write_matrix: Callable[..., Path]) -> None:
    raw = raw_kb()
    raw["platforms"] = {"linux/arm64": {"wheels": [
        {"torch": ">=2.11", "variant": "cu130", "manylinux": "manylinux_2_39_aarch64"},
        {"torch": "==2.10.0", "variant": "cu128", "manylinux": "manylinux_2_28_aarch64"}]}}
    text = BASE + "  platform: linux/arm64\n"
    assert messages(write_matrix(text), compat.parse(raw)) == [
        "matrix.yaml:7 matrix.platform: torch 2.9 cu128 has no linux/arm64 wheels here; nearest cells with linux/arm64 wheels: torch 2.10 cu128"]


def test_the_linux_amd64_facts_are_the_torch_table_alone(write_matrix: Callable[..., Path]) -> None:
    """A knowledge base without a platforms table (a site's replacement file) still validates linux/amd64 cells,
    and names no arm64 cell as valid."""
    raw = {k: v for k, v in raw_kb().items() if k != "platforms"}
    kb = compat.parse(raw)
    assert matrix.load(write_matrix(BASE), kb).cells[0].platform is AMD64
    assert messages(write_matrix(BASE + "  platform: linux/arm64\n"), kb) == [
        "matrix.yaml:7 matrix.platform: torch 2.9 cu128 has no linux/arm64 wheels here; "
        "no torch release of the knowledge base has linux/arm64 wheels for Python 3.12"]


def test_a_multi_platform_matrix_reads_its_cells_in_platform_order(write_matrix: Callable[..., Path]) -> None:
    path = write_matrix(textwrap.dedent("""\
        matrix:
          torch: ["2.10", "2.9"]
          cuda: ["12.8"]
          python: ["3.12"]
          os: [debian12]
          platform: [linux/arm64, linux/amd64]
        """))
    ordered = sort_cells(matrix.load(path).cells)
    assert [(c.torch, str(c.platform)) for c in ordered] == [
        ("2.9", "linux/amd64"), ("2.9", "linux/arm64"), ("2.10", "linux/amd64"), ("2.10", "linux/arm64")]


# -- a base per platform ---------------------------------------------------------------------------------

def test_a_local_base_is_named_per_platform(write_matrix: Callable[..., Path]) -> None:
    from imagesmith.model import plan

    m = matrix.load(write_matrix(BASE + "  platform: [linux/amd64, linux/arm64]\n"
                                 "base_images:\n  debian12:\n    linux/amd64: imagesmith/debian:bookworm-20261201\n"
                                 "    linux/arm64: imagesmith/debian:bookworm-arm64-20261201\n"))
    bases = {str(t.platform): t.base_image for t in plan.expand(m, "20261201").targets}
    assert bases == {"linux/amd64": "imagesmith/debian:bookworm-20261201",
                     "linux/arm64": "imagesmith/debian:bookworm-arm64-20261201"}


def test_one_base_for_every_platform_is_a_multi_platform_reference(write_matrix: Callable[..., Path]) -> None:
    from imagesmith.model import plan

    m = matrix.load(write_matrix(BASE + "  platform: [linux/amd64, linux/arm64]\n"
                                 "base_images: {debian12: 'debian:bookworm-20261124'}\n"))
    assert {t.base_image for t in plan.expand(m, "20261201").targets} == {"debian:bookworm-20261124"}


def test_a_base_for_an_unknown_platform_is_refused(write_matrix: Callable[..., Path]) -> None:
    found = messages(write_matrix(BASE + "base_images:\n  debian12:\n    linux/riscv64: x/y:1\n"))
    assert any("base_images.debian12.linux/riscv64: unknown key" in m for m in found), found


@pytest.mark.parametrize("torch, cuda, refused", [("2.9", "12.8", True), ("2.10", "12.8", True), ("2.14", "13.0", False),
                                                 ("2.13", "cpu", False)])
def test_a_cuda_cell_on_arm64_never_takes_torch_from_pypi_where_pypi_has_the_cpu_build(
        write_matrix: Callable[..., Path], torch: str, cuda: str, refused: bool) -> None:
    """PyPI's aarch64 torch 2.6-2.10 wheels are CPU builds (pytorch/pytorch#160162): a cu128 cell would build without CUDA."""
    text = (BASE.replace('"2.9"', f'"{torch}"').replace('"12.8"', f'"{cuda}"') + "  platform: [linux/amd64, linux/arm64]\n"
            + "sources:\n  torch_index_url: https://pypi.org/simple\n")
    if not refused:
        assert matrix.load(write_matrix(text)).cells
        return
    [problem] = messages(write_matrix(text))
    assert problem.startswith(f"matrix.yaml:9 sources.torch_index_url: PyPI's linux/arm64 wheel of torch {torch}.")
    assert "is the CPU build (torch.version.cuda is None; pytorch/pytorch#160162)" in problem
    assert "take its cu128 wheels from https://download.pytorch.org/whl/cu128" in problem
    assert matrix.load(write_matrix(text.replace("https://pypi.org/simple", "https://mirror.example.com/whl/{variant}"))).cells
