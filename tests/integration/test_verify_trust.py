"""Verification an image cannot fool: planted images that forge, garble, flood or
drop the payload's report, wrappers that drop their arguments, a root image
serving Jupyter without a token, and --expect's grammar. Each image is made
FROM the torch 2.13.0+cpu base imagesmith built (CPU mode); the verdict and the
message must name the fault, and no output may end in exit 3.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from imagesmith.edges.engine import Engine
from imagesmith.stages.verify import incontainer, verify
from tests.integration.engine_fixtures import BuiltImages, containers_created, left_containers

pytestmark = pytest.mark.integration
QUICK = verify.VerifyOptions(tier="quick", gpus="none", timeout_s=300, only=("versions", "security"))
FORGED = ('@@IMAGESMITH-REPORT@@ {"schema":"imagesmith.verify-report/1","tier":"quick",'
          '"checks":[{"id":"versions.torch","status":"pass"}],"summary":{"pass":1,"warn":0,"fail":0,"skip":0,"ok":true}}')
# A .pth file's import line runs inside the image's python3 before the payload does
# (Debian's own sitecustomize would shadow one in the venv).
SITE = "/opt/venv/lib/python3.11/site-packages"


def docker_build(engine: Engine, dockerfile: str, tag: str, folder: Path) -> str:
    """A planted image, built with the plain docker CLI (host network: no bridge needed)."""
    (folder / "Dockerfile").write_text(dockerfile)
    proc = subprocess.run(["docker", "build", "-q", "--network", "host", "-t", tag, str(folder)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return tag


@pytest.fixture()
def planted(engine: Engine, tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Build a planted image from a Dockerfile (files beside it); always removed."""
    made: list[str] = []

    def make(dockerfile: str, **files: str) -> str:
        folder = tmp_path / uuid.uuid4().hex[:8]
        folder.mkdir()
        for name, text in files.items():
            (folder / name).write_text(text)
        made.append(docker_build(engine, dockerfile, f"imagesmith-test/trust:{folder.name}", folder))
        return made[-1]

    yield make
    for tag in made:
        engine.remove_image(tag)


def checks(outcome: verify.VerifyOutcome) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in outcome.report.to_json()["checks"]}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "imagesmith.cli", *args], capture_output=True, text=True, timeout=600)


def with_python3(base: str, extra: str = "") -> str:
    """An image whose python3 (first on PATH) is the script ``python3`` given beside it."""
    return (f"FROM {base}\nUSER 0\nRUN rm /opt/venv/bin/python3\nCOPY python3 /opt/venv/bin/python3\n"
            f"RUN chmod 755 /opt/venv/bin/python3\nUSER 1000\n{extra}")


def with_site(base: str) -> str:
    """An image whose python3 runs the sitecustomize.py given beside it before the payload."""
    return (f"FROM {base}\nUSER 0\nCOPY sitecustomize.py {SITE}/imagesmith_planted.py\n"
            f"RUN echo 'import imagesmith_planted' > {SITE}/zz-imagesmith-planted.pth\nUSER 1000\n")


# -- the payload always runs, and only its own report counts --------------------------------------


def test_an_entrypoint_that_forges_a_report_never_runs(engine: Engine, built_images: BuiltImages, planted: Any) -> None:
    image = planted(f"FROM {built_images.cpu_base}\nENTRYPOINT [\"/bin/sh\", \"-c\", \"echo '{FORGED}'\"]\n")
    outcome = incontainer.verify_image(engine, image, QUICK)
    assert outcome.ok and checks(outcome)["versions.torch"]["detail"].startswith("torch 2.13.0+cpu matches")
    assert len(outcome.report.to_json()["checks"]) > 1 and outcome.report.to_json()["nonce"]  # the real payload's answer
    # its start printed the forgery, not the no-op's word: it does not run the command it is given, so it was bypassed
    assert outcome.report.to_json()["launch"]["through"] is False and outcome.report.to_json()["launch"]["start"]["ran_command"] is False


def test_an_entrypoint_that_drops_its_arguments_does_not_decide(engine: Engine, built_images: BuiltImages, planted: Any) -> None:
    image = planted(f'FROM {built_images.cpu_base}\nENTRYPOINT ["/bin/sh", "-c", "exec python3"]\n')
    outcome = incontainer.verify_image(engine, image, QUICK)
    assert outcome.ok, [c for c in outcome.report.to_json()["checks"] if c["status"] == "fail"]


def test_a_python3_that_prints_a_forged_report_is_rejected(engine: Engine, built_images: BuiltImages, planted: Any) -> None:
    image = planted(with_python3(built_images.cpu_base), python3=f"#!/bin/sh\necho '{FORGED}'\n")
    outcome = incontainer.verify_image(engine, image, QUICK)
    (check,) = outcome.report.to_json()["checks"]
    assert not outcome.ok and check["id"] == "payload.report" and check["status"] == "fail"
    assert check["detail"].startswith("the report was rejected: report.nonce: missing: this report was not written by this run's payload")


def test_a_replayed_genuine_report_is_rejected(engine: Engine, built_images: BuiltImages, planted: Any) -> None:
    genuine = incontainer.verify_image(engine, built_images.cpu_base, QUICK).report.to_json()
    line = "@@IMAGESMITH-REPORT@@ " + json.dumps({k: genuine[k] for k in (
        "schema", "nonce", "tier", "started_at", "duration_s", "environment", "checks", "summary")} | {"schema": "imagesmith.verify-report/1"})
    image = planted(with_site(built_images.cpu_base),
                    **{"sitecustomize.py": f"import os, sys\nsys.stdout.write({line!r} + '\\n')\nsys.stdout.flush()\nos._exit(0)\n"})
    (check,) = incontainer.verify_image(engine, image, QUICK).report.to_json()["checks"]
    assert check["id"] == "payload.report" and "not this run's" in check["detail"], check


def test_a_second_report_line_is_rejected(engine: Engine, built_images: BuiltImages, planted: Any) -> None:
    image = planted(with_site(built_images.cpu_base),
                    **{"sitecustomize.py": f"import sys\nsys.stdout.write({FORGED!r} + '\\n')\n"})
    (check,) = incontainer.verify_image(engine, image, QUICK).report.to_json()["checks"]
    assert check["detail"].startswith("2 report lines in the output (the payload prints one)"), check


@pytest.mark.parametrize("printed, why", [
    ("@@IMAGESMITH-REPORT@@ {garbage", "the report line is not strict JSON"),
    ("@@IMAGESMITH-REPORT@@ " + "[" * 100000, "the report line is not strict JSON"),
    ("@@IMAGESMITH-REPORT@@ " + json.dumps({"schema": "imagesmith.verify-report/1", "checks": "all", "summary": []}),
     "the report was rejected: report.nonce: missing"),
    ("@@IMAGESMITH-REPORT@@ " + json.dumps([1, 2]), "the report was rejected: report: expected an object"),
    ("@@IMAGESMITH-REPORT@@ " + json.dumps({"schema": "imagesmith.verify-report/1", "nonce": None,
                                             "checks": [{"id": ["x"], "status": {"a": 1}}]})[:60], "the report line is not strict JSON"),
])
def test_garbage_on_the_report_line_fails_cleanly(engine: Engine, built_images: BuiltImages, planted: Any, printed: str, why: str) -> None:
    image = planted(with_python3(built_images.cpu_base),
                    python3=f"#!/usr/bin/python3.11\nimport sys\nsys.stdout.write({printed!r} + '\\n')\n")
    (check,) = incontainer.verify_image(engine, image, QUICK).report.to_json()["checks"]
    assert check["id"] == "payload.report" and check["status"] == "fail" and check["detail"].startswith(why), check


def test_a_python3_that_drops_its_arguments_names_the_entrypoint(engine: Engine, built_images: BuiltImages, planted: Any) -> None:
    image = planted(with_python3(built_images.cpu_base, 'ENTRYPOINT ["/usr/local/bin/start"]\n'),
                    python3="#!/bin/sh\nexec /usr/bin/python3.11 -c 'print(\"hello\")'\n")
    (check,) = incontainer.verify_image(engine, image, QUICK).report.to_json()["checks"]
    assert check["detail"] == ("the image's python3 exited 0 without starting the payload (python3 run.py in place of the "
                               "image's ENTRYPOINT /usr/local/bin/start; it did not run its arguments): hello"), check


def test_floods_and_bytes_that_are_not_utf8_do_not_hide_the_report(engine: Engine, built_images: BuiltImages, planted: Any) -> None:
    flood = ("import sys\nout = sys.stdout.buffer\nout.write(b'\\xff\\xfe\\x00 not utf-8\\n')\n"
             "for _ in range(80):\n    out.write(b'x' * (1 << 20))\nout.write(b'\\n')\nout.flush()\n")
    image = planted(with_site(built_images.cpu_base), **{"sitecustomize.py": flood})
    outcome = incontainer.verify_image(engine, image, verify.VerifyOptions(tier="quick", gpus="none", timeout_s=300, only=("versions.torch",)))
    assert outcome.ok and [c["id"] for c in outcome.report.to_json()["checks"]] == ["versions.torch"]


def test_a_flood_after_the_report_is_named(engine: Engine, built_images: BuiltImages, planted: Any) -> None:
    flood = ("import atexit, sys\n@atexit.register\ndef flood():\n    for _ in range(80):\n"
             "        sys.stdout.buffer.write(b'y' * (1 << 20))\n    sys.stdout.flush()\n")
    image = planted(with_site(built_images.cpu_base), **{"sitecustomize.py": flood})
    (check,) = incontainer.verify_image(engine, image, verify.VerifyOptions(
        tier="quick", gpus="none", timeout_s=300, only=("versions.torch",))).report.to_json()["checks"]
    assert check["id"] == "payload.report" and "(the container printed 80 MiB on stdout; the last 64 MiB were read)" in check["detail"]


def test_a_report_missing_a_check_it_was_asked_for_is_rejected(engine: Engine, built_images: BuiltImages, planted: Any) -> None:
    # the image's python3 drops one check from whatever the host asks for
    drop = ("import json, sys\nargs = sys.argv\nif '--config' in args:\n"
            "    path = args[args.index('--config') + 1]\n    config = json.load(open(path))\n"
            "    config['checks'] = config['checks'][1:]\n    json.dump(config, open('/tmp/c.json', 'w'))\n"
            "    args[args.index('--config') + 1] = '/tmp/c.json'\n")
    image = planted(with_site(built_images.cpu_base), **{"sitecustomize.py": drop})
    (check,) = incontainer.verify_image(engine, image, QUICK).report.to_json()["checks"]
    assert check["detail"].startswith("the report was rejected: report.checks: missing: versions.torch"), check


# -- the image's own configuration -------------------------------------------------------------


JUPYTER = "jupyter server --ip=0.0.0.0 --port=8888 --allow-root --ServerApp.token= --ServerApp.password="


@pytest.fixture(scope="session")
def jupyter_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """jupyter-server and its dependencies as wheels for the image's Python 3.11 (local index)."""
    folder = tmp_path_factory.mktemp("jupyter-wheels")
    done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "jupyter-server", "-d", str(folder / "w"),
                           "--python-version", "3.11.2", "--only-binary=:all:"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return folder / "w"


@pytest.fixture()
def with_wheels(engine: Engine, tmp_path: Path, jupyter_wheels: Path) -> Iterator[Callable[[str], str]]:
    """Build a Dockerfile whose context holds the jupyter-server wheels (as w/)."""
    import shutil

    made: list[str] = []

    def make(dockerfile: str) -> str:
        folder = tmp_path / uuid.uuid4().hex[:8]
        shutil.copytree(jupyter_wheels, folder / "w")
        made.append(docker_build(engine, dockerfile, f"imagesmith-test/trust:{folder.name}", folder))
        return made[-1]

    yield make
    for tag in made:
        engine.remove_image(tag)


def jupyter_dockerfile(base: str, cmd: str, foreign: bool = True, extra: str = "") -> str:
    labels = 'LABEL io.imagesmith.layer=""\n' if foreign else ""  # a foreign image: not one imagesmith built
    return (f"FROM {base}\nUSER root\nCOPY w /tmp/w\n"
            "RUN /opt/venv/bin/pip install -q --no-index --find-links /tmp/w jupyter-server && rm -rf /tmp/w\n"
            f"{labels}{extra}EXPOSE 8888\nCMD {cmd}\n")


def test_a_root_image_serving_jupyter_without_a_token_fails(engine: Engine, built_images: BuiltImages, with_wheels: Any) -> None:
    image = with_wheels(jupyter_dockerfile(built_images.cpu_base, JUPYTER))
    quick = checks(incontainer.verify_image(engine, image, QUICK))
    assert quick["security.config"]["status"] == "fail"
    assert quick["security.config"]["detail"].startswith(
        "Jupyter runs without authentication (empty token, no password): --ServerApp.token='' (ENTRYPOINT/CMD (sh -c))")
    assert quick["security.user"]["status"] == "warn"  # a foreign image: root warns ...
    strict = checks(incontainer.verify_image(engine, image, verify.VerifyOptions(
        tier="quick", gpus="none", only=("security.user",), require_non_root=True)))
    assert strict["security.user"]["status"] == "fail"  # ... and fails with --require-non-root
    standard = incontainer.verify_image(engine, image, verify.VerifyOptions(tier="standard", gpus="none", only=("security.service",),
                                                                         probe_s=180))  # Jupyter starts slowly on a loaded CI host
    service = checks(standard)["security.service"]
    assert service["status"] == "fail" and "http://127.0.0.1:8888/api/kernels answered" in service["detail"], service
    assert left_containers(engine) == []


def test_a_start_script_that_disables_the_token_is_read(engine: Engine, built_images: BuiltImages, with_wheels: Any) -> None:
    script = "#!/bin/bash\\nexec jupyter server --ip=0.0.0.0 --allow-root --IdentityProvider.token=\\\"\\\" \\\"$@\\\"\\n"
    image = with_wheels(jupyter_dockerfile(built_images.cpu_base, '["--port=8888"]',
                                           extra=f"RUN printf '{script}' > /usr/local/bin/start.sh && chmod 755 /usr/local/bin/start.sh\n"
                                                 'ENTRYPOINT ["start.sh"]\n'))
    config = checks(incontainer.verify_image(engine, image, QUICK))["security.config"]
    assert config["status"] == "fail" and "/usr/local/bin/start.sh" in config["detail"], config


def test_jupyter_with_a_token_passes_the_probe(engine: Engine, built_images: BuiltImages, with_wheels: Any) -> None:
    image = with_wheels(jupyter_dockerfile(built_images.cpu_base, '["jupyter", "server", "--ip=0.0.0.0", "--port=8888"]',
                                           foreign=False, extra="USER 1000\nENV JUPYTER_TOKEN=s3cret-token\n"))
    outcome = incontainer.verify_image(engine, image, verify.VerifyOptions(tier="standard", gpus="none", only=("security",), probe_s=180))
    by_id = checks(outcome)
    assert outcome.ok, [c for c in by_id.values() if c["status"] != "pass"]
    assert by_id["security.service"]["detail"].endswith("listening on 0.0.0.0:8888; no Jupyter API answered without a token")
    assert "s3cret-token" not in json.dumps(outcome.report.to_json())  # ENV values never reach the report


def test_an_empty_jupyter_token_in_env_fails(engine: Engine, built_images: BuiltImages, planted: Any) -> None:
    image = planted(f'FROM {built_images.cpu_base}\nENV JUPYTER_TOKEN=""\nCMD ["jupyter", "lab", "--ip=0.0.0.0"]\n')
    config = checks(incontainer.verify_image(engine, image, QUICK))["security.config"]
    assert config["status"] == "fail" and config["detail"].startswith("ENV JUPYTER_TOKEN is empty and the image starts Jupyter")


def test_sshd_allowing_root_logins_from_its_command_fails(engine: Engine, built_images: BuiltImages, planted: Any) -> None:
    image = planted(f'FROM {built_images.cpu_base}\nEXPOSE 22\nCMD ["/usr/sbin/sshd", "-D", "-o", "PermitRootLogin=yes"]\n')
    config = checks(incontainer.verify_image(engine, image, QUICK))["security.config"]
    assert config["status"] == "fail" and config["detail"].startswith("sshd -o PermitRootLogin=yes allows root logins"), config


# -- --expect --------------------------------------------------------------------------------------


def test_expect_cuda_cpu_passes_on_a_cpu_image(engine: Engine, built_images: BuiltImages) -> None:
    done = cli("verify", built_images.cpu_base, "--gpus", "none", "--only", "versions", "--expect", "cuda=cpu,torch=2.13.0", "-q")
    assert done.returncode == 0, done.stderr
    wrong = checks(incontainer.verify_image(engine, built_images.cpu_base, verify.VerifyOptions(
        gpus="none", only=("versions.cuda",), expect={"cuda": "12.8"})))["versions.cuda"]
    assert wrong["status"] == "fail" and wrong["detail"] == "CUDA (torch.version.cuda) expected 12.8, but torch 2.13.0+cpu is a CPU-only build"


@pytest.mark.parametrize("expect, message", [
    ("torhc=2.13.0", "item 'torhc=2.13.0': unknown name 'torhc'; did you mean 'torch'?"),
    ("torch==2.13.0", "item 'torch==2.13.0': write one '=': torch=2.13.0"),
    ("torch=2.13.0;cuda=12.8", "separate items with commas: torch=2.9.1,cuda=12.8"),
    ("cuda=gpu", "item 'cuda=gpu': 'gpu' is not a CUDA version such as 12.8, or cpu for a CPU-only build"),
])
def test_a_bad_expect_is_bad_usage_before_any_container(engine: Engine, built_images: BuiltImages, expect: str, message: str) -> None:
    since = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "imagesmith.cli", "verify", built_images.cpu_base, "--expect", expect],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 2 and message in stderr and "Invalid value for '--expect'" in stderr, stderr
    assert containers_created(engine, since, proc.pid) == []  # the engine's event log: that process created none


def test_torch_import_warnings_are_reported(engine: Engine, built_images: BuiltImages, planted: Callable[..., str]) -> None:
    """The shipped bases pin numpy (import torch is silent); without it, torch warns at import and verify says what."""
    image = planted(f"FROM {built_images.cpu_base}\nUSER 0\nRUN /opt/venv/bin/pip uninstall -y -q numpy\nUSER 1000\n")
    torch = checks(incontainer.verify_image(engine, image, QUICK))["versions.torch"]
    assert torch["status"] == "warn" and "import torch warned: UserWarning: Failed to initialize NumPy" in torch["detail"]


def test_a_dead_docker_host_is_named(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "imagesmith.cli", "verify", "x"], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "DOCKER_HOST": "tcp://127.0.0.1:9", "HOME": str(tmp_path)})
    assert done.returncode == 1
    assert done.stderr.startswith("error: cannot reach the Docker engine at DOCKER_HOST=tcp://127.0.0.1:9 (Connection refused)")
