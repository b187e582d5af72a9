"""Control characters from other jobs' files never act where people read: the terminal (tables, progress lines,
error messages), Markdown (release.md, CI summaries), HTML and Prometheus label values. Tables of (input, exact text)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from imagesmith import cli
from imagesmith.inert import inert
from imagesmith.progress import PlainDisplay
from imagesmith.report.markdown import cell
from imagesmith.table import print_table

HOSTILE = [
    ("clear \x1b[2J screen", "clear \\x1b[2J screen", "clear \\x1b[2J screen"),
    ("link \x1b]8;;https://evil.example\x07x\x1b]8;;\x07", "link \\x1b]8;;https://evil.example\\x07x\\x1b]8;;\\x07",
     "link \\x1b]8;;https://evil.example\\x07x\\x1b]8;;\\x07"),
    ("bell\x07", "bell\\x07", "bell\\x07"),
    ("CSI \x9b31m", "CSI \\x9b31m", "CSI \\x9b31m"),
    ("RCE\u202egnp.exe", "RCE\\u202egnp.exe", "RCE\\u202egnp.exe"),
    ("over\rwrite", "over\\x0dwrite", "over\\x0dwrite"),
    ("zero\u200bwidth\ufeff", "zero\\u200bwidth\\ufeff", "zero\\u200bwidth\\ufeff"),
    ("two\nlines\tok", "two\nlines\tok", "two\\x0alines\\x09ok"),
    ("plain text, é and 中文", "plain text, é and 中文", "plain text, é and 中文"),
]


@pytest.mark.parametrize("text, multi, one", HOSTILE, ids=range(len(HOSTILE)))
def test_inert_escapes_every_control_character(text: str, multi: str, one: str) -> None:
    assert (inert(text), inert(text, one_line=True)) == (multi, one)


def test_a_table_shows_control_characters_and_markup_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    print_table("title \x1b[2J", ["a", "b"], [["\x1b]8;;https://evil.example\x07click", "[link=https://evil.example]x[/link] [bold]b"]])
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "title \\x1b[2J" in out and "\\x1b]8;;https://evil.example\\x07click" in out
    assert "[link=https://evil.example]x[/link] [bold]b" in out  # rich's markup, shown as the characters it is


def test_a_progress_line_cannot_move_the_cursor_or_start_a_line_of_its_own() -> None:
    stream = io.StringIO()
    display = PlainDisplay(stream)
    display.update("t\x1b[1A", "failed", "gemm.bf16 \u202e\r12:00:00 t: passed")
    display.note("note \x1b[2K")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "\x1b" not in stream.getvalue() and "\r" not in stream.getvalue()
    assert lines[0].endswith("t\\x1b[1A: failed gemm.bf16 \\u202e\\x0d12:00:00 t: passed (0.0s)")
    assert lines[1].endswith(" note \\x1b[2K")


def test_a_markdown_cell_escapes_control_characters() -> None:
    assert cell("GHSA-x \x1b[2J\u202e") == "GHSA-x \\\\x1b\\[2J\\\\u202e"


def test_an_error_message_quoting_a_file_is_inert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema": "imagesmith.nope/1\x1b[2J\u202e"}))
    with pytest.raises(SystemExit) as info:
        cli.main(["report", str(path)])
    err = capsys.readouterr().err
    assert info.value.code == 1 and "\x1b" not in err and "\u202e" not in err and "imagesmith.nope/1\\x1b[2J\\u202e" in err
