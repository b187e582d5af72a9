"""The located validation toolkit matrix.yaml and fleet.yaml share: typed getters, their messages, durations."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import pytest

from imagesmith.model.located import load_located
from imagesmith.model.validation import Ctx, duration_s

DOC = "a: 1\nb: [x]\nc: {d: 2}\n"
SLURM_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


def ctx() -> Ctx:
    _, lines = load_located(DOC, "doc.yaml")
    return Ctx(Path("/nowhere/doc.yaml"), lines)


# (call, the value it returns, the one problem it reports: at the line of its key)
GETTERS: list[tuple[Callable[[Ctx], Any], Any, str | None]] = [
    (lambda c: c.mapping({"a": 1, "bb": 2}, (), ("a", "b")), {"a": 1}, "doc.yaml:1 bb: unknown key; did you mean 'b'?"),
    (lambda c: c.mapping([1], ("b",), ("x",)), {}, "doc.yaml:2 b: expected a mapping, got a list"),
    (lambda c: c.string({"d": 2}, ("c",), "z"), "z", "doc.yaml:3 c: expected a string, got a mapping"),
    (lambda c: c.strings("one", ("a",)), ("one",), None),
    (lambda c: c.strings({"d": 2}, ("c",)), (), "doc.yaml:3 c: expected a list, got a mapping"),
    (lambda c: c.boolean("yes", ("a",), False), False, "doc.yaml:1 a: expected true or false, got 'yes'"),
    (lambda c: c.integer("²", ("a",), 7), 7, "doc.yaml:1 a: expected a whole number, got '²'"),
    (lambda c: c.integer("70000", ("a",), 7, 1, 65535), 70000, "doc.yaml:1 a: 70000 is out of range (1..65535)"),
    (lambda c: c.choice("quik", ("a",), ("quick", "soak"), "quick"), "quick",
     "doc.yaml:1 a: 'quik' is not one of quick, soak; did you mean 'quick'?"),
    (lambda c: c.name("a b", ("a",), SLURM_NAME, "a Slurm name", "letters"), None, "doc.yaml:1 a: 'a b' is not a Slurm name; write letters"),
    (lambda c: c.duration("5 m", ("a",), 60), 60, "doc.yaml:1 a: '5 m' is not a duration; write e.g. 90s, 30m, 1h30m or 2d"),
    (lambda c: c.duration("31d", ("a",), 60), 60, "doc.yaml:1 a: 31d is out of range (1 s .. 30 d)"),
    (lambda c: c.optional(None, ("a",), lambda v: "never"), None, None),
]


@pytest.mark.parametrize("call, value, message", GETTERS)
def test_getters(call: Callable[[Ctx], Any], value: Any, message: str | None) -> None:
    c = ctx()
    assert call(c) == value
    assert [str(p) for p in c.problems] == ([message] if message else [])


@pytest.mark.parametrize("text, seconds", [("90", 90), ("90s", 90), ("30m", 1800), ("1h30m", 5400), ("2d", 172800),
                                           ("1d2h3m4s", 93784), ("", None), ("1.5h", None), ("m", None), ("5 m", None)])
def test_durations(text: str, seconds: int | None) -> None:
    assert duration_s(text) == seconds


def test_a_section_reads_each_key_at_its_path_with_its_getter() -> None:
    c = ctx()
    s = c.section({"a": "x", "b": ["y"], "e": 1}, (), ("a", "b"))
    assert (dict(s), "a" in s, "e" in s, len(s)) == ({"a": "x", "b": ["y"]}, True, False, 2)
    assert (s("a", Ctx.integer, 5), s("b", Ctx.strings), s("c", Ctx.string, "dflt")) == (5, ("y",), "dflt")
    assert [str(p) for p in c.problems] == ["doc.yaml:1 e: unknown key",
                                           "doc.yaml:1 a: expected a whole number, got 'x'"]
