"""imagesmith.model.fields: the reader kit. (read, exact message) tables: a bad value at a nested key path is a
LoadError naming the file, the path, what was expected and what was found, in the reader's own words."""

from __future__ import annotations

import re
from typing import Any, Callable

import pytest

from imagesmith.errors import UserError
from imagesmith.model import fields
from imagesmith.model.fields import Fields, Wording
from imagesmith.model.loader import LoadError

DOC: dict[str, Any] = {
    "checks": [{"id": "gemm", "threshold": "784", "title": ["x"], "value": True, "n": 3}, "oops"],
    "cells": [{"restarts": "1", "requires": ["a", 1], "figures": {}, "ok": 2.5}],
    "release": {"date": "2024-01-01", "size": None},
}
CHECK, CELL, RELEASE = DOC["checks"][0], DOC["cells"][0], DOC["release"]
TYPED = Wording(kind=fields.type_name, not_number="expected a number, got {kind}")
SAID = Wording(kind=fields.type_name, not_number="{value!r} is not a number")

BAD: list[tuple[Wording, str, Callable[[Fields], Any], str]] = [
    (fields.WORDS, "", lambda r: r.number(CHECK, "threshold", "report.checks[0]"),
     "r.json: report.checks[0].threshold: expected a number, got '784'"),
    (fields.WORDS, "", lambda r: r.number(CHECK, "value", "report.checks[0]"),
     "r.json: report.checks[0].value: expected a number, got True"),
    (fields.WORDS, "", lambda r: r.text(CHECK, "title", "report.checks[0]"),
     "r.json: report.checks[0].title: expected text, got a list"),
    (fields.WORDS, "", lambda r: r.mapping(DOC["checks"][1], "report.checks[1]"),
     "r.json: report.checks[1]: expected an object, got text"),
    (fields.WORDS, "", lambda r: r.items(CHECK, "report.checks"), "r.json: report.checks: expected a list, got an object"),
    (fields.WORDS, "fix it", lambda r: r.mapping(None, "report.image"), "r.json: report.image: expected an object, got null; fix it"),
    (TYPED, "write it again", lambda r: r.typed(CELL, "restarts", int, "cells[0]"),
     "r.json: cells[0].restarts: expected int, got str; write it again"),
    (TYPED, "", lambda r: r.typed(CELL, "figures", list, "cells[0]"), "r.json: cells[0].figures: expected list, got dict"),
    (TYPED, "", lambda r: r.typed(CHECK, "value", (int, float), "checks[0]"), "r.json: checks[0].value: expected a number, got bool"),
    (TYPED, "", lambda r: r.strings(CELL, "requires", "cells[0]"), "r.json: cells[0].requires[1]: expected a string, got int"),
    (TYPED, "", lambda r: r.number(CHECK, "threshold", "checks[0]"), "r.json: checks[0].threshold: expected a number, got str"),
    (TYPED, "", lambda r: r.mapping([], "cells[0]"), "r.json: cells[0]: expected an object, got list"),
    (SAID, "not ours", lambda r: r.valid(RELEASE, "date", "release", re.compile(r"[0-9]{8}")),
     "r.json: release.date: '2024-01-01' is not a valid value; not ours"),
    (SAID, "", lambda r: r.valid(RELEASE, "matrix", "release"), "r.json: release.matrix: None is not a valid value"),
    (SAID, "", lambda r: r.amount(RELEASE, "size", "release"), "r.json: release.size: None is not a number"),
    (SAID, "", lambda r: r.amount(CELL, "restarts", "cells[0]"), "r.json: cells[0].restarts: '1' is not a number"),
    (fields.WORDS, "", lambda r: r.obj(CELL, "requires", "cells[0]"), "r.json: cells[0].requires: expected an object, got a list"),
    (fields.WORDS, "", lambda r: r.listed(CELL, "figures", "cells[0]"), "r.json: cells[0].figures: expected a list, got an object"),
    (fields.WORDS, "", lambda r: r.string(CELL["requires"][1], "cells[0].requires[1]"), "r.json: cells[0].requires[1]: expected text, got int"),
    (fields.WORDS, "", lambda r: r.maybe_text(CHECK, "n", "checks[0]"), "r.json: checks[0].n: expected text or null, got int"),
    (fields.WORDS, "", lambda r: r.choice(RELEASE, "date", "release", ("today",)), "r.json: release.date: expected one of today, got '2024-01-01'"),
    (fields.WORDS, "", lambda r: r.whole(CELL, "ok", "cells[0]"), "r.json: cells[0].ok: expected a whole number or null, got float"),
    (fields.WORDS, "", lambda r: r.whole(CHECK, "value", "checks[0]"), "r.json: checks[0].value: expected a whole number or null, got bool"),
    (fields.WORDS, "", lambda r: r.count(RELEASE, "size", "release"), "r.json: release.size: expected a count (a whole number, 0 or more), got None"),
    (fields.WORDS, "", lambda r: r.flag(CELL, "ok", "cells[0]"), "r.json: cells[0].ok: expected true or false, got 2.5"),
    (fields.WORDS, "", lambda r: r.figure(CHECK, "threshold", "checks[0]"), "r.json: checks[0].threshold: expected a number, got '784'"),
]


@pytest.mark.parametrize("wording, fix, read, message", BAD)
def test_a_bad_value_names_the_file_the_key_path_and_what_was_found(wording: Wording, fix: str,
                                                                    read: Callable[[Fields], Any], message: str) -> None:
    with pytest.raises(LoadError) as err:
        read(Fields("r.json", fix, wording))
    assert str(err.value) == message
    assert isinstance(err.value, UserError)  # exit 1, one line


GOOD: list[tuple[Callable[[Fields], Any], Any]] = [
    (lambda r: r.number(CHECK, "n", "c"), 3.0),
    (lambda r: r.number(CHECK, "absent", "c"), None),
    (lambda r: r.amount(CHECK, "n", "c"), 3),
    (lambda r: r.amount(CHECK, "absent", "c", 7), 7),
    (lambda r: r.text(CHECK, "n", "c"), "3"),
    (lambda r: r.text(CHECK, "absent", "c", "-"), "-"),
    (lambda r: r.items(None, "c"), []),
    (lambda r: r.valid(RELEASE, "size", "release", optional=True), None),
    (lambda r: r.valid(RELEASE, "date", "release"), "2024-01-01"),
    (lambda r: r.typed(CELL, "ok", (int, float), "c"), 2.5),
    (lambda r: r.typed(CELL, "absent", str, "c"), None),
    (lambda r: r.typed(CELL, "absent", str, "c", "quick"), "quick"),
    (lambda r: r.strings(CELL, "absent", "c"), []),
    (lambda r: r.obj(RELEASE, "size", "release"), None),
    (lambda r: r.listed(RELEASE, "size", "release"), []),
    (lambda r: r.maybe_text(RELEASE, "size", "release"), None),
    (lambda r: r.scalar(CHECK, "n", "c"), "3"),
    (lambda r: r.figure(CHECK, "n", "c"), 3),
    (lambda r: r.whole(RELEASE, "size", "release"), None),
    (lambda r: r.count(CHECK, "n", "c"), 3),
    (lambda r: r.flag(RELEASE, "size", "release"), False),
    (lambda r: r.choice(RELEASE, "date", "release", ("2024-01-01",)), "2024-01-01"),
]


@pytest.mark.parametrize("read, value", GOOD)
def test_a_good_value_is_read_as_its_type(read: Callable[[Fields], Any], value: Any) -> None:
    got = read(Fields("r.json"))
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("where, key, path", [("report", "checks", "report.checks"), ("report.checks", 4, "report.checks[4]"),
                                              ("", "cells", "cells"), ("verify.a-b", "image", "verify.a-b.image")])
def test_key_paths_join_as_readers_write_them(where: str, key: str | int, path: str) -> None:
    assert Fields.at(where, key) == path
