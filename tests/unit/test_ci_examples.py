"""examples/ci: the pipelines parse, have the shape the docs promise, and every
``imagesmith ...`` line they run names a real command with real options.

Commands and options are read from the click group ``imagesmith.cli.cli``
itself, so a workflow that uses a flag which does not exist fails here.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import click
import pytest
import yaml

from imagesmith.cli import cli

ROOT = Path(__file__).resolve().parents[2]
GITLAB = ROOT / "examples" / "ci" / "gitlab-ci.yml"
GITHUB = ROOT / "examples" / "ci" / "github-actions.yml"
GITLAB_SCRIPT_KEYS = ("before_script", "script", "after_script")
GPU_RUNNER = ["self-hosted", "linux", "gpu"]


@dataclass(frozen=True)
class Spec:
    """What a command accepts: option -> takes a value (and its choices), positional arguments."""

    options: Mapping[str, bool]
    choices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    arguments: tuple[tuple[str, int, bool], ...] = ()  # (name, nargs (-1: any), required)


HELP = {"--help": False, "-h": False}


# -- the click tree -----------------------------------------------------------------------


def spec_of(command: click.Command) -> Spec:
    options: dict[str, bool] = {}
    choices: dict[str, tuple[str, ...]] = {}
    arguments = []
    ctx = click.Context(command)
    for param in command.get_params(ctx):
        if isinstance(param, click.Option):
            for opt in [*param.opts, *param.secondary_opts]:
                options[opt] = not (param.is_flag or param.count)
                if isinstance(param.type, click.Choice):
                    choices[opt] = tuple(str(c) for c in param.type.choices)
        elif isinstance(param, click.Argument):
            arguments.append((str(param.name), param.nargs, param.required))
    return Spec(options, choices, tuple(arguments))


def resolve(words: list[str]) -> tuple[tuple[str, ...], Spec | None, list[str], list[str]]:
    """Walk groups from ``cli``: (command path, its spec, remaining words, problems)."""
    command: click.Command = cli
    path: tuple[str, ...] = ()
    rest = list(words)
    while isinstance(command, click.Group):
        if not rest or rest[0].startswith("-"):
            return path, spec_of(command), rest, []
        name = rest.pop(0)
        sub = command.commands.get(name)
        if sub is None:
            known = ", ".join(sorted(command.commands))
            return path, None, rest, [f"imagesmith {' '.join(path + (name,))}: no such command (has: {known})"]
        command, path = sub, path + (name,)
    return path, spec_of(command), rest, []


def problems(words: list[str]) -> list[str]:
    """Why ``imagesmith <words>`` would not parse (empty: it would)."""
    path, spec, rest, found = resolve(words)
    if spec is None:
        return found
    where = "imagesmith " + " ".join(path)
    positional: list[str] = []
    while rest:
        word = rest.pop(0)
        if not word.startswith("-") or word == "-":
            positional.append(word)
            continue
        name, has_inline, inline = word.partition("=")
        if name not in spec.options:
            return [f"{where}: no option {name}"]
        if not spec.options[name]:
            continue
        if not has_inline and not rest:
            return [f"{where}: {name} needs a value"]
        value = inline if has_inline else rest.pop(0)
        allowed = spec.choices.get(name)
        if allowed and "$" not in value and value not in allowed:
            return [f"{where}: {name} {value!r} is not one of {', '.join(allowed)}"]
    return _check_positional(where, spec, positional)


def _check_positional(where: str, spec: Spec, given: list[str]) -> list[str]:
    unlimited = any(nargs == -1 for _, nargs, _ in spec.arguments)
    most = sum(max(nargs, 0) for _, nargs, _ in spec.arguments)
    least = sum(max(nargs, 1) for _, nargs, required in spec.arguments if required)
    if len(given) < least:
        return [f"{where}: missing argument {spec.arguments[len(given)][0].upper()}"]
    if not unlimited and len(given) > most:
        return [f"{where}: unexpected argument {given[most]!r}"]
    return []


# -- the command lines in a workflow -----------------------------------------------------------

SEPARATORS = {"&&", "||", ";", "|", "(", ")", "&"}


def shell_commands(script: str) -> Iterator[list[str]]:
    """Simple commands of a shell script (continuations joined, ``${{ }}`` neutralised)."""
    script = re.sub(r"\$\{\{.*?\}\}", "GHA_EXPR", script).replace("\\\n", " ")
    for line in script.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
        lexer.whitespace_split, lexer.commenters = True, "#"
        words: list[str] = []
        for token in lexer:
            if token in SEPARATORS:
                yield words
                words = []
            else:
                words.append(token)
        yield words


def imagesmith_calls(script: str) -> Iterator[list[str]]:
    """The arguments of every imagesmith call, up to a redirection."""
    for words in shell_commands(script):
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
            words = words[1:]  # VAR=value prefixes
        if words and Path(words[0]).name == "imagesmith":
            args = words[1:]
            cut = next((i for i, w in enumerate(args) if set(w) <= set("<>&")), len(args))
            if cut and cut < len(args) and args[cut - 1].isdigit():
                cut -= 1  # 2>&1: the file descriptor belongs to the redirection
            yield args[:cut]


def gitlab_scripts(doc: Mapping[str, Any]) -> Iterator[str]:
    for job in doc.values():
        if isinstance(job, dict):
            for key in GITLAB_SCRIPT_KEYS:
                yield from _flatten(job.get(key))


def _flatten(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _flatten(item)


def github_scripts(doc: Mapping[str, Any]) -> Iterator[str]:
    for job in doc["jobs"].values():
        for step in job.get("steps", []):
            if "run" in step:
                yield step["run"]


def calls(path: Path) -> list[list[str]]:
    doc = yaml.safe_load(path.read_text())
    scripts = gitlab_scripts(doc) if path == GITLAB else github_scripts(doc)
    return [args for script in scripts for args in imagesmith_calls(script)]


# -- tests ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [GITLAB, GITHUB], ids=["gitlab", "github"])
def test_every_imagesmith_line_names_real_commands_and_options(path: Path) -> None:
    found = calls(path)
    bad = [f"imagesmith {' '.join(args)}  ->  {p}" for args in found for p in problems(args)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("path", [GITLAB, GITHUB], ids=["gitlab", "github"])
def test_workflow_runs_the_whole_pipeline(path: Path) -> None:
    used = {" ".join(args[:1]) for args in calls(path)}
    assert {"matrix", "doctor", "build", "verify", "report", "publish"} <= used
    formats = {args[args.index("--format") + 1] for args in calls(path) if args[:1] == ["report"]}
    assert formats >= {"md", "junit", "html"}


def test_gitlab_stages_artifacts_and_gate() -> None:
    doc = yaml.safe_load(GITLAB.read_text())
    assert doc["stages"] == ["validate", "build", "verify", "release"]
    assert doc["default"]["tags"] == GPU_RUNNER
    assert "build/report.json" in doc["build"]["artifacts"]["paths"]
    assert doc["build"]["artifacts"]["reports"]["junit"] == "build/junit-build.xml"
    verify = doc["verify"]["artifacts"]
    assert verify["reports"]["junit"] == "build/junit.xml" and "build/report.html" in verify["paths"]
    assert verify["when"] == "always"  # failures keep their reports
    assert doc["release"]["needs"] == ["verify"] and doc["release"]["stage"] == "release"


def test_github_runner_summary_artifacts_and_gate() -> None:
    doc = yaml.safe_load(GITHUB.read_text())
    jobs = doc["jobs"]
    assert all(job["runs-on"] == GPU_RUNNER for job in jobs.values())
    runs = [step.get("run", "") for job in jobs.values() for step in job["steps"]]
    assert any("--format md >> \"$GITHUB_STEP_SUMMARY\"" in run for run in runs)
    uploads = [step for job in jobs.values() for step in job["steps"] if step.get("uses", "").startswith("actions/upload-artifact@")]
    assert any("build/report.html" in step["with"]["path"] for step in uploads)
    assert jobs["release"]["needs"] == "verify" and jobs["verify"]["needs"] == "build"


def find(path: tuple[str, ...]) -> click.Command | None:
    command: click.Command | None = cli
    for name in path:
        command = command.commands.get(name) if isinstance(command, click.Group) else None
    return command



# The checker itself must catch what it is for (so the tests above can fail).
CHECKER = [
    ("imagesmith build --matrix m.yaml --jobs 2", []),
    ("imagesmith build --nope", ["imagesmith build: no option --nope"]),
    ("imagesmith bild --matrix m.yaml", [f"imagesmith bild: no such command (has: {', '.join(sorted(cli.commands))})"]),
    ("imagesmith plan --format yaml", ["imagesmith plan: --format 'yaml' is not one of table, json"]),
    ("imagesmith plan --format=json --out=x.json", []),
    ("imagesmith plan --format \"$FMT\"", []),
    ("imagesmith matrix validate", ["imagesmith matrix validate: missing argument FILE"]),
    ("imagesmith matrix validate a.yaml b.yaml", ["imagesmith matrix validate: unexpected argument 'b.yaml'"]),
    ("imagesmith build --out", ["imagesmith build: --out needs a value"]),
    ("imagesmith report r.json --format pdf", ["imagesmith report: --format 'pdf' is not one of md, junit, html"]),
    ("imagesmith report r.json --format md >> \"$GITHUB_STEP_SUMMARY\"", []),
    ("imagesmith build --out b 2>&1", []),
    ("imagesmith doctor --matrx m.yaml", ["imagesmith doctor: no option --matrx"]),
    ("imagesmith verify --build-report b.json --tier nightly", ["imagesmith verify: --tier 'nightly' is not one of quick, standard, soak"]),
    ("imagesmith verify --build-reprot b.json", ["imagesmith verify: no option --build-reprot"]),
]


@pytest.mark.parametrize("line, expected", CHECKER, ids=[c[0] for c in CHECKER])
def test_checker_catches_bad_lines(line: str, expected: list[str]) -> None:
    (args,) = list(imagesmith_calls(line))
    assert problems(args) == expected


def test_calls_are_found_in_compound_lines() -> None:
    script = 'X=1 imagesmith build --out b || rc=$?\nimagesmith report b/report.json --format md >> "$S" && echo done'
    assert list(imagesmith_calls(script)) == [["build", "--out", "b"], ["report", "b/report.json", "--format", "md"]]
