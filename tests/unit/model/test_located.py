"""The YAML loader: (input, exact message) tables, merge keys, bounds, and a fuzz run."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagesmith.errors import ValidationError
from imagesmith.model import located
from imagesmith.model.located import load_located


def message(data: str | bytes) -> str:
    with pytest.raises(ValidationError) as info:
        load_located(data, "m.yaml")
    return str(info.value)


REFUSED = [
    pytest.param("matrix: 1\nmatrix: 2\n", "m.yaml:2 matrix: duplicate key (first at line 1); keep one: YAML would silently use the last", id="duplicate"),
    pytest.param("a: {b: 1, b: 2}\n", "m.yaml:1 a.b: duplicate key (first at line 1); keep one: YAML would silently use the last", id="duplicate-nested"),
    pytest.param("x: !!python/object/apply:os.system [id]\n",
                 "m.yaml:1 x: the tag '!!python/object/apply:os.system' is not allowed; write plain YAML (strings, numbers, true/false, lists, mappings)", id="python-tag"),
    pytest.param("x: !pwn y\n", "m.yaml:1 x: the tag '!pwn' is not allowed; write plain YAML (strings, numbers, true/false, lists, mappings)", id="custom-tag"),
    pytest.param("x: !!binary aGk=\n", "m.yaml:1 x: the tag '!!binary' is not allowed; write plain YAML (strings, numbers, true/false, lists, mappings)", id="binary-tag"),
    pytest.param("x: !!set {a}\n", "m.yaml:1 x: the tag '!!set' is not allowed; write plain YAML (strings, numbers, true/false, lists, mappings)", id="set"),
    pytest.param(b"x: 1\x00\x01", "m.yaml:1:5: holds NUL bytes: it is a binary file, not text", id="binary"),
    pytest.param("x: 1\n".encode("utf-16"), "m.yaml: is UTF-16 or UTF-32 text; save it as UTF-8", id="utf-16"),
    pytest.param("x: 1\n".encode("utf-16-le"), "m.yaml: is UTF-16 or UTF-32 text; save it as UTF-8", id="utf-16-no-bom"),
    pytest.param("x: caf\xe9\n".encode("latin-1"), "m.yaml:1:7: is not UTF-8 text; save it as UTF-8", id="latin-1"),
    pytest.param("x: a\x1b[2Jb\n", "m.yaml:1:5: holds control character U+001B; remove it", id="raw-escape"),
    pytest.param("x: a\u202eb\n", "m.yaml:1:5: holds control character U+202E; remove it", id="raw-bidi"),
    pytest.param('x: "a\\nRUN b"\n', "m.yaml:1 x: holds control character U+000A; remove it (escapes such as \\n or \\t are not allowed in values)", id="escaped-newline"),
    pytest.param('x: "a\\u2028b"\n', "m.yaml:1 x: holds control character U+2028; remove it (escapes such as \\n or \\t are not allowed in values)", id="escaped-separator"),
    pytest.param('"a\\tb": 1\n', "m.yaml:1: a key holds control character U+0009; remove it", id="key-control"),
    pytest.param("? [a]\n: 1\n", "m.yaml:1: a key must be a plain word, not a list, mapping or tagged value", id="complex-key"),
    pytest.param("a: &a [*a]\n", "m.yaml:1 a[0]: an alias (*name) refers to a node that contains it; write the value out", id="recursive-alias"),
    pytest.param("a: &a {<<: *a}\n", "m.yaml:1 a: << merges mappings only (<<: *name or <<: [*a, *b]), not itself", id="merge-self"),
    pytest.param("a: *nope\n", "m.yaml:1:4: invalid YAML: found undefined alias", id="undefined-alias"),
    pytest.param("x: " + "[" * 65 + "]" * 65, "m.yaml:1:67: nested deeper than 64 levels; a matrix is far smaller and flatter", id="nesting"),
    pytest.param("x: " + "[" * 5000 + "]" * 5000, "m.yaml:1:1003: invalid YAML: exceeded maximum nesting depth", id="nesting-5000"),
    pytest.param("a: 1\n---\nb: 2\n", "m.yaml:2:1: invalid YAML: but found another document", id="two-documents"),
    pytest.param("x: !!bool maybe\n", "m.yaml:1 x: 'maybe' is not true or false", id="bad-bool"),
    pytest.param("[" + "1," * 70_000 + "1]", "m.yaml:1:131068: more than 65,536 YAML values; a matrix is far smaller and flatter", id="too-many-values"),
]


@pytest.mark.parametrize("data, expected", REFUSED)
def test_refused_with_a_located_message(data: str | bytes, expected: str) -> None:
    assert message(data) == expected


def test_a_binary_file_is_never_echoed() -> None:
    secret = b"\x00SECRET-CONTENT\xff" * 50
    assert "SECRET" not in message(secret)


def test_merge_keys_explicit_keys_win_and_lines_point_at_the_anchor() -> None:
    data, lines = load_located("base: &b {a: 1, b: 2}\nx:\n  <<: *b\n  b: 3\n", "m.yaml")
    assert data["x"] == {"b": "3", "a": "1"}
    assert (lines[("x", "a")], lines[("x", "b")]) == (1, 4)


def test_merge_key_lists_earlier_sources_win() -> None:
    data, _ = load_located("a: &a {k: 1}\nb: &b {k: 2, j: 3}\nc: {<<: [*a, *b]}\n", "m.yaml")
    assert data["c"] == {"k": "1", "j": "3"}


def test_versions_stay_text_and_a_utf8_bom_is_accepted() -> None:
    data, _ = load_located("\ufeffpython: [3.10, 3.1]\nok: yes\nnone: ~\nwhen: 2024-01-01\n".encode(), "m.yaml")
    assert data == {"python": ["3.10", "3.1"], "ok": True, "none": None, "when": "2024-01-01"}


def billion_laughs(levels: int = 10) -> str:
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    return text + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(levels - 1))


def test_an_alias_bomb_stops_after_a_bounded_number_of_values_and_little_memory() -> None:
    tracemalloc.start()
    try:
        msg = message(billion_laughs())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f"more than {located.MAX_VALUES:,} values once aliases (*name) are expanded" in msg
    assert peak < 100 * 2**20  # measured: about 9 MB


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400) | st.text(max_size=400).map(str.encode))
def test_any_bytes_load_or_fail_with_a_validation_error(data: bytes) -> None:
    try:
        load_located(data, "m.yaml")
    except ValidationError as exc:
        assert all(str(p).startswith("m.yaml") for p in exc.problems)


YAMLISH = st.recursive(
    st.sampled_from(["a", "1", "3.10", "~", "yes", '"\\n"', "'x'", "*a", "&a b", "!t x", "<<", "[]", "{}", ": ", "- ", "\n", "  ", "#"]),
    lambda inner: st.lists(inner, max_size=6).map("".join), max_leaves=40)


@settings(max_examples=300, deadline=None)
@given(YAMLISH)
def test_yaml_shaped_text_loads_or_fails_with_a_validation_error(text: str) -> None:
    try:
        load_located(text, "m.yaml")
    except ValidationError:
        pass
