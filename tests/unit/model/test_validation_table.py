"""The declarative key table of the validation toolkit: unknown and required keys, defaults, located reads."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from imagesmith.model.located import KeyPath, load_located
from imagesmith.model.validation import Ctx, Derived, Key, Rule, Table, checks

DOC = "s:\n  port: 80\n  nmae: x\n  mode: fast\n"


def ctx() -> Ctx:
    _, lines = load_located(DOC, "doc.yaml")
    return Ctx(Path("/nowhere/doc.yaml"), lines)


def shown(c: Ctx) -> list[str]:
    return [str(p) for p in c.problems]


TABLE = Table("s", (
    Key("name", Ctx.string, required="s needs name: what it is called"),
    Key("port", partial(Ctx.integer, lo=1024, hi=65535), 2222),
    Key("mode", partial(Ctx.choice, choices=("fast", "slow")), "slow"),
    Key("on", Ctx.boolean, Derived(lambda given, values: "port" in given)),
    Key("limit", partial(Ctx.integer, lo=1, hi=9), 5, optional=True),
))


def test_unknown_key_is_reported_with_did_you_mean_like_mapping() -> None:
    c = ctx()
    TABLE.read(c, {"port": 2000, "nmae": "x"}, ("s",))
    expected = ctx()
    expected.mapping({"port": 2000, "nmae": "x"}, ("s",), TABLE.names)
    assert shown(c)[0] == "doc.yaml:3 s.nmae: unknown key; did you mean 'name'?" == shown(expected)[0]


def test_required_missing_is_reported_at_the_section_after_unknown_keys() -> None:
    c = ctx()
    values = TABLE.read(c, {"port": 2000, "nmae": "x"}, ("s",))
    assert shown(c) == ["doc.yaml:3 s.nmae: unknown key; did you mean 'name'?", "doc.yaml:1 s: s needs name: what it is called"]
    assert values["name"] is None


def test_defaults_applied_and_optional_left_none() -> None:
    c = ctx()
    values = TABLE.read(c, {"name": "n"}, ("s",))
    assert values == {"name": "n", "port": 2222, "mode": "slow", "on": False, "limit": None}
    assert c.problems == []


def test_derived_default_sees_the_keys_written() -> None:
    assert TABLE.read(ctx(), {"name": "n", "port": 2000}, ("s",))["on"] is True
    assert TABLE.read(ctx(), {"name": "n", "port": 2000, "on": False}, ("s",))["on"] is False


def test_reader_gets_the_located_path_and_its_errors_land_there() -> None:
    seen: list[KeyPath] = []

    def reader(c: Ctx, raw: Any, path: KeyPath) -> Any:
        seen.append(path)
        return raw

    table = Table("s", (Key("port", reader), Key("mode", reader)))
    assert table.read(ctx(), {"port": 80}, ("s",)) == {"port": 80, "mode": None}
    assert seen == [("s", "port"), ("s", "mode")]
    c = ctx()
    values = TABLE.read(c, {"name": "n", "port": 80, "mode": "fsat"}, ("s",))
    assert shown(c) == ["doc.yaml:2 s.port: 80 is out of range (1024..65535)",
                        "doc.yaml:4 s.mode: 'fsat' is not one of fast, slow; did you mean 'fast'?"]
    assert values["port"] == 80 and values["mode"] == "slow"


def test_rules_and_checks_run_in_their_place() -> None:
    order: list[str] = []
    table = Table("s", (
        Key("name", Ctx.string, check=lambda v: None if v.isalpha() else "letters only"),
        Rule(lambda c, values, path: order.append(f"rule saw {sorted(values)}")),
        Key("mode", Ctx.string),
        checks("mode", lambda v: None if v in ("fast", "slow") else f"{v!r} is not a mode"),
    ))
    c = ctx()
    assert table.read(c, {"name": "a1", "mode": "fsat"}, ("s",)) == {"name": "a1", "mode": "fsat"}
    assert order == ["rule saw ['name']"]
    assert shown(c)[0] == "doc.yaml:1 s.name: letters only"
    assert shown(c) == ["doc.yaml:1 s.name: letters only", "doc.yaml:4 s.mode: 'fsat' is not a mode"]


def test_not_a_mapping_is_reported_once_and_every_key_still_read() -> None:
    c = ctx()
    values = TABLE.read(c, [1], ("s",))
    assert shown(c) == ["doc.yaml:1 s: expected a mapping, got a list", "doc.yaml:1 s: s needs name: what it is called"]
    assert values["port"] == 2222


def test_given_then_values_is_read_in_two_steps() -> None:
    c = ctx()
    given = TABLE.given(c, {"mode": "fast", "prot": 1}, ("s",))
    assert given == {"mode": "fast"}
    assert shown(c) == ["doc.yaml:1 s.prot: unknown key; did you mean 'port'?", "doc.yaml:1 s: s needs name: what it is called"]
    assert TABLE.values(c, given, ("s",)) == {"name": None, "port": 2222, "mode": "fast", "on": False, "limit": None}
    assert len(c.problems) == 2
