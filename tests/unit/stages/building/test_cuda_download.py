"""The CUDA wheel set's download (imagesmith.stages.building.cudabuild): the platform tags an OS's glibc
accepts, the exact pip command, and that command run for real by this Python's pip against
a local folder of wheels (no network): a wheel too new for the OS's glibc is never taken."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from imagesmith.errors import BuildError
from imagesmith.model import compat
from imagesmith.stages.building.cudabuild import download_argv, platforms


def test_platforms_run_from_the_os_glibc_down_to_manylinux1() -> None:
    tags = platforms("2.36")
    assert tags[0] == "manylinux_2_36_x86_64" and tags[31] == "manylinux_2_5_x86_64"
    assert tags[32:] == ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    assert platforms("2.12")[-2:] == ["manylinux2010_x86_64", "manylinux1_x86_64"] and "manylinux2014_x86_64" not in platforms("2.12")


@pytest.mark.parametrize("glibc", ["2.4", "3.0"])
def test_a_glibc_no_manylinux_wheel_fits_is_refused(glibc: str) -> None:
    with pytest.raises(BuildError, match=f"glibc {glibc}: manylinux wheels need glibc 2.5 or newer"):
        platforms(glibc)


def test_every_os_of_the_knowledge_base_has_a_glibc_manylinux_knows() -> None:
    assert {key: platforms(info.glibc)[0] for key, info in compat.load().os.items()}["debian12"] == "manylinux_2_36_x86_64"


def test_the_command_takes_only_the_build_sources_and_the_pins() -> None:
    sources = {"PIP_INDEX_URL": "http://127.0.0.1:4100/simple", "PIP_EXTRA_INDEX_URL": "https://a.test/simple https://b.test/simple",
               "PIP_FIND_LINKS": "http://127.0.0.1:4101/", "PIP_TRUSTED_HOST": "127.0.0.1"}
    argv = download_argv("/py", ["nvidia-nccl-cu13==2.30.7", "cuda-toolkit==13.0.3.0"], Path("/w"), sources, "2.41", "3.13",
                         Path("/ca.pem"))
    assert argv[:12] == ["/py", "-m", "pip", "download", "--isolated", "--no-cache-dir", "--disable-pip-version-check",
                         "--progress-bar", "off", "--no-deps", "--only-binary=:all:", "--dest"]
    assert argv[12:15] == ["/w", "--python-version", "3.13"] and argv[15] == "--platform=manylinux_2_41_x86_64"
    rest = argv[15 + len(platforms("2.41")):]
    assert rest == ["--index-url", "http://127.0.0.1:4100/simple", "--extra-index-url", "https://a.test/simple",
                    "--extra-index-url", "https://b.test/simple", "--find-links", "http://127.0.0.1:4101/",
                    "--trusted-host", "127.0.0.1", "--cert", "/ca.pem", "nvidia-nccl-cu13==2.30.7", "cuda-toolkit==13.0.3.0"]


def wheel(folder: Path, name: str, version: str, platform: str) -> Path:
    path = folder / f"{name}-{version}-py3-none-{platform}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name}-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(f"{name}-{version}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-" + platform + "\n")
        zf.writestr(f"{name}-{version}.dist-info/RECORD", "")
    return path


def run(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "host-pip.conf"  # what a host's pip configuration could do: stop every download
    config.write_text("[global]\nno-index = true\nconstraint = /nonexistent/constraints.txt\n")
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_CONSTRAINT=str(config), PIP_NO_INDEX="1")
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)


def test_pip_downloads_the_pinned_wheels_for_the_os_and_refuses_a_wheel_too_new_for_it(tmp_path: Path) -> None:
    links, index, dest = tmp_path / "links", tmp_path / "index", tmp_path / "wheels"
    for folder in (links, index, dest):
        folder.mkdir()
    wheel(links, "tinycudart", "13.0.96", "manylinux_2_17_x86_64")
    wheel(links, "tinycublas", "13.1.1.3", "manylinux_2_39_x86_64")  # needs glibc 2.39
    sources = {"PIP_INDEX_URL": index.as_uri(), "PIP_FIND_LINKS": links.as_uri()}
    ok = run(download_argv(sys.executable, ["tinycudart==13.0.96"], dest, sources, "2.36", "3.11", None), tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert [p.name for p in dest.iterdir()] == ["tinycudart-13.0.96-py3-none-manylinux_2_17_x86_64.whl"]
    too_new = run(download_argv(sys.executable, ["tinycublas==13.1.1.3"], dest, sources, "2.36", "3.11", None), tmp_path)
    assert too_new.returncode != 0 and "No matching distribution found for tinycublas==13.1.1.3" in too_new.stdout + too_new.stderr
    on_newer_os = run(download_argv(sys.executable, ["tinycublas==13.1.1.3"], dest, sources, "2.41", "3.13", None), tmp_path)
    assert on_newer_os.returncode == 0, on_newer_os.stdout + on_newer_os.stderr
    assert len(list(dest.iterdir())) == 2
