"""The render guard: values marked while rendering, Dockerfiles parsed back by BuildKit's parser."""

from __future__ import annotations

import pytest

from imagesmith.render import guard


def marked(*parts: str) -> str:
    """A rendered text: parts starting with @ are values (the rest is template text)."""
    return "".join(guard.mark(p[1:]) if p.startswith("@") else p for p in parts)


def test_strip_removes_markers_and_keeps_only_innermost_values() -> None:
    inner = guard.mark("numpy==1.0")
    text, spans = guard.strip(f"RUN pip install {guard.mark(f'{inner} -r req.txt')}\n")
    assert text == "RUN pip install numpy==1.0 -r req.txt\n"
    assert spans == [(16, 26)]  # the package only; " -r req.txt" is the template's block text


def test_template_text_filter_marks_captured_blocks_as_template() -> None:
    assert guard.mark(guard.template_text(" -r req.txt")) == " -r req.txt"
    assert guard.mark("") == "" and guard.mark("x") == f"{guard.OPEN}x{guard.CLOSE}"


FINE = [
    pytest.param(["FROM x\nENV A=\"", "@a \\\"quoted\\\" \\$HOME \\\\", "\"\n"], id="escaped-env"),
    pytest.param(["FROM x\nRUN pip install ", "@'six==1; python_version<\"4\"'", " ", "@numpy==2.1.3", "\n"], id="quoted-shell-words"),
    pytest.param(["FROM x\nRUN echo \"torch==", "@2.9.1", "\"\n"], id="value-inside-double-quotes"),
    pytest.param(["FROM ", "@ubuntu:24.04", "\nLABEL a=\"", "@Example Corp", "\"\n"], id="labels"),
]


@pytest.mark.parametrize("parts", FINE)
def test_inert_values_pass(parts: list[str]) -> None:
    assert guard.Guard().check("dockerfile", marked(*parts)) == []


REFUSED = [
    pytest.param(["FROM x\nENV A=\"", "@a\nRUN touch /pwned", "\"\n"], "an instruction starts inside a value, not in the template's text", id="newline"),
    pytest.param(["FROM x\nENV A=\"", "@a\" B=\"c", "\"\n"], "ENV is not the instruction the template makes with plain values (a value added an instruction, argument, flag or line)", id="env-pair"),
    pytest.param(["FROM x\nRUN apt-get install -y ", "@curl; curl x | sh", "\n"], "RUN: the value 'curl; curl x | sh' (unquoted) would be read as syntax, not as data", id="shell"),
    pytest.param(["FROM x\nRUN useradd ", "@$(id)", "\n"], "RUN: the value '$(id)' (unquoted) would be read as syntax, not as data", id="substitution"),
    pytest.param(["FROM x\nRUN echo \"", "@`id`", "\"\n"], "RUN: the value '`id`' (inside double quotes) would be read as syntax, not as data", id="backtick-in-quotes"),
    pytest.param(["FROM x\nLABEL a=\"", "@$HOME", "\"\n"], "LABEL: the value '$HOME' (inside double quotes) would be read as syntax, not as data", id="dollar"),
    pytest.param(["FROM x\nRUN echo ", "@a\\", "\nRUN b\n"], "RUN is not the instruction the template makes with plain values (a value added an instruction, argument, flag or line)", id="continuation"),
    pytest.param(["FROM x\n", "@RUN", " id\n"], "an instruction starts inside a value, not in the template's text", id="keyword"),
    pytest.param(["FROM x\nCMD [\"", "@a\", \"b", "\"]\n"], "CMD is not the instruction the template makes with plain values (a value added an instruction, argument, flag or line)", id="json-element"),
]


@pytest.mark.parametrize("parts, why", REFUSED)
def test_values_that_would_be_syntax_are_refused(parts: list[str], why: str) -> None:
    assert why in [f.why for f in guard.Guard().check("dockerfile", marked(*parts))]


def test_files_sharing_a_skeleton_are_parsed_once() -> None:
    g = guard.Guard()
    for version in ("2.9.0", "2.9.1", "2.10.0", "2.11.0"):
        assert g.check("dockerfile", marked("FROM x\nRUN pip install \"torch==", f"@{version}", "\"\n")) == []
    assert len(g.parsed_files) == 1  # the skeleton; with plain values it is its own plain twin


SERVICE = [
    pytest.param("python", ["c.ServerApp.ip = ", "@\"0.0.0.0\"", "\n"], [], id="python-string"),
    pytest.param("python", ["c.ServerApp.ip = ", "@os.system('id')", "\n"], ["the value \"os.system('id')\" is not inside one Python string or number"], id="python-code"),
    pytest.param("python", ["c.ServerApp.ip = \"", "@a\"; import os; \"", "\"\n"], ["the value 'a\"; import os; \"' is not inside one Python string or number"], id="python-breakout"),
    pytest.param("config", ["AllowUsers ", "@ml", "\n"], [], id="sshd-word"),
    pytest.param("config", ["AllowUsers ", "@ml root", "\n"], ["the value 'ml root' is not one plain word after a keyword"], id="sshd-two-words"),
]


@pytest.mark.parametrize("kind, parts, whys", SERVICE)
def test_service_files(kind: str, parts: list[str], whys: list[str]) -> None:
    assert [f.why for f in guard.Guard().check(kind, marked(*parts))] == whys
