"""The README's two commands in either order: what `make release` leaves in the tree (build/ full of
rendered build contexts with .py files, .cache/ with the lock tool's venv and the local registry)
never changes what `make lint` and the tests read. Each case runs the real tool on a copy of the
repository's own configuration (pyproject.toml) and bench/, with and without those outputs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import hatchling.build
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # the lock pins tomli for Python 3.10
    import tomli as tomllib

BIN = Path(sys.executable).parent
# An unused import: ruff reports F401 wherever it reads this file.
BAD = "import os\n"


def tree(tmp_path: Path, outputs: bool) -> Path:
    """pyproject.toml and bench/*.py copied; with outputs, what a release and the lock tool leave."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "bench").mkdir()
    for script in (ROOT / "bench").glob("*.py"):
        shutil.copy(script, tmp_path / "bench" / script.name)
    if outputs:
        context = tmp_path / "build" / "2.13.0-cpu-py3.11-debian12-nlp"
        context.mkdir(parents=True)
        shutil.copy(ROOT / "templates" / "files" / "layer_delta.py", context / "layer_delta.py")
        (context / "bad.py").write_text(BAD)
        for folder in (".cache/uv/lib/python3.11/site-packages", "dist", "site"):
            (tmp_path / folder).mkdir(parents=True)
            (tmp_path / folder / "bad.py").write_text(BAD)
    return tmp_path


def ruff(cwd: Path, *paths: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "ruff"), "check", "--no-cache", *paths], cwd=cwd, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("outputs", [False, True], ids=["clean tree", "after make release"])
@pytest.mark.parametrize("paths", [("bench",), (), (".",), ("bench", "build", ".cache", "dist", "site")],
                         ids=["make lint's paths", "no path", "the root", "outputs named"])
def test_ruff_reads_only_the_tree_it_owns(tmp_path: Path, outputs: bool, paths: tuple[str, ...]) -> None:
    root = tree(tmp_path, outputs)
    result = ruff(root, *[path for path in paths if (root / path).exists()])
    assert (result.returncode, result.stdout) == (0, "All checks passed!\n"), result.stdout + result.stderr


def test_ruff_would_report_the_planted_file_outside_the_outputs(tmp_path: Path) -> None:
    """The control: the file planted in the outputs is one ruff reports where it does read."""
    root = tree(tmp_path, outputs=True)
    (root / "bench" / "bad.py").write_text(BAD)
    result = ruff(root)
    assert result.returncode == 1
    assert "bench/bad.py:1:8" in result.stdout and "F401" in result.stdout, result.stdout
    assert "build/" not in result.stdout and ".cache/" not in result.stdout


def test_pytest_collects_only_tests(tmp_path: Path) -> None:
    root = tree(tmp_path, outputs=True)
    (root / "tests").mkdir()
    (root / "tests" / "test_one.py").write_text("def test_one() -> None:\n    assert True\n")
    for folder in ("build/ctx", ".cache/uv", "dist", ".venv/lib"):
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / "test_planted.py").write_text("def test_planted() -> None:\n    raise AssertionError\n")
    for args in ([], ["."]):
        result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                                cwd=root, capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        assert [line for line in result.stdout.splitlines() if "::" in line] == ["tests/test_one.py::test_one"], result.stdout


# ---------------------------------------------------------------- the lock (requirements/lock.txt)
def locked(name: str = "lock.txt") -> dict[str, list[str]]:
    """Each requirement line of a lock (name==version ; markers) -> its hash options."""
    entries: dict[str, list[str]] = {}
    current = ""
    for line in (ROOT / "requirements" / name).read_text().splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            current = line.rstrip(" \\")
            entries[current] = []
        elif line.strip().startswith("--hash="):
            entries[current].append(line.strip().rstrip(" \\"))
    return entries


def test_every_locked_requirement_is_pinned_with_hashes_from_an_index() -> None:
    entries = locked()
    assert len(entries) > 50
    for line, hashes in entries.items():
        requirement = Requirement(line)
        assert [str(s.operator) for s in requirement.specifier] == ["=="], line
        assert hashes and all(h.startswith("--hash=sha256:") for h in hashes), line
    assert "file:" not in (ROOT / "requirements" / "lock.txt").read_text()


def test_the_runtime_lock_is_the_lock_s_runtime_part_with_the_same_pins_and_hashes() -> None:
    """`make release` installs requirements/runtime.txt alone: each pin must be the lock's own (same version and
    hashes; markers may be narrower), every runtime dependency and the build backend in it, no test or docs tool."""
    def pins(name: str) -> dict[str, list[str]]:
        return {line.split(";")[0].strip(): hashes for line, hashes in locked(name).items()}

    full, runtime = pins("lock.txt"), pins("runtime.txt")
    assert runtime and {pin: full.get(pin) for pin in runtime} == runtime
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    names = {canonicalize_name(Requirement(line).name) for line in runtime}
    wanted = [*project["project"]["dependencies"], *project["build-system"]["requires"],
              *hatchling.build.get_requires_for_build_editable()]
    assert sorted({canonicalize_name(Requirement(r).name) for r in wanted} - names) == []
    assert {"pytest", "mypy", "ruff", "torch", "mkdocs"} & names == set()


def test_the_lock_names_every_dependency_pyproject_and_the_build_need() -> None:
    """Offline, by name only: `make lock-check` (CI) compares what a resolution would pin."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wanted = [*project["project"]["dependencies"], *project["build-system"]["requires"],
              *[r for extra in project["project"]["optional-dependencies"].values() for r in extra],
              *hatchling.build.get_requires_for_build_editable()]
    names = {canonicalize_name(Requirement(line).name) for line in locked()}
    assert sorted({canonicalize_name(Requirement(r).name) for r in wanted} - names) == []


# ---------------------------------------------------------------- the integration tier's schedule (tests/integration/groups.py)
def test_the_integration_schedule_names_every_module_once() -> None:
    from tests.integration import groups

    modules = sorted(p.name for p in (ROOT / "tests" / "integration").glob("test_*.py"))
    named = [m for ms in groups.GROUPS.values() for m in ms] + list(groups.REST)
    assert sorted(named) == modules  # a new module is placed on purpose; a renamed one is not left behind
    assert groups.scope("tests/integration/test_staging.py::t[a]") == "builds"
    assert groups.scope("tests/integration/test_verify.py::t") == "tests/integration/test_verify.py"
    assert groups.rank("tests/integration/test_build.py::t") < groups.rank("tests/integration/test_cuda_layer.py::t")
