"""The knowledge base: internal consistency and facts from the published tables."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from imagesmith.model import compat
from imagesmith.model.platform import Platform
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


# -- wheels per platform (compat.yaml platforms:) ---------------------------------------------------

ARM64 = Platform.ARM64


@pytest.mark.parametrize("torch, variant, status, manylinux", [
    ("2.9.1", "cu128", "resolves", "manylinux_2_28_aarch64"),     # 25 packages resolved for aarch64 here
    ("2.9.0", "cu128", "resolves", "manylinux_2_28_aarch64"),
    ("2.10.0", "cu128", "resolves", "manylinux_2_28_aarch64"),
    ("2.8.0", "cu128", "incomplete", "manylinux_2_28_aarch64"),   # triton 3.4.0 has no aarch64 wheel
    ("2.12.0", "cu130", "resolves", "manylinux_2_28_aarch64"),    # nccl-cu13 2.29.7 is manylinux_2_18_aarch64
    ("2.14.1", "cu130", "resolves", "manylinux_2_28_aarch64"),
    ("2.13.0", "cpu", "listed", "manylinux_2_28_aarch64"),
    ("2.6.0", "cpu", "listed", "manylinux_2_28_aarch64"),
    ("2.5.1", "cpu", None, None),                                 # not recorded
    ("2.14.1", "cu126", None, None),                              # download.pytorch.org's sbsa wheels: not checked
    ("2.9.1", "cu130", None, None),
])
def test_linux_arm64_wheels_per_release_and_variant(torch: str, variant: str, status: str | None, manylinux: str | None) -> None:
    wheels = KB.wheels_for(KB.torch[torch], variant, ARM64)
    found = (wheels.status, wheels.manylinux, wheels.glibc) if wheels else None
    assert found == ((status, manylinux, "2.28") if status else None)
    assert (ARM64 in KB.platforms_of(KB.torch[torch], variant)) == (status in ("resolves", "listed"))


@pytest.mark.parametrize("version", sorted(KB.torch))
def test_every_variant_has_linux_amd64_wheels_from_the_torch_table_alone(version: str) -> None:
    release = KB.torch[version]
    for name in release.variants:
        assert KB.wheels_for(release, name, Platform.AMD64) == compat.PlatformWheels(Platform.AMD64)
        assert KB.platforms_of(release, name)[0] is Platform.AMD64
    assert KB.wheels_for(release, "cu999", Platform.AMD64) is None


def test_platform_rows_name_known_variants_and_sources() -> None:
    defined = {s["id"] for s in RAW["sources"]}
    for name, table in RAW["platforms"].items():
        assert set(table["sources"]) <= defined
        for row in table["wheels"]:
            assert any(row["variant"] in r.variants for r in KB.torch.values()), row
            assert row["status"] in compat.WHEEL_STATUS and row["manylinux"].endswith(Platform(name).uname)


@pytest.mark.parametrize("tag, glibc", [
    ("manylinux_2_28_aarch64", "2.28"), ("manylinux_2_17_x86_64", "2.17"), ("manylinux2014_aarch64", "2.17"),
    ("manylinux2010_x86_64", "2.12"), ("manylinux1_x86_64", "2.5"), ("linux_aarch64", None), ("musllinux_1_2_aarch64", None),
])
def test_manylinux_glibc(tag: str, glibc: str | None) -> None:
    assert compat.manylinux_glibc(tag) == glibc


def test_glibc_of_each_os_and_which_run_the_arm64_wheels() -> None:
    assert {k: o.glibc for k, o in KB.os.items()} == {
        "ubuntu20.04": "2.31", "ubuntu22.04": "2.35", "ubuntu24.04": "2.39",
        "debian11": "2.31", "debian12": "2.36", "debian13": "2.41"}
    wheels = KB.wheels_for(KB.torch["2.9.1"], "cu128", ARM64)
    assert wheels is not None and all(wheels.runs_on(o.glibc) for o in KB.os.values())
    assert not wheels.runs_on("2.27") and wheels.runs_on("2.28")


@pytest.mark.parametrize("torch, variant, python, glibc, nearest", [
    # same line first (another CUDA), then the same CUDA major, then any CUDA; newer before older at one distance
    ("2.8.0", "cu128", "3.12", "2.36", [("2.9", "cu128"), ("2.10", "cu128"), ("2.11", "cu130")]),
    ("2.14.1", "cu126", "3.12", "2.36", [("2.14", "cu130"), ("2.10", "cu128"), ("2.9", "cu128")]),
    ("2.9.1", "cu130", "3.12", "2.36", [("2.9", "cu128"), ("2.11", "cu130"), ("2.12", "cu130")]),
    ("2.5.1", "cpu", "3.12", "2.36", [("2.6", "cpu"), ("2.7", "cpu"), ("2.8", "cpu")]),  # CPU cells: CPU wheels
    ("2.8.0", "cu128", "3.9", "2.36", []),                 # no arm64 CUDA wheels for Python 3.9
    ("2.8.0", "cu128", "3.12", "2.17", []),                # nothing runs on a glibc that old
])
def test_nearest_cells_with_wheels_for_a_platform(torch: str, variant: str, python: str, glibc: str,
                                                  nearest: list[tuple[str, str]]) -> None:
    assert KB.nearest(KB.torch[torch], variant, ARM64, python, glibc) == nearest


def test_an_unknown_status_in_a_replacement_file_is_refused() -> None:
    raw = RAW | {"platforms": {"linux/arm64": {"wheels": [{"torch": ">=2.9", "variant": "cu128", "status": "maybe"}]}}}
    with pytest.raises(ValueError, match="status 'maybe' is not one of resolves, listed, incomplete"):
        compat.parse(raw)
