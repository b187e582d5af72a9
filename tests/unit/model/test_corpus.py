"""The hostile and careless corpus (tests/corpus/matrix/, made by tests/corpus/make_corpus.py).

Each ``refuse-*.yaml`` must end in exit 1 from both ``matrix validate`` and
``render``, with a located message (the file name first) and nothing
rendered. Each ``render-*.yaml`` must render, and every file it makes must
have the structure the templates give a twin matrix whose hostile values
(those holding PWNED) are a plain word: the same Dockerfile instructions,
flags and arguments by BuildKit's parser, the same Python statements in the
Jupyter config, the same sshd_config lines; and each hostile label or env
value must reach the Dockerfile as exactly that data. No input may exit 3.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import stat
from pathlib import Path
from typing import Any

import dockerfile
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagesmith import cli
from imagesmith.model.located import load_located
from tests.conftest import ROOT

CORPUS = ROOT / "tests" / "corpus" / "matrix"
CASES = sorted(CORPUS.glob("*.yaml"))
LOCATED = re.compile(r"^(error: )?(?P<file>[^\s:]+\.yaml)(:\d+(:\d+)?)?( .+?)?: \S")


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        cli.main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    return code, capsys.readouterr().err


def test_the_corpus_is_large_and_mixed() -> None:
    names = [p.name for p in CASES]
    assert len(names) >= 100
    assert sum(n.startswith("render-") for n in names) >= 20 and sum(n.startswith("refuse-") for n in names) >= 100


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_corpus_matrix(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    validate_code, validate_err = run(["matrix", "validate", str(path), "--date", "20261130"], capsys)
    code, err = run(["render", "-m", str(path), "--out", str(out)], capsys)
    assert 3 not in (validate_code, code), validate_err + err
    assert validate_code == code, f"validate exit {validate_code} but render exit {code}: {validate_err}{err}"
    if path.name.startswith("refuse-"):
        assert code == 1, f"rendered: {err}"
        first = err.splitlines()[0] if err else ""
        match = LOCATED.match(first)
        assert match and match.group("file") == path.name, f"not located: {first!r}"
        assert not out.exists() or not any(out.iterdir()), "something was rendered"
        return
    assert code == 0, err
    twin = _twin(path, tmp_path / "twin")
    assert run(["render", "-m", str(twin), "--out", str(tmp_path / "twin-out")], capsys)[0] == 0
    compare(out, tmp_path / "twin-out", _hostile_values(path))


def test_files_that_are_not_regular_are_refused_without_reading(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "fifo.txt"
    os.mkfifo(fifo)
    text = (CORPUS / "render-label-value-space.yaml").read_text().replace("files/req-ok.txt", str(fifo))
    (tmp_path / "m.yaml").write_text(text)
    code, err = run(["matrix", "validate", str(tmp_path / "m.yaml")], capsys)
    assert code == 1 and "fifo.txt is not a regular file" in err
    code, err = run(["matrix", "validate", "/dev/zero"], capsys)
    assert (code, err.strip()) == (1, "error: zero: is not a regular file")


def test_a_matrix_over_the_size_limit_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * 120_000)
    code, err = run(["matrix", "validate", str(big)], capsys)
    assert code == 1 and err.strip() == "error: big.yaml: is 1,200,000 bytes, over the 1,048,576-byte limit"


# -- the twin ------------------------------------------------------------------------------


def _hostile_values(path: Path) -> list[str]:
    data, _ = load_located(path.read_bytes(), path.name)
    return [v for v in _strings(data) if "PWNED" in v]


def _strings(data: Any) -> list[str]:
    if isinstance(data, dict):
        return [s for k, v in data.items() for s in [k, *_strings(v)]]
    if isinstance(data, list):
        return [s for v in data for s in _strings(v)]
    return [data] if isinstance(data, str) else []


def _benign(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _benign(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_benign(v) for v in data]
    return "benign" if isinstance(data, str) and "PWNED" in data else data


def _twin(path: Path, folder: Path) -> Path:
    """The same matrix with hostile values replaced by a plain word, beside a copy of files/."""
    folder.mkdir()
    shutil.copytree(CORPUS / "files", folder / "files", symlinks=True)
    data, _ = load_located(path.read_bytes(), path.name)
    twin = folder / path.name
    twin.write_text(yaml.safe_dump(_benign(data), sort_keys=False))
    return twin


def compare(out: Path, twin: Path, hostile: list[str]) -> None:
    targets = sorted(p.name for p in out.iterdir())
    assert targets == sorted(p.name for p in twin.iterdir())
    seen: list[str] = []
    for target in targets:
        a, b = out / target, twin / target
        assert _files(a) == _files(b), target
        commands = dockerfile.parse_file(str(a / "Dockerfile"))
        assert _shape(commands) == _shape(dockerfile.parse_file(str(b / "Dockerfile"))), f"{target}: instructions differ"
        seen += [v for c in commands if c.cmd in ("ENV", "LABEL") for v in map(unquote, c.value[1::2])]
        if (a / "services" / "jupyter_server_config.py").exists():
            assert _python_shape(a / "services" / "jupyter_server_config.py") == _python_shape(b / "services" / "jupyter_server_config.py")
        if (a / "services" / "sshd_config").exists():
            assert _words(a / "services" / "sshd_config") == _words(b / "services" / "sshd_config")
    for value in hostile:
        assert value in seen, f"{value!r} did not reach the Dockerfile as one ENV or LABEL value"


def _files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): stat.S_IMODE(p.lstat().st_mode) for p in folder.rglob("*") if not p.is_dir()}


def _shape(commands: tuple[dockerfile.Command, ...]) -> list[tuple[Any, ...]]:
    return [(c.cmd, c.json, c.flags and len(c.flags), len(c.value), c.start_line, c.end_line, c.heredocs) for c in commands]


def unquote(word: str) -> str:
    """A Dockerfile word as BuildKit reads a double-quoted value: \\\\, \\" and \\$ are escapes."""
    if not (word.startswith('"') and word.endswith('"')):
        return word
    return re.sub(r'\\([\\"$])', r"\1", word[1:-1])


def _python_shape(path: Path) -> list[str]:
    return [type(node).__name__ for node in ast.walk(ast.parse(path.read_text()))]


def _words(path: Path) -> list[tuple[str, int]]:
    return [(line.split()[0], len(line.split())) for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.randoms(use_true_random=False))
def test_mutated_matrices_render_or_fail_with_a_user_error(tmp_path_factory: pytest.TempPathFactory, rng: Any) -> None:
    from imagesmith.model import compat
    from tests.corpus import fuzz

    path = fuzz.prepare(tmp_path_factory.getbasetemp() / "fuzz")
    fuzz.attempt(path, fuzz.mutant(rng), compat.load())  # a bug raises here
