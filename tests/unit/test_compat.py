"""The knowledge base: internal consistency and facts from the published tables."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from imagesmith.model import compat
from imagesmith.model.versions import version_key

KB = compat.load()
RAW = yaml.safe_load(resources.files("imagesmith.model.compat").joinpath("data").joinpath("compat.yaml").read_text())


def test_every_patch_release_from_2_0_to_2_14_is_there() -> None:
    lines = KB.torch_lines()
    assert lines[0] == "2.0" and lines[-1] == "2.14"
    assert [f"2.{n}" for n in range(15)] == lines


@pytest.mark.parametrize("version", sorted(KB.torch))
def test_each_release_is_complete_and_consistent(version: str) -> None:
    release = KB.torch[version]
    assert release.python and all(isinstance(p, str) for p in release.python)
    assert release.torchvision, "every release has a matching torchvision"
    assert release.pypi_variant in release.variants
    for variant in release.variants.values():
        assert variant.index.startswith("https://download.pytorch.org/whl/")
        if variant.cuda:
            assert variant.name == "cu" + variant.cuda.replace(".", "")
            assert variant.cuda in KB.cuda, f"{version} {variant.name}: CUDA {variant.cuda} has no driver facts"
            assert variant.cudnn and variant.arch


def test_every_cited_source_is_defined() -> None:
    defined = {s["id"] for s in RAW["sources"]}
    cited = {s for section in ("torch", "cuda") for entry in RAW[section].values() for s in entry.get("sources", [])}
    assert cited <= defined, cited - defined


# Facts from PyTorch's RELEASE.md / previous-versions page and NVIDIA's tables.
CUDA_VARIANTS = [
    ("2.0", ["11.7", "11.8"]),
    ("2.1", ["11.8", "12.1"]),
    ("2.3", ["11.8", "12.1"]),
    ("2.4", ["11.8", "12.1", "12.4"]),
    ("2.5", ["11.8", "12.1", "12.4"]),
    ("2.6", ["11.8", "12.4", "12.6"]),
    ("2.7", ["11.8", "12.6", "12.8"]),
    ("2.8", ["12.6", "12.8", "12.9"]),
    ("2.9", ["12.6", "12.8", "13.0"]),
]


@pytest.mark.parametrize("line, cudas", CUDA_VARIANTS)
def test_cuda_variants_match_pytorch_release_matrix(line: str, cudas: list[str]) -> None:
    release = KB.resolve_torch(line)
    assert release is not None and release.cuda_versions() == cudas


@pytest.mark.parametrize("line, lo, hi", [("2.0", "3.8", "3.11"), ("2.2", "3.8", "3.12"), ("2.5", "3.9", "3.13"), ("2.9", "3.10", "3.14")])
def test_python_ranges(line: str, lo: str, hi: str) -> None:
    release = KB.resolve_torch(line)
    assert release is not None and (release.python[0], release.python[-1]) == (lo, hi)


def test_local_wheels_facts() -> None:
    """torch 2.14.1 cu130 as its wheel METADATA pins it (the wheel on this machine)."""
    variant = KB.torch["2.14.1"].variants["cu130"]
    assert (variant.cudnn, variant.nccl, KB.torch["2.14.1"].torchvision) == ("9.24.0.43", "2.30.7", "0.29.1")


def test_resolve_picks_newest_patch_and_exact() -> None:
    assert KB.resolve_torch("2.9").version == "2.9.1"  # type: ignore[union-attr]
    assert KB.resolve_torch("2.9.0").version == "2.9.0"  # type: ignore[union-attr]
    assert KB.resolve_torch("3.0") is None


@pytest.mark.parametrize("cuda, driver, status", [
    ("12.8", "570.211.01", "pass"),
    ("12.8", "535.54.03", "compat"),
    ("12.8", "470.82.01", "too-old"),
    ("13.0", "580.159.04", "pass"),
    ("13.0", "575.57.08", "too-old"),
    ("99.0", "580.0", "unknown"),
])
def test_driver_status(cuda: str, driver: str, status: str) -> None:
    assert KB.driver_status(cuda, driver) == status


def test_os_pythons() -> None:
    assert {k: o.python for k, o in KB.os.items()} == {
        "ubuntu20.04": "3.8", "ubuntu22.04": "3.10", "ubuntu24.04": "3.12",
        "debian11": "3.9", "debian12": "3.11", "debian13": "3.13"}


def test_every_cuda_minor_lists_its_releases_with_runtime_and_driver() -> None:
    from imagesmith.model.versions import version_key

    for minor, info in compat.load().cuda.items():
        releases = [u.release for u in info.updates]
        assert info.latest in releases, minor
        assert releases == sorted(releases, key=version_key), minor
        for u in info.updates:
            assert u.release.startswith(minor + ".") and u.cudart.startswith(minor + "."), (minor, u)
        drivers = [version_key(u.driver) for u in info.updates]
        assert drivers == sorted(drivers), f"CUDA {minor}: a later update never needs an older driver"
        assert info.toolkit_driver == info.updates[-1].driver


def test_cuda_releases_for_the_payload_carry_the_minor_compat_minimum() -> None:
    rows = {r["release"]: r for r in compat.load().cuda_releases()}
    assert rows["12.8.1"] == {"release": "12.8.1", "cudart": "12.8.90", "driver": "570.124.06", "min_driver": "525.60.13"}
    assert rows["13.0.2"] == {"release": "13.0.2", "cudart": "13.0.96", "driver": "580.95.05", "min_driver": "580.65.06"}


# numpy: each pin's Linux x86_64 wheels exist for these Pythons (PyPI, `pip index versions numpy
# --python-version X --only-binary=:all: --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64`).
NUMPY_WHEELS = {"1.24.4": ("3.8", "3.11"), "1.26.4": ("3.9", "3.12"), "2.0.2": ("3.9", "3.12"),
                "2.2.6": ("3.10", "3.13"), "2.3.5": ("3.11", "3.14"), "2.4.6": ("3.11", "3.14")}


@pytest.mark.parametrize("version", sorted(KB.torch))
def test_every_cell_has_a_numpy_with_wheels_and_the_abi_of_its_torch(version: str) -> None:
    for python in KB.torch[version].python:
        pin = KB.numpy_for(version, python)
        assert pin in NUMPY_WHEELS, f"torch {version}, Python {python}: numpy {pin}"
        lo, hi = NUMPY_WHEELS[pin]
        assert version_key(lo) <= version_key(python) <= version_key(hi), f"numpy {pin} has no wheel for Python {python}"
        # torch < 2.3 was built against numpy 1.x (numpy 2 breaks its ABI); Python 3.8 has no numpy 2
        numpy_1 = version_key(version) < version_key("2.3") or python == "3.8"
        assert pin.split(".")[0] == ("1" if numpy_1 else "2"), f"torch {version}, Python {python}: numpy {pin}"


@pytest.mark.parametrize("torch, python, numpy", [
    ("2.2.2", "3.12", "1.26.4"), ("2.3.0", "3.8", "1.24.4"), ("2.3.0", "3.10", "2.0.2"), ("2.4.1", "3.9", "2.0.2"),
    ("2.5.0", "3.9", "2.0.2"), ("2.8.0", "3.13", "2.2.6"), ("2.9.1", "3.14", "2.3.5"), ("2.10.0", "3.11", "2.4.6"),
    ("2.13.0+cpu", "3.11", "2.4.6"), ("2.14.1", "3.10", "2.2.6"), ("2.15.0", "3.13", "2.4.6"),
    ("2.14.1", "3.7", None), ("1.13.1", "3.10", None),
])
def test_numpy_for(torch: str, python: str, numpy: str | None) -> None:
    assert KB.numpy_for(torch, python) == numpy


def test_a_knowledge_base_without_a_numpy_table_pins_none() -> None:
    assert compat.parse({k: v for k, v in RAW.items() if k != "numpy"}).numpy_for("2.14.1", "3.11") is None
