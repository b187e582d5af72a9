"""Install without the repository: the wheel `make dist` builds (hatchling; templates/ and verify/ go inside it as
imagesmith/_templates and imagesmith/_verify) installed into a fresh venv and used from a folder outside the
checkout. doctor, plan and render work, and the payload and templates they use are the wheel's own.

Offline: the wheel is installed with --no-deps and the fresh venv sees the dependencies of this checkout's venv
through a .pth line (a plain path: the editable imagesmith there is never on it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import LOCAL_ROOTS, ROOT

NO_ENGINE = "unix:///nonexistent/imagesmith-test.sock"


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """(the fresh venv's bin folder, an environment with nothing of the checkout in it)."""
    tmp = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME") and not k.startswith(("COV", "COVERAGE"))}
    built = run([sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp / "dist")], ROOT, env)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp / "dist").glob("imagesmith-*-py3-none-any.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"imagesmith/_verify/run.py", "imagesmith/_templates/base.Dockerfile.j2",
            "imagesmith/model/compat/data/compat.yaml", "imagesmith/data/report/run.html.j2"} <= set(names)
    venv = tmp / "venv"
    assert run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp, env).returncode == 0
    python = venv / "bin" / "python"
    done = run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)], tmp, env)
    assert done.returncode == 0, done.stderr
    purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp, env).stdout.strip()
    Path(purelib, "imagesmith-test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin", env | {"DOCKER_HOST": NO_ENGINE, "VIRTUAL_ENV": str(venv)}


def test_the_wheel_carries_the_payload_and_the_templates(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_dir, env = installed
    code = "import imagesmith, imagesmith.resources as r; print(imagesmith.__file__); print(r.payload_dir()); print(r.templates_dir())"
    where = run([str(bin_dir / "python"), "-c", code], tmp_path, env)
    assert where.returncode == 0, where.stderr
    package, payload, templates = (Path(line) for line in where.stdout.splitlines())
    venv = bin_dir.parent
    assert package.is_relative_to(venv) and not package.is_relative_to(ROOT)  # the wheel's, not the checkout's
    assert payload == package.parent / "_verify" and (payload / "run.py").is_file()
    assert templates == package.parent / "_templates" and (templates / "base.Dockerfile.j2").is_file()


def test_doctor_runs_from_the_wheel(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_dir, env = installed
    done = run([str(bin_dir / "imagesmith"), "doctor"], tmp_path, env)
    assert "Traceback" not in done.stderr and done.returncode == 1, done.stdout + done.stderr  # 1: the engine is not there
    assert f"check that the engine at DOCKER_HOST={NO_ENGINE} is up" in done.stdout
    assert "NOT READY: 1 problem to fix" in done.stdout


@pytest.mark.skipif(not all(p.is_dir() for p in LOCAL_ROOTS),
                    reason=f"examples/local.yaml reads {', '.join(map(str, LOCAL_ROOTS))}, which this host lacks")
def test_plan_and_render_examples_local_from_the_wheel(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bin_dir, env = installed
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    roots = [arg for root in LOCAL_ROOTS for arg in ("--allow-root", str(root))]
    plan = run([str(bin_dir / "imagesmith"), "plan", "-m", "examples/local.yaml", "--format", "json", *roots], tmp_path, env)
    assert plan.returncode == 0, plan.stderr
    targets = json.loads(plan.stdout)["targets"]
    assert len(targets) == 7 and "2.14.1-cu130-py3.11-debian12-base" in {t["id"] for t in targets}
    render = run([str(bin_dir / "imagesmith"), "render", "-m", "examples/local.yaml", "--out", "build", *roots], tmp_path, env)
    assert render.returncode == 0, render.stderr
    dockerfile = tmp_path / "build" / "2.14.1-cu130-py3.11-debian12-base" / "Dockerfile"
    assert "FROM " in dockerfile.read_text() and "/opt/venv" in dockerfile.read_text()
