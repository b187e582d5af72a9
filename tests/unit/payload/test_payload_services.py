"""security.config's judge (services.py): an image's command, ENV and scripts in,
findings out; every spelling of 'Jupyter without a token' and 'sshd with passwords or root'."""

from __future__ import annotations

import os
import sys

import pytest

VERIFY = os.path.join(os.path.dirname(__file__), "..", "..", "..", "verify")
sys.path.insert(0, VERIFY)

from imagesmith_payload import services  # noqa: E402

FIX = "set a token (docker run -e JUPYTER_TOKEN=...) or a hashed password"
OPEN = "Jupyter runs without authentication (empty token, no password): "


def judged(argv: list[str], env: dict[str, str] | None = None, files: dict[str, str] | None = None) -> list[tuple[str, str]]:
    env = env or {}
    sources = services.sources_of(argv, env) + [services.file_source(p, t) for p, t in (files or {}).items()]
    return services.judge(services.scan(sources, env), env)


@pytest.mark.parametrize("argv, env, findings", [
    (["jupyter", "lab", "--ServerApp.token=", "--ServerApp.password="], {},
     [("fail", f"{OPEN}--ServerApp.token='' (ENTRYPOINT/CMD); {FIX}")]),
    (["jupyter", "notebook", "--NotebookApp.token=''"], {},
     [("fail", f"{OPEN}--NotebookApp.token='' (ENTRYPOINT/CMD); {FIX}")]),
    (["jupyter", "notebook", "--NotebookApp.token", '""'], {},
     [("fail", f"{OPEN}--NotebookApp.token=\"\" (ENTRYPOINT/CMD); {FIX}")]),
    (["/bin/bash", "-o", "pipefail", "-c", "jupyter lab --ip=0.0.0.0 --IdentityProvider.token='' --allow-root"], {},
     [("fail", f"{OPEN}--IdentityProvider.token='' (ENTRYPOINT/CMD (sh -c)); {FIX}")]),
    (["sh", "-ec", "exec jupyter lab --ServerApp.token=$JUPYTER_TOKEN"], {"JUPYTER_TOKEN": ""},
     [("fail", f"{OPEN}--ServerApp.token=$JUPYTER_TOKEN (ENTRYPOINT/CMD (sh -c)); {FIX}")]),
    (["jupyter", "lab"], {"JUPYTER_TOKEN": ""},
     [("fail", "ENV JUPYTER_TOKEN is empty and the image starts Jupyter: a start script passing it on "
               f"(--ServerApp.token=$JUPYTER_TOKEN) runs Jupyter open; {FIX}")]),
    (["python3"], {"JUPYTER_TOKEN": ""},
     [("warn", "ENV JUPYTER_TOKEN is empty: a start script passing it on (--ServerApp.token=$JUPYTER_TOKEN) runs "
               f"Jupyter open; {FIX}")]),
    (["start-notebook.sh"], {"NOTEBOOK_ARGS": "--NotebookApp.token='' --ip=0.0.0.0"},
     [("fail", f"{OPEN}--NotebookApp.token='' (ENV NOTEBOOK_ARGS); {FIX}")]),
    (["jupyter", "lab"], {"JUPYTER_CONFIG": "c.ServerApp.token = ''"},
     [("fail", f"{OPEN}c.ServerApp.token = '' (ENV JUPYTER_CONFIG); {FIX}")]),
    (["/entrypoint.sh", "jupyter lab --NotebookApp.token=''"], {},
     [("fail", f"{OPEN}--NotebookApp.token='' (ENTRYPOINT/CMD (argument)); {FIX}")]),
    (["sh", "-c", "jupyter lab --ServerApp.token=${JUPYTER_TOKEN}"], {},
     [("warn", "Jupyter's token comes from a variable: --ServerApp.token=${JUPYTER_TOKEN} (ENTRYPOINT/CMD (sh -c)): "
               "${JUPYTER_TOKEN} is not set in the image's ENV; Jupyter runs open unless it is set at run time: make "
               "the start script refuse to run without it")]),
    (["/usr/sbin/sshd", "-D", "-o", "PasswordAuthentication=yes"], {},
     [("fail", "sshd -o PasswordAuthentication=yes allows passwords (ENTRYPOINT/CMD); set it to no")]),
    (["/usr/sbin/sshd", "-D", "-oPermitRootLogin yes"], {},
     [("fail", "sshd -o PermitRootLogin yes allows root logins (ENTRYPOINT/CMD); set it to no")]),
    (["code-server", "--bind-addr", "0.0.0.0:8080", "--auth", "none"], {},
     [("fail", "code-server runs without authentication (ENTRYPOINT/CMD): drop --auth none / --without-connection-token")]),
    # with auth: nothing to say
    (["jupyter", "lab", "--ServerApp.token=", "--ServerApp.password=argon2:$abc"], {}, []),
    (["jupyter", "lab", "--ServerApp.token=s3cret"], {"JUPYTER_TOKEN": ""}, []),
    (["jupyter", "lab", "--ServerApp.token=$JUPYTER_TOKEN"], {}, []),  # exec form: a literal (odd) token, not empty
    (["/usr/sbin/sshd", "-D", "-o", "PasswordAuthentication=no"], {}, []),
    (["python3"], {}, []),
    ([], {}, []),
])
def test_the_command_and_env(argv: list[str], env: dict[str, str], findings: list[tuple[str, str]]) -> None:
    assert judged(argv, env) == findings


@pytest.mark.parametrize("path, text, status", [
    ("/usr/local/bin/start.sh", "#!/bin/bash\nexec jupyter lab --ServerApp.token='' \"$@\"\n", "fail"),
    ("/usr/local/bin/start.sh", "#!/bin/bash\n# jupyter lab --ServerApp.token=''\nexec jupyter lab\n", "pass"),
    ("/start.py", "#!/usr/bin/env python3\ncmd = ['jupyter', 'lab', \"--ServerApp.token=''\"]\n", "fail"),
    ("/etc/jupyter/jupyter_server_config.py", "c.ServerApp.token = ''\n", "fail"),
    ("/etc/jupyter/jupyter_server_config.py", "c.ServerApp.token = ''\nc.PasswordIdentityProvider.hashed_password = 'argon2:x'\n", "pass"),
    ("/etc/jupyter/jupyter_server_config.json", '{"ServerApp": {"token": ""}}', "fail"),
    ("/etc/jupyter/jupyter_server_config.json", '{"ServerApp": {"token": "", "password": "argon2:x"}}', "pass"),
    ("/etc/jupyter/jupyter_server_config.json", "{not json", "pass"),
    ("/start.sh", "echo 'PermitRootLogin yes' >> /etc/ssh/sshd_config\n/usr/sbin/sshd -D\n", "fail"),
])
def test_scripts_and_config_files_the_command_names(path: str, text: str, status: str) -> None:
    assert services.verdict(judged([path], {}, {path: text})) == status


@pytest.mark.parametrize("argv, script", [
    (["sh", "-c", "a b"], "a b"),
    (["/bin/bash", "-o", "pipefail", "-c", "a"], "a"),
    (["bash", "-lc", "a"], "a"),
    (["bash", "-e", "-c", "--", "a"], "a"),
    (["bash", "script.sh"], None),
    (["python3", "-c", "a"], None),
    (["sh", "-c"], None),
])
def test_shell_script(argv: list[str], script: str | None) -> None:
    assert services.shell_script(argv) == script


def test_referenced_paths_follow_scripts_and_configs() -> None:
    sources = services.sources_of(["bash", "./start.sh", "--config=/etc/j.py", "--port=8888", "$HOME/x.sh", "https://x/y.sh"], {})
    assert services.referenced_paths(sources) == ["start.sh", "/etc/j.py"]


@pytest.mark.parametrize("text", ["'unterminated", "a \\", "\0\0\0", "$(( 1 +", "x" * 100000, "\"" * 999])
def test_unparseable_shell_never_raises(text: str) -> None:
    judged(["sh", "-c", text], {"X": text}, {"/s.sh": text})
