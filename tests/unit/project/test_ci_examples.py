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
from tests.conftest import LOCAL_ROOTS

ROOT = Path(__file__).resolve().parents[3]
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


def child_pipeline_calls() -> list[list[str]]:
    """The imagesmith lines of the child pipeline the GitLab example generates (for examples/local.yaml)."""
    from click.testing import CliRunner

    result = CliRunner().invoke(cli, ["plan", "-m", str(ROOT / "examples" / "local.yaml"), "--format", "gitlab-ci",
                                      "--stage", "harbor.example.com/ml/staging",
                                      *[arg for root in LOCAL_ROOTS for arg in ("--allow-root", str(root))]])
    assert result.exit_code == 0, result.output
    return [args for script in gitlab_scripts(yaml.safe_load(result.output)) for args in imagesmith_calls(script)]


@pytest.mark.parametrize("path", [GITLAB, GITHUB], ids=["gitlab", "github"])
def test_workflow_runs_the_whole_pipeline(path: Path) -> None:
    found = calls(path) + (child_pipeline_calls() if path == GITLAB else [])
    used = {" ".join(args[:1]) for args in found}
    assert {"matrix", "plan", "build", "verify", "report", "publish"} <= used
    formats = {args[args.index("--format") + 1] for args in found if args[:1] == ["report"]}
    assert formats >= {"md", "junit", "html"}
    builds = [args for args in found if args[:1] == ["build"]]
    assert builds and all("--stage" in args and "--only" in args for args in builds)  # per target, through staging
    # the checked-in matrix (never an artifact) cross-checks the artifacts and brings the vulnerability gate: sources.advisories
    assert all("--matrix" in args for args in found if args[:1] == ["publish"])
    # ... but the hosts credentials go to are declared, never read from the artifacts (docs/credentials.md)
    publishes = [args for args in found if args[:1] == ["publish"]]
    assert publishes and all("--registry" in args and "--stage" in args for args in publishes)
    verifies = [args for args in found if args[:1] == ["verify"] and "--build-report" in args]
    assert verifies and all("--stage" in args for args in verifies)


@pytest.mark.parametrize("path", [GITLAB, GITHUB], ids=["gitlab", "github"])
def test_no_same_host_restriction(path: Path) -> None:
    text = path.read_text()
    assert "SAME host" not in text and "same host" not in text.lower()


def test_gitlab_plans_a_child_pipeline_and_runs_it() -> None:
    doc = yaml.safe_load(GITLAB.read_text())
    assert doc["stages"] == ["plan", "images"]
    plan_calls = [args for script in _flatten(doc["plan"]["script"]) for args in imagesmith_calls(script)]
    fmt = [args for args in plan_calls if args[:1] == ["plan"] and "--format" in args]
    assert fmt and fmt[0][fmt[0].index("--format") + 1] == "gitlab-ci" and "--stage" in fmt[0]
    assert "images.yml" in doc["plan"]["artifacts"]["paths"]
    trigger = doc["images"]["trigger"]
    assert trigger["include"] == [{"artifact": "images.yml", "job": "plan"}] and trigger["strategy"] == "depend"


def test_github_builds_by_depth_verifies_on_gpus_publishes_without_an_engine() -> None:
    doc = yaml.safe_load(GITHUB.read_text())
    jobs = doc["jobs"]
    builds = [name for name in jobs if name.startswith("build-")]
    assert builds == ["build-0", "build-1", "build-2", "build-3"]
    assert jobs["build-0"]["needs"] == "plan"
    assert all(jobs[f"build-{d}"]["needs"] == ["plan", f"build-{d - 1}"] for d in (1, 2, 3))
    assert all(jobs[b]["runs-on"] == ["self-hosted", "linux", "docker"] for b in builds)
    assert jobs["verify"]["runs-on"] == GPU_RUNNER and jobs["verify"]["needs"] == ["plan", *builds]
    assert jobs["publish"]["needs"] == ["plan", "verify"] and jobs["publish"]["runs-on"] == ["self-hosted", "linux"]
    runs = [step.get("run", "") for job in jobs.values() for step in job["steps"]]
    assert any("--format md >> \"$GITHUB_STEP_SUMMARY\"" in run for run in runs)
    uploads = [step["with"]["name"] for job in jobs.values() for step in job["steps"] if step.get("uses", "").startswith("actions/upload-artifact@")]
    assert "build-${{ matrix.target }}" in uploads and "verified-${{ matrix.target }}" in uploads
    downloads = [step["with"] for step in jobs["publish"]["steps"] if step.get("uses", "").startswith("actions/download-artifact@")]
    assert downloads == [{"pattern": "verified-*", "path": "build"}]
    for job in jobs.values():  # matrix values reach the shell through env, never pasted into a script
        assert not any("${{ matrix." in step.get("run", "") for step in job["steps"])


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
    ("imagesmith plan --format yaml", ["imagesmith plan: --format 'yaml' is not one of table, json, gitlab-ci, github-matrix"]),
    ("imagesmith plan --format=json --out=x.json", []),
    ("imagesmith plan --format \"$FMT\"", []),
    ("imagesmith matrix validate", ["imagesmith matrix validate: missing argument FILE"]),
    ("imagesmith matrix validate a.yaml b.yaml", ["imagesmith matrix validate: unexpected argument 'b.yaml'"]),
    ("imagesmith build --out", ["imagesmith build: --out needs a value"]),
    ("imagesmith report r.json --format pdf", ["imagesmith report: --format 'pdf' is not one of md, junit, html, prom"]),
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


RECHECK_GITHUB = ROOT / "examples" / "ci" / "recheck-github-actions.yml"
RECHECK_GITLAB = ROOT / "examples" / "ci" / "recheck-gitlab-ci.yml"


@pytest.mark.parametrize("path", [RECHECK_GITHUB, RECHECK_GITLAB], ids=["github", "gitlab"])
def test_the_scheduled_recheck_runs_real_commands(path: Path) -> None:
    """examples/ci/recheck-*: on a schedule only, with publish's lock, a recheck that reads signed evidence and holds
    floating tags back, every imagesmith line a real command with real options."""
    doc = yaml.safe_load(path.read_text())
    scripts = list(github_scripts(doc)) if path == RECHECK_GITHUB else list(gitlab_scripts(doc))
    found = [args for script in scripts for args in imagesmith_calls(script)]
    assert [f"imagesmith {' '.join(a)}  ->  {p}" for a in found for p in problems(a)] == []
    [recheck] = [a for a in found if a[:2] == ["vulns", "recheck"]]
    assert {"--key", "--hold-floating", "--advisories", "--matrix"} <= set(recheck)
    if path == RECHECK_GITHUB:
        assert doc[True]["schedule"] and doc["jobs"]["recheck"]["concurrency"]["group"] == "imagesmith-release"  # YAML 1.1: on is True
    else:
        assert doc["recheck"]["rules"] == [{"if": '$CI_PIPELINE_SOURCE == "schedule"'}]
        assert doc["recheck"]["resource_group"] == "imagesmith-release"
