"""imagesmith.model.loader: (input, exact message) tables for each step, and the schemas against what imagesmith writes."""

from __future__ import annotations

import html as _html
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import UserError, ValidationError
from imagesmith.model import loader, schemas
from imagesmith.model.loader import LoadError
from imagesmith.report.markdown import WORD_JOINER, Code, cell
from tests.conftest import ROOT
from tests.corpus import artifacts as corpus

F = "f.json"

STRICT = [
    (b"", ":1:1: not JSON (Expecting value)"),
    (b'{"a": NaN}', ":1:7: NaN is not JSON (NaN and Infinity are not numbers JSON allows)"),
    (b'{"a": -Infinity}', ":1:7: -Infinity is not JSON (NaN and Infinity are not numbers JSON allows)"),
    (b'{"a": 1e400}', ":1:7: the number '1e400' is too large to be finite"),
    (b'{"a": ' + b"9" * 5000 + b"}", ":1:7: an integer of 5,000 digits (at most 20)"),
    (b'{"a": 1, "a": 2}', ": the key 'a' appears twice in one object (JSON readers disagree on which wins)"),
    (b'{"a": "caf\xe9"}', ": is not UTF-8 text (at line 1 column 11; Latin-1?); save it as UTF-8"),
    ('{"a": 1}'.encode("utf-16"), ": is UTF-16 or UTF-32 text; save it as UTF-8"),
    ('{"a": 1}'.encode("utf-16-le"), ": is UTF-16 or UTF-32 text; save it as UTF-8"),
    (b'\xef\xbb\xbf{"a": 1}', ": starts with a UTF-8 byte-order mark; save it as UTF-8 without a BOM"),
    (b'{"a": 1}\x00', ": holds a NUL byte at line 1 column 9: it is a binary file, not text"),
    (b'{"a": {"b": ["\\ud800"]}}', ": a.b[0]: holds a lone surrogate (\\ud800-\\udfff): not text"),
    (b"[" * 65 + b"]" * 65, ": " + "[0]" * 64 + ": nested deeper than 64 levels"),
    (b"[" * 100_000 + b"]" * 100_000, ": nested deeper than 64 levels"),
    (b'{"a": "\x01"}', ":1:8: not JSON (Invalid control character at)"),
]


@pytest.mark.parametrize("data, message", STRICT, ids=range(len(STRICT)))
def test_strict_json(data: bytes, message: str) -> None:
    with pytest.raises(LoadError) as err:
        loader.parse_json(data, F)
    assert str(err.value) == F + message


def test_what_strict_json_accepts() -> None:
    assert loader.parse_json(b'{"a": [1, -2.5e3, 1e308, "\\u00e9", null, true], "b": {"c": "' + b"x" * 1000 + b'"}}', F)["a"][2] == 1e308
    assert loader.parse_json(b"[" * 64 + b"]" * 64, F) is not None
    assert loader.parse_json(b'{"n": ' + b"9" * 20 + b"}", F) == {"n": 10**20 - 1}


def _bad_build(path: str, value: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(json.dumps(corpus.run_report()))
    node: Any = doc
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return doc


SHAPES = [
    ("schema", "imagesmith.run-report/0", "schema: 'imagesmith.run-report/0' is not 'imagesmith.run-report/1'"),
    ("build.targets", "all", "build.targets: expected array, got 'all'"),
    ("build.targets.0.seconds", 1e308, "build.targets[0].seconds: '1e+308' is out of range (maximum 1000000000000000.0)"),
    ("verify.t.checks.0.status", "pwned", "verify.t.checks[0].status: 'pwned' is not one of 'pass', 'warn', 'fail', 'skip', 'inconclusive'"),
    ("verify.t.checks.1.threshold", "2", "verify.t.checks[1].threshold: expected number or null, got '2'"),
    ("verify.t.summary.ok", "yes", "verify.t.summary.ok: expected boolean, got 'yes'"),
    ("release.targets.0.digest", "sha256:x", "release.targets[0].digest: 'sha256:x' is not of the form ^sha256:[0-9a-f]{64}$"),
    ("release.targets.0", "x", "release.targets[0]: expected object, got 'x'"),
    ("verify.t", {"checks": []}, "verify.t: 'schema' is missing"),
    ("verify.t.image.labels", {"k": "x" * 70000}, "verify.t.image.labels.k: " + repr("x" * 60 + "...") + " is out of range (maxLength 65536)"),
]


@pytest.mark.parametrize("path, value, message", SHAPES, ids=[s[0] for s in SHAPES])
def test_schema_errors_name_the_key_path(path: str, value: Any, message: str) -> None:
    with pytest.raises(LoadError) as err:
        loader.check_schema(_bad_build(path, value), schemas.RUN_REPORT, F, "write it again")
    assert str(err.value) == f"{F}: {message}; write it again"


def test_what_imagesmith_writes_meets_its_schemas() -> None:
    fixtures = ROOT / "tests" / "fixtures" / "reports"
    for name in ("verify-cpu.json", "verify-gpu.json", "run-report.json", "h200x2-standard.json", "build-failed.json"):
        assert loader.load_json_any(fixtures / name)["schema"] in loader.SCHEMA_FILES
    for doc in (corpus.run_report(), corpus.fleet_report(), corpus.build_report(), corpus.release(), corpus.verify_report()):
        loader.check_schema(doc, doc["schema"], F)
    for name in [*loader.SCHEMA_FILES, *loader.INPUT_SCHEMA_FILES]:  # every schema is a valid draft 2020-12 schema, with an $id and the name's file
        assert loader.schema_document(name)["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_files_outside_their_folder_or_not_regular_are_refused(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "secret.json").write_text("{}")
    os.symlink(tmp_path / "secret.json", tmp_path / "in" / "out.json")
    os.symlink("/dev/zero", tmp_path / "in" / "zero.json")
    os.mkfifo(tmp_path / "in" / "fifo.json")
    (tmp_path / "in" / "ok.json").write_text('{"a": 1}')
    os.symlink("ok.json", tmp_path / "in" / "link.json")  # a link inside the folder is fine
    cases = {
        "out.json": f"is a symbolic link to {str(tmp_path / 'secret.json')!r}, outside {tmp_path / 'in'}; "
                    "copy the file itself into the folder instead of linking to it",
        "zero.json": "is a symbolic link to '/dev/zero', outside " + str(tmp_path / "in") +
                     "; copy the file itself into the folder instead of linking to it",
        "fifo.json": "is not a regular file (a folder, FIFO, socket or device); give the file itself",
        "missing.json": "cannot be read (No such file or directory); check the path and that the job that writes it ran",
    }
    for name, message in cases.items():
        with pytest.raises(LoadError) as err:
            loader.read_confined(tmp_path / "in" / name, cap=100)
        assert str(err.value) == f"{tmp_path / 'in' / name}: {message}"
    assert loader.read_confined(tmp_path / "in" / "link.json", cap=100) == b'{"a": 1}'
    with pytest.raises(LoadError, match="outside"):  # a root further up accepts what its own folder would not
        loader.read_confined(tmp_path / "in" / "out.json", root=tmp_path / "in", cap=100)
    assert loader.read_confined(tmp_path / "in" / "out.json", root=tmp_path, cap=100) == b"{}"


def test_the_cap_is_read_and_never_more(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    with path.open("wb") as fh:
        fh.truncate(200 * 1024 * 1024)
    with pytest.raises(LoadError) as err:
        loader.read_confined(path, cap=1024)
    assert str(err.value).endswith(": is 209,715,200 bytes, over the 1,024-byte limit for this kind of file; "
                                   "it is not a file imagesmith wrote; write it again")
    path.write_bytes(b"x" * 1024)
    assert len(loader.read_confined(path, cap=1024)) == 1024


def test_load_json_artifact_and_yaml(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text("[1]")
    with pytest.raises(LoadError, match=r"r.json: \(top\): expected a JSON object, got a list; again$"):
        loader.load_json_artifact(path, schema=None, cap=100, fix="again")
    with pytest.raises(LoadError, match=r"r.json: \(top\): expected object, got a list$"):
        loader.load_json_artifact(path, schema=schemas.RELEASE)
    y = tmp_path / "f.yaml"
    y.write_bytes(b"a: [1, 2]\nb: \xe9\n")
    with pytest.raises(ValidationError, match=r"f.yaml:2:4: is not UTF-8 text"):
        loader.load_yaml(y, cap=100)
    y.write_text("a: [1, 2]\n")
    assert loader.load_yaml(y, cap=100)[0] == {"a": ["1", "2"]}
    assert issubclass(LoadError, UserError)


MARKDOWN = [
    ("[click](https://evil)", f"\\[click\\](https{WORD_JOINER}://evil)"),
    ("![x](https://t/p.png)", f"!\\[x\\](https{WORD_JOINER}://t/p.png)"),
    ("<https://a.b>", f"\\<https{WORD_JOINER}://a.b>"),
    ("<b onclick=x>", "\\<b onclick=x>"),
    ("</script><!-- x --><?php", "\\</script>\\<!-- x -->\\<?php"),
    ("&amp; &#60; &#x3C; &&  a < b > c", "\\&amp; \\&#60; \\&#x3C; &&  a < b > c"),
    ("go to www.evil.com", f"go to www{WORD_JOINER}.evil.com"),
    ("me@evil.com", f"me@{WORD_JOINER}evil.com"),
    ("repo@sha256:abc", "repo@sha256:abc"),
    ("a|b\nc\rd\u2028e", "a\\|b c d e"),
    ("`x` \\", "\\`x\\` \\\\"),
    ("\\<b>", "\\\\\\<b>"),
    ("2.9 (optional)", "2.9 (optional)"),
    (Code("h/r@sha256:ab|`<b>`"), "`h/r@sha256:ab\\|'<b>'`"),
]


@pytest.mark.parametrize("value, expected", MARKDOWN, ids=range(len(MARKDOWN)))
def test_markdown_cells_are_inert(value: Any, expected: str) -> None:
    assert cell(value) == expected


@pytest.mark.parametrize("value", [v for v, _ in MARKDOWN], ids=range(len(MARKDOWN)))
def test_a_markdown_cell_renders_as_the_text_it_was(value: Any) -> None:
    """Read back by a CommonMark renderer with GFM tables (markdown-it-py): one cell, no link, image, tag or entity
    made of the value, and the text shown is the value's own (newlines as spaces, GFM's autolinks broken by an
    invisible word joiner)."""
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark").enable("table").render(f"| h |\n|---|\n| {cell(value)} |\n")
    body = html.split("<tbody>")[1]
    assert body.count("<td>") == 1 and "<a " not in body and "<img" not in body
    shown = re.sub(r"</?(tr|td|tbody|table|code)>|\n", "", body).replace(WORD_JOINER, "")
    want = str(value.value if isinstance(value, Code) else value).replace("`", "'" if isinstance(value, Code) else "`")
    want = re.sub(r"[\r\n\u2028\u2029]", " ", want)
    assert shown == _html.escape(want, quote=False).replace("&quot;", '"')


def test_a_cache_the_loader_refuses_is_no_cache(tmp_path: Path) -> None:
    folder = tmp_path / "out" / "t"
    folder.mkdir(parents=True)
    (tmp_path / "elsewhere.json").write_text('{"image_id": "x", "inventory": {}}')
    cases = {"missing.json": None, "nan.json": b'{"image_id": NaN}', "list.json": b"[1]", "fifo.json": "fifo",
             "out.json": tmp_path / "elsewhere.json", "ok.json": b'{"image_id": "x", "inventory": {"a": 1}}'}
    for name, content in cases.items():
        if isinstance(content, bytes):
            (folder / name).write_bytes(content)
        elif isinstance(content, Path):
            os.symlink(content, folder / name)
        elif content == "fifo":
            os.mkfifo(folder / name)
    assert {name: loader.read_cache(folder / name) for name in cases} == {
        "missing.json": {}, "nan.json": {}, "list.json": {}, "fifo.json": {}, "out.json": {},
        "ok.json": {"image_id": "x", "inventory": {"a": 1}}}


# -- files the operator names (keys, policies, credentials, CDI specs): links followed, regular files only ----------


def _operator_file(tmp_path: Path, kind: str) -> Path:
    if kind == "fifo":
        os.mkfifo(tmp_path / "k.pem")
        return tmp_path / "k.pem"
    if kind == "big":
        with (tmp_path / "k.pem").open("wb") as fh:
            fh.truncate(200 * 1024 * 1024)
        return tmp_path / "k.pem"
    if kind == "folder":
        (tmp_path / "k.pem").mkdir()
        return tmp_path / "k.pem"
    if kind == "link-to-elsewhere":  # a Kubernetes secret mount: a link out of the folder, to a regular file
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "elsewhere" / "k").write_bytes(b"PEM")
        (tmp_path / "mount").mkdir()
        os.symlink(tmp_path / "elsewhere" / "k", tmp_path / "mount" / "k.pem")
        return tmp_path / "mount" / "k.pem"
    return Path({"dev-zero": "/dev/zero", "proc": "/proc/self/status", "sys": "/sys/kernel/mm/transparent_hugepage/enabled",
                 "missing": str(tmp_path / "nope")}[kind])


@pytest.mark.parametrize("kind, message", [
    ("dev-zero", "key /dev/zero: is not a regular file (a folder, FIFO, socket or device); give the file itself"),
    ("fifo", "key {tmp}/k.pem: is not a regular file (a folder, FIFO, socket or device); give the file itself"),
    ("folder", "key {tmp}/k.pem: is not a regular file (a folder, FIFO, socket or device); give the file itself"),
    ("big", "key {tmp}/k.pem: is 209,715,200 bytes, over the 65,536-byte limit for this kind of file; give the file itself"),
    ("proc", "key /proc/self/status: is a file of /proc or /sys, not a file anyone wrote; give the file itself"),
    ("missing", "key {tmp}/nope: cannot be read (No such file or directory); check the path"),
])
def test_an_operator_file_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path: Path, kind: str, message: str) -> None:
    path = _operator_file(tmp_path, kind)
    with pytest.raises(LoadError) as err:
        loader.read_regular(path, cap=loader.KEY_CAP, what="key")
    assert str(err.value) == message.format(tmp=tmp_path)


def test_an_operator_file_may_be_a_link_to_a_regular_file_anywhere(tmp_path: Path) -> None:
    assert loader.read_regular(_operator_file(tmp_path, "link-to-elsewhere"), cap=16) == b"PEM"
    if Path("/sys/kernel/mm/transparent_hugepage/enabled").is_file():
        with pytest.raises(LoadError, match="is a file of /proc or /sys"):
            loader.read_regular(_operator_file(tmp_path, "sys"), cap=loader.KEY_CAP)


@pytest.mark.parametrize("data, message", [
    (b"{", "the line: not JSON (Expecting property name enclosed in double quotes) at line 1 column 2"),
    ('{"a": NaN}', "the line: NaN is not JSON (NaN and Infinity are not numbers JSON allows) at line 1 column 7"),
    ("[" * 100_000, "the line: nested deeper than 64 levels"),
    ('{"a": "\ud800"}', "the line: is not UTF-8 text (at line 1 column 8; Latin-1?); save it as UTF-8"),
    (b" " * (loader.LINE_CAP + 1), f"the line: is {loader.LINE_CAP + 1:,} bytes, over the {loader.LINE_CAP:,}-byte limit"),
])
def test_a_line_a_process_printed_is_read_as_strictly_as_a_file(data: bytes | str, message: str) -> None:
    with pytest.raises(LoadError) as err:
        loader.parse_json_line(data, "the line")
    assert str(err.value) == message
