"""Where torch is when the payload's python3 has none (envsearch.py): environments found on a fake filesystem in
tmp_path, what puts each on PATH, the sentence versions.torch says, bounded reads and a bounded login shell; and the
host's advice (judge.remedy) for each way an image puts an environment on PATH."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

VERIFY = os.path.join(os.path.dirname(__file__), "..", "..", "..", "verify")
sys.path.insert(0, VERIFY)

from imagesmith.stages.verify import entrypoint as entrypoints  # noqa: E402
from imagesmith.stages.verify import judge  # noqa: E402
from imagesmith_payload import envsearch  # noqa: E402


def env_at(prefix: Path, kind: str = "venv", torch: str | None = "2.13.0") -> Path:
    (prefix / "bin").mkdir(parents=True)
    python = prefix / "bin" / "python3"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    if kind == "venv":
        (prefix / "pyvenv.cfg").write_text("home = /usr/bin\n")
    else:
        (prefix / "conda-meta").mkdir()
    site = prefix / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    if torch:
        (site / f"torch-{torch}.dist-info").mkdir()
        (site / f"torch-{torch}.dist-info" / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {torch}\n")
    return prefix


def test_venvs_and_conda_envs_with_torch_are_found_and_others_are_not(tmp_path: Path) -> None:
    env_at(tmp_path / "opt" / "venv")
    env_at(tmp_path / "opt" / "conda", "conda", torch=None)
    env_at(tmp_path / "opt" / "conda" / "envs" / "ml", "conda", torch="2.12.1+cpu")
    env_at(tmp_path / "opt" / "empty", torch=None)
    env_at(tmp_path / "home" / "user" / "proj" / ".venv")
    (tmp_path / "opt" / "notenv" / "bin").mkdir(parents=True)  # no pyvenv.cfg, no conda-meta
    found = envsearch.environments([str(tmp_path / "opt"), str(tmp_path / "home")])
    assert [(f["prefix"].replace(str(tmp_path), ""), f["kind"], f["torch"]) for f in found] == [
        ("/opt/venv", "venv", "2.13.0"), ("/opt/conda/envs/ml", "conda", "2.12.1+cpu"),
        ("/home/user/proj/.venv", "venv", "2.13.0")]
    assert found[0]["python"] == str(tmp_path / "opt" / "venv" / "bin" / "python3")


def test_the_walk_is_bounded_by_depth_folders_and_time(tmp_path: Path) -> None:
    env_at(tmp_path / "a" / "b" / "c" / "d" / "e" / "venv")  # deeper than MAX_DEPTH
    assert envsearch.environments([str(tmp_path)]) == []
    for i in range(50):
        (tmp_path / "wide" / f"d{i:02}").mkdir(parents=True)
    env_at(tmp_path / "wide" / "zz" / "venv")
    assert list(envsearch.walk([str(tmp_path / "wide")], max_dirs=10)) == []  # the cap on folders listed
    assert list(envsearch.walk([str(tmp_path / "wide")], deadline=time.monotonic() - 1)) == []
    assert [p for p, _ in envsearch.walk([str(tmp_path / "wide")])] == [str(tmp_path / "wide" / "zz" / "venv")]


def test_read_small_reads_regular_files_only_and_at_most_the_limit(tmp_path: Path) -> None:
    (tmp_path / "big").write_text("x" * 100_000)
    assert envsearch.read_small(str(tmp_path / "big")) == "x" * envsearch.MAX_BYTES
    os.mkfifo(tmp_path / "fifo")  # no writer: a blocking open would hang here
    assert envsearch.read_small(str(tmp_path / "fifo")) is None
    assert envsearch.read_small(str(tmp_path)) is None and envsearch.read_small("/dev/zero") is None
    assert envsearch.read_small(str(tmp_path / "missing")) is None


def etc_with(tmp_path: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(tmp_path / "etc")


VENV = {"prefix": "/opt/venv", "kind": "venv", "torch": "2.13.0", "python": "/opt/venv/bin/python3"}
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@pytest.mark.parametrize("found, files, env, entrypoint, sentence", [
    (VENV, {"etc/profile.d/venv.sh": "export PATH=/opt/venv/bin:$PATH\n"}, {"PATH": PATH}, [],
     "torch 2.13.0 is installed in /opt/venv, put on PATH only by {etc}/profile.d/venv.sh (login shells)"),
    (VENV, {"etc/profile.d/venv.sh": ". /opt/venv/bin/activate\n"}, {"PATH": PATH}, [],
     "torch 2.13.0 is installed in /opt/venv, put on PATH only by {etc}/profile.d/venv.sh (login shells)"),
    (VENV, {"etc/venv.sh": "PATH=\"/opt/venv/bin:$PATH\"\n"}, {"PATH": PATH, "BASH_ENV": "{etc}/venv.sh"}, [],
     "torch 2.13.0 is installed in /opt/venv, put on PATH only by {etc}/venv.sh (bash, through $BASH_ENV)"),
    (VENV, {"etc/entry.sh": "export PATH=/opt/venv/bin:$PATH\nexec \"$@\"\n"}, {"PATH": PATH}, ["{etc}/entry.sh"],
     "torch 2.13.0 is installed in /opt/venv, put on PATH only by {etc}/entry.sh (the ENTRYPOINT)"),
    (VENV, {"etc/bash.bashrc": "export PATH=/opt/venv/bin:$PATH\n"}, {"PATH": PATH}, [],
     "torch 2.13.0 is installed in /opt/venv, put on PATH only by {etc}/bash.bashrc (interactive bash shells)"),
    (VENV, {"etc/profile.d/other.sh": "export PATH=/opt/venv2/bin:$PATH  # another prefix\n"}, {"PATH": PATH}, [],
     "torch 2.13.0 is installed in /opt/venv, but nothing puts /opt/venv/bin on PATH"),
    (VENV, {}, {"PATH": "/usr/bin:/opt/venv/bin"}, [],
     "torch 2.13.0 is installed in /opt/venv, put on PATH only by ENV PATH (every command, but /usr/bin/python3 comes first)"),
    ({"prefix": "/opt/conda/envs/ml", "kind": "conda", "torch": "2.13.0"},
     {"etc/profile.d/conda.sh": ". /opt/conda/etc/profile.d/conda.sh\nconda activate ml\n"}, {"PATH": PATH}, [],
     "torch 2.13.0 is installed in /opt/conda/envs/ml (conda), put on PATH only by {etc}/profile.d/conda.sh (login shells)"),
])
def test_what_puts_an_environment_on_path_is_named(tmp_path: Path, found: dict[str, str], files: dict[str, str],
                                                   env: dict[str, str], entrypoint: list[str], sentence: str) -> None:
    etc = etc_with(tmp_path, files)
    env = {k: v.format(etc=etc) for k, v in env.items()}
    item = dict(found) | {"on_path": envsearch.put_on_path(found, env, [e.format(etc=etc) for e in entrypoint], "", etc)}
    assert envsearch.where(item) == sentence.format(etc=etc)


def test_the_login_shell_is_asked_which_python3_it_finds_and_killed_when_it_hangs(tmp_path: Path) -> None:
    launcher = tmp_path / "login.sh"
    launcher.write_text('echo "login banner"; echo /opt/venv/bin/python3\n')
    assert envsearch.login_python(str(launcher)) == "/opt/venv/bin/python3"
    launcher.write_text("sleep 30 & wait\n")
    t0 = time.monotonic()
    assert envsearch.login_python(str(launcher), timeout_s=0.5) is None and time.monotonic() - t0 < 5
    assert envsearch.login_python(str(tmp_path / "missing.sh")) is None
    launcher.write_text("echo no python3 here\n")
    assert envsearch.login_python(str(launcher)) is None


def test_a_login_shell_that_finds_it_with_no_file_read_is_named(tmp_path: Path) -> None:
    env_at(tmp_path / "opt" / "venv")
    launcher = tmp_path / "login.sh"
    launcher.write_text(f"echo {tmp_path}/opt/venv/bin/python3\n")
    (found,) = envsearch.search({"PATH": PATH}, [], "", str(launcher), [str(tmp_path / "opt")], str(tmp_path / "etc"))
    assert envsearch.where(found) == (f"torch 2.13.0 is installed in {tmp_path}/opt/venv, put on PATH only by a login "
                                      f"shell (it finds {tmp_path}/opt/venv/bin/python3) (login shells)")


LAUNCH = entrypoints.Launch()
BYPASSED = entrypoints.Launch(("/entry.sh",), through=False, reason="exited 3 when given a command")


@pytest.mark.parametrize("scopes, launch, advice", [
    ([envsearch.LOGIN], LAUNCH, "run with --login-shell or set ENV PATH=/opt/venv/bin:$PATH"),
    ([envsearch.BASH], LAUNCH, "run with --login-shell or set ENV PATH=/opt/venv/bin:$PATH"),
    ([envsearch.LOGIN], entrypoints.Launch(login_shell=True), "set ENV PATH=/opt/venv/bin:$PATH"),
    ([envsearch.ENTRYPOINT], BYPASSED, "run it through the ENTRYPOINT (--through-entrypoint) or set ENV PATH=/opt/venv/bin:$PATH"),
    (["every command, but /usr/bin/python3 comes first"], LAUNCH, "put its bin first in ENV PATH (set ENV PATH=/opt/venv/bin:$PATH)"),
    ([envsearch.INTERACTIVE], LAUNCH, "set ENV PATH=/opt/venv/bin:$PATH (a verify run, like `docker run IMAGE COMMAND`, "
                                      "starts no interactive shell)"),
    ([], LAUNCH, "set ENV PATH=/opt/venv/bin:$PATH"),
])
def test_the_host_says_what_to_do(scopes: list[str], launch: entrypoints.Launch, advice: str) -> None:
    found = VENV | {"on_path": [{"by": "/x", "scope": s} for s in scopes]}
    assert judge.remedy(found, launch) == advice


@pytest.mark.parametrize("history, dropped", [
    ([{"CreatedBy": "/bin/sh -c #(nop)  ENV PATH=/usr/local/bin:/usr/bin:/bin"},
      {"CreatedBy": "/bin/sh -c #(nop)  ENV PATH=/opt/venv/bin:/usr/local/bin:/usr/bin"}], "/opt/venv/bin:/usr/local/bin:/usr/bin"),
    ([{"CreatedBy": "ENV PATH /opt/venv/bin:/usr/bin"}], "/opt/venv/bin:/usr/bin"),  # the old ENV spelling
    ([{"CreatedBy": "/bin/sh -c #(nop)  ENV PATH=/opt/venv2/bin:/usr/bin"}], None),
    ([{"CreatedBy": "/bin/sh -c echo ENV PATHS"}, {"CreatedBy": None}, "not a step"], None),
    ([], None),
])
def test_an_earlier_env_path_that_held_the_environment_is_found(history: list[Any], dropped: str | None) -> None:
    assert judge.parent_path(lambda: history, "/opt/venv") == dropped


def test_a_history_that_cannot_be_read_says_nothing() -> None:
    from imagesmith.errors import EngineError

    def fails() -> list[Any]:
        raise EngineError("reading the history of x: gone")
    assert judge.parent_path(fails, "/opt/venv") is None
    assert judge.remedy(VENV | {"on_path": []}, LAUNCH, "/opt/venv/bin:/usr/bin") == (
        "an earlier build step's ENV PATH=/opt/venv/bin:/usr/bin held it, and a later ENV PATH dropped it: "
        "set ENV PATH=/opt/venv/bin:$PATH")
