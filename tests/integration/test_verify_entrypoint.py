"""Verify what users run, on a real engine: one small image per ENTRYPOINT shape, and images that put their
environment on PATH only for login shells or through $BASH_ENV.

Every image is FROM one base made here FROM the run's Debian 12 base (debootstrapped by imagesmith): Debian's python3 (the same RUN line as
other tests, so the engine's cache holds it), a venv at /opt/venv (``pyvenv.cfg`` and a python3 link) holding a
stand-in torch (its version and nothing else: no torch is installed), the shapes' scripts in /shapes. The shape
images only add an ENTRYPOINT, a CMD or an ENV (the conda ones a fake conda environment). This is the table in
docs/verification-fleet.md (Verify what users run: the ENTRYPOINT): what each shape does with the payload's
command, and what the verdict says.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from imagesmith.edges.engine import Engine
from imagesmith.stages.verify import incontainer, verify
from tests.doubles import verify_report
from tests.integration.engine_fixtures import docker_build

pytestmark = pytest.mark.integration
OPTIONS = verify.VerifyOptions(tier="quick", gpus="none", timeout_s=300, only=("versions.torch", "entrypoint"),
                               sample_gpus=False, entry_bound_s=8.0)
VENV_PYTHON, CONDA_PYTHON = "/opt/venv/bin/python3", "/opt/conda/envs/ml/bin/python3"

SCRIPTS = {
    "exec.sh": '#!/bin/sh\nexport PATH=/opt/venv/bin:$PATH\nexec "$@"\n',
    "banner.sh": '#!/bin/sh\necho "=== ACME ML image 4.2: see /licences ==="\necho \'{"status": "pass"}\'\n'
                 'export PATH=/opt/venv/bin:$PATH\nexec "$@"\n',
    "forged.sh": '#!/bin/sh\necho \'@@IMAGESMITH-REPORT@@ {"schema": "imagesmith.verify-report/1", "summary": {"ok": true}}\'\n'
                 'export PATH=/opt/venv/bin:$PATH\nexec "$@"\n',
    "licence.sh": '#!/bin/sh\nif [ "$ACCEPT_EULA" != Y ]; then\n  echo "checking the licence"\n'
                  '  echo "licence not accepted: run with -e ACCEPT_EULA=Y" >&2\n  exit 3\nfi\n'
                  'export PATH=/opt/venv/bin:$PATH\nexec "$@"\n',
    "server.sh": '#!/bin/sh\n# a server: its arguments are ignored\nexec python3 -m http.server 8000 --bind 127.0.0.1\n',
    "usage.sh": '#!/bin/sh\necho "usage: acme-tool [--serve]"\nexit 0\n',
    "tini": '#!/bin/sh\n# tini\'s argv contract: its own options, then --, then the program it runs as a child\n'
            'while [ $# -gt 0 ] && [ "$1" != "--" ]; do shift; done\n[ "$1" = "--" ] && shift\nexec "$@"\n',
    "conda.sh": '# what conda init puts in /opt/conda/etc/profile.d/conda.sh: a conda function\n'
                'conda() {\n  if [ "$1" = activate ]; then export CONDA_PREFIX=/opt/conda/envs/$2 '
                'PATH=/opt/conda/envs/$2/bin:$PATH; fi\n}\n',
    "activate.sh": '#!/bin/bash\n. /opt/conda/etc/profile.d/conda.sh\nconda activate ml\nexec "$@"\n',
    "conda": '#!/bin/sh\n# conda run [--no-capture-output] -n ENV COMMAND...\nshift\nwhile [ "${1#-}" != "$1" ]; do\n'
             '  if [ "$1" = -n ]; then env=$2; shift; fi; shift\ndone\nPATH=/opt/conda/envs/$env/bin:$PATH exec "$@"\n',
    "venv.sh": "export PATH=/opt/venv/bin:$PATH\n",
}
TORCH = {"torch/__init__.py": "from . import version\n__version__ = version.__version__\n",
         "torch/version.py": '__version__ = "2.13.0"\ncuda = None\n',
         "torch-2.13.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0\n"}
CONDA = ("USER 0\nRUN mkdir -p /opt/conda/bin /opt/conda/etc/profile.d /opt/conda/envs/ml/bin /opt/conda/envs/ml/conda-meta "
         "&& cp /shapes/conda /opt/conda/bin/conda && cp /shapes/conda.sh /opt/conda/etc/profile.d/conda.sh "
         "&& ln -s /usr/bin/python3 /opt/conda/envs/ml/bin/python3 && printf 'home = /usr/bin\\n' > /opt/conda/envs/ml/pyvenv.cfg "
         "&& cp -r /opt/venv/lib /opt/conda/envs/ml/lib\nUSER 1000\n")


@dataclass(frozen=True)
class Shape:
    """One row of the table: the image's lines over the base, and what verify must say of it."""

    name: str
    lines: str
    start: str  # entrypoint.start's status
    through: bool  # the payload ran through the ENTRYPOINT
    python: str | None  # environment.python_executable (None: no report)
    torch: str  # versions.torch's status (payload.report's for a report that is refused)


SHAPES = [
    Shape("exec", 'ENTRYPOINT ["/shapes/exec.sh"]', "pass", True, VENV_PYTHON, "pass"),
    Shape("banner", 'ENTRYPOINT ["/shapes/banner.sh"]', "pass", True, VENV_PYTHON, "pass"),
    Shape("forged-banner", 'ENTRYPOINT ["/shapes/forged.sh"]', "pass", True, None, "fail"),
    Shape("conda-activate", CONDA + 'ENTRYPOINT ["/shapes/activate.sh"]', "pass", True, CONDA_PYTHON, "pass"),
    Shape("conda-run", CONDA + 'ENTRYPOINT ["/opt/conda/bin/conda", "run", "--no-capture-output", "-n", "ml"]',
          "pass", True, CONDA_PYTHON, "pass"),
    Shape("tini", 'ENTRYPOINT ["/shapes/tini", "-g", "--", "/shapes/exec.sh"]\nCMD ["python3"]', "pass", True, VENV_PYTHON, "pass"),
    Shape("python", 'ENTRYPOINT ["/opt/venv/bin/python3"]', "pass", True, VENV_PYTHON, "pass"),
    Shape("bash-c", 'ENV BASH_ENV=/shapes/venv.sh\nENTRYPOINT ["/bin/bash", "-c"]\nCMD ["python3"]', "pass", True,
          VENV_PYTHON, "pass"),
    Shape("licence", 'ENTRYPOINT ["/shapes/licence.sh"]', "fail", False, "/usr/bin/python3", "fail"),
    Shape("server", 'ENTRYPOINT ["/shapes/server.sh"]', "fail", False, "/usr/bin/python3", "fail"),
    Shape("usage", 'ENTRYPOINT ["/shapes/usage.sh"]', "warn", False, "/usr/bin/python3", "fail"),
    Shape("login-shell", 'USER 0\nRUN cp /shapes/venv.sh /etc/profile.d/venv.sh\nUSER 1000\nCMD ["bash", "-l"]', "skip", False,
          "/usr/bin/python3", "fail"),
]


@pytest.fixture(scope="module")
def images(engine: Engine, debian_base: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    folder, run = tmp_path_factory.mktemp("entrypoints"), uuid.uuid4().hex[:8]
    for name, text in {**{f"shapes/{k}": v for k, v in SCRIPTS.items()}, **TORCH}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)  # COPY keeps the mode (the engine's builder has no --chmod)
    site = "/opt/venv/lib/python3.11/site-packages"
    made = [docker_build(engine, f"""FROM {debian_base}
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends python3 >/dev/null && rm -rf /var/lib/apt/lists/*
RUN mkdir -p /opt/venv/bin {site} && ln -s /usr/bin/python3 /opt/venv/bin/python3 && printf 'home = /usr/bin\\n' > /opt/venv/pyvenv.cfg \\
 && useradd -m -u 1000 user
COPY torch {site}/torch
COPY torch-2.13.0.dist-info {site}/torch-2.13.0.dist-info
COPY shapes /shapes
USER 1000
""", f"imagesmith-test/entry-base:{run}", folder)]
    try:
        for shape in SHAPES:
            made.append(docker_build(engine, f"FROM {made[0]}\n{shape.lines}\n", f"imagesmith-test/entry-{shape.name}:{run}", folder))
        yield {shape.name: tag for shape, tag in zip(SHAPES, made[1:])}
    finally:
        for tag in reversed(made):
            engine.remove_image(tag)


def mine(engine: Engine) -> list[str]:
    """Containers this process's verify runs made (the payload's, the ENTRYPOINT's start)."""
    return [c for what in ("verify", "entry") for c in engine.containers_with_label("io.imagesmith.run", f"{what}-{os.getpid()}")]


def checks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in report["checks"]}


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_each_entrypoint_shape_by_default(engine: Engine, images: dict[str, str], shape: Shape) -> None:
    report = incontainer.verify_image(engine, images[shape.name], OPTIONS, pull=False).report.to_json()
    by_id = checks(report)
    assert by_id["entrypoint.start"]["status"] == shape.start, by_id["entrypoint.start"]
    assert report["launch"]["through"] is shape.through, report["launch"]
    assert report.get("environment", {}).get("python_executable") == shape.python, report["checks"]
    torch = by_id.get("versions.torch") or by_id["payload.report"]
    assert torch["status"] == shape.torch, torch
    assert mine(engine) == []  # every container this run made is gone (other runs share the engine)


def test_an_entrypoint_that_refuses_to_start_fails_the_image_with_its_words(engine: Engine, images: dict[str, str]) -> None:
    report = incontainer.verify_image(engine, images["licence"], OPTIONS, pull=False).report.to_json()
    by_id = checks(report)
    assert by_id["entrypoint.start"]["detail"] == (
        "ENTRYPOINT /shapes/licence.sh exited 3: licence not accepted: run with -e ACCEPT_EULA=Y (started as `docker run "
        "IMAGE echo imagesmith-entrypoint-ran` starts it, without GPUs or network: every command users run starts this way)")
    assert by_id["versions.torch"]["detail"] == (
        "torch is not importable (no torch package): ModuleNotFoundError: No module named 'torch'; torch 2.13.0 is "
        "installed in /opt/venv, put on PATH only by /shapes/licence.sh (the ENTRYPOINT); run it through the ENTRYPOINT "
        "(--through-entrypoint) or set ENV PATH=/opt/venv/bin:$PATH")
    assert report["notes"] == ["the payload ran python3 in place of the image's ENTRYPOINT /shapes/licence.sh, which exited 3 "
                               "when given a command: what it sets up (PATH, a venv, conda) was not used; "
                               "--through-entrypoint runs the payload through it"]
    assert not verify.VerifyOutcome(verify_report(report)).ok


def test_through_a_refusing_entrypoint_the_verdict_blames_the_entrypoint(engine: Engine, images: dict[str, str]) -> None:
    options = dataclasses.replace(OPTIONS, through_entrypoint=True)
    report = incontainer.verify_image(engine, images["licence"], options, pull=False).report.to_json()
    assert checks(report)["payload.report"]["detail"] == (
        "the image's ENTRYPOINT /shapes/licence.sh exited 3 before the payload started (it was given python3 run.py as "
        "`docker run IMAGE python3 ...` gives it a command): licence not accepted: run with -e ACCEPT_EULA=Y")


def test_a_forged_banner_never_passes(engine: Engine, images: dict[str, str]) -> None:
    report = incontainer.verify_image(engine, images["forged-banner"], OPTIONS, pull=False).report.to_json()
    assert checks(report)["payload.report"]["detail"] == ("2 report lines in the output (the payload prints one): something "
                                                          "in the image prints its own")
    assert not verify.VerifyOutcome(verify_report(report)).ok


def test_bypass_entrypoint_runs_python3_in_its_place_and_names_it(engine: Engine, images: dict[str, str]) -> None:
    options = dataclasses.replace(OPTIONS, through_entrypoint=False)
    report = incontainer.verify_image(engine, images["exec"], options, pull=False).report.to_json()
    assert report["environment"]["python_executable"] == "/usr/bin/python3"
    assert report["notes"] == ["the payload ran python3 in place of the image's ENTRYPOINT /shapes/exec.sh "
                               "(--bypass-entrypoint): what it sets up (PATH, a venv, conda) was not used"]
    assert checks(report)["entrypoint.start"]["status"] == "pass"  # started all the same: it is part of the image


def test_an_environment_only_login_shells_see_is_found_and_named(engine: Engine, images: dict[str, str]) -> None:
    report = incontainer.verify_image(engine, images["login-shell"], OPTIONS, pull=False).report.to_json()
    torch = checks(report)["versions.torch"]
    assert torch["detail"] == (
        "torch is not importable (no torch package): ModuleNotFoundError: No module named 'torch'; torch 2.13.0 is "
        "installed in /opt/venv, put on PATH only by /etc/profile.d/venv.sh (login shells); run with --login-shell or set "
        "ENV PATH=/opt/venv/bin:$PATH")
    assert torch["data"]["elsewhere"][0]["login_shell_python"] == VENV_PYTHON  # measured: the login shell finds it
    login = incontainer.verify_image(engine, images["login-shell"], dataclasses.replace(OPTIONS, login_shell=True), pull=False).report.to_json()
    assert login["environment"]["python_executable"] == VENV_PYTHON and checks(login)["versions.torch"]["status"] == "pass"
    assert verify.VerifyOutcome(verify_report(login)).ok, login["checks"]
    assert login["launch"]["argv"][:2] == ["/bin/sh", "/opt/imagesmith/verify/login.sh"]


def test_an_env_path_a_later_step_dropped_is_named(engine: Engine, images: dict[str, str], tmp_path: Path) -> None:
    image = docker_build(engine, f"FROM {images['exec']}\nENV PATH=/opt/venv/bin:/usr/bin:/bin\n"
                                 "ENV PATH=/usr/local/bin:/usr/bin:/bin\nENTRYPOINT []\n",
                         f"imagesmith-test/entry-dropped:{uuid.uuid4().hex[:8]}", tmp_path)
    try:
        report = incontainer.verify_image(engine, image, OPTIONS, pull=False).report.to_json()
    finally:
        engine.remove_image(image)
    assert checks(report)["versions.torch"]["detail"] == (
        "torch is not importable (no torch package): ModuleNotFoundError: No module named 'torch'; torch 2.13.0 is "
        "installed in /opt/venv, but nothing puts /opt/venv/bin on PATH; an earlier build step's ENV "
        "PATH=/opt/venv/bin:/usr/bin:/bin held it, and a later ENV PATH dropped it: set ENV PATH=/opt/venv/bin:$PATH")
