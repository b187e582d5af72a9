"""The located validation toolkit that matrix.yaml and fleet.yaml share (pure).

A :class:`Ctx` walks one YAML document loaded by :mod:`imagesmith.model.located`:
its typed getters take the raw value and its key path, return a typed value (or
the default), and record every problem with ``file:line key.path`` so that all
errors of a file are reported together. What a value must look like beyond its
type is :mod:`imagesmith.model.grammar`'s (one check per thing a value becomes);
what each section holds is the caller's (``matrix.sections``, ``model.fleet``).

A section whose keys are plain reads is declared as a :class:`Table`, in the spirit of pre-commit's
cfgv schemas (``Map('Name', 'id', Required(...), Optional(...))``): one :class:`Key` per key, with its
getter, default and whether it is required, in the order it is read; a :class:`Rule` checks across keys
at its place in that order, and a :class:`Derived` default is computed from the keys before it (cfgv's
conditional keys). ``TABLE.read(ctx, raw, path)`` reports unknown keys (with a did-you-mean) and missing
required ones, then reads each key at ``path.key`` and returns the values by name. Logic that is
genuinely across keys (which records to build, which keys to skip) stays code after the read.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Concatenate, Generic, Iterable, Iterator, Mapping, ParamSpec, Sequence, TypeVar

from imagesmith.errors import Problem
from imagesmith.model import grammar
from imagesmith.model.located import KeyPath, Lines, dotted, line_of, printable
from imagesmith.model.paths import PathProblem, Roots, confined, read_text

P = ParamSpec("P")
T = TypeVar("T")
C = TypeVar("C", bound="Ctx")
DURATION = re.compile(r"(?:([0-9]{1,9})d)?(?:([0-9]{1,9})h)?(?:([0-9]{1,9})m)?(?:([0-9]{1,9})s)?")  # ASCII digits, bounded


class Ctx:
    """Collects the located problems of one file; typed getters for its values."""

    def __init__(self, file: Path, lines: Lines, roots: Roots | None = None) -> None:
        self.file, self.lines = file, lines
        self.problems: list[Problem] = []
        self.base_dir = file.parent
        self.roots = roots or Roots.of(file)

    def _add(self, path: KeyPath, message: str, severity: str) -> None:
        line = line_of(self.lines, path)
        problem = Problem(message, self.file.name, line, dotted(path), severity)
        if problem not in self.problems:
            self.problems.append(problem)

    def error(self, path: KeyPath, message: str) -> None:
        self._add(path, message, "error")

    def warn(self, path: KeyPath, message: str) -> None:
        self._add(path, message, "warning")

    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    # -- typed getters -------------------------------------------------
    def mapping(self, raw: Any, path: KeyPath, allowed: Iterable[str]) -> dict[str, Any]:
        """``raw`` as a mapping with only ``allowed`` keys (others reported)."""
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.error(path, f"expected a mapping, got {kind(raw)}")
            return {}
        allowed = list(allowed)
        for key in raw:
            if key not in allowed:
                self.error(path + (key,), f"unknown key{did_you_mean(key, allowed)}")
        return {k: v for k, v in raw.items() if k in allowed}

    def section(self: C, raw: Any, path: KeyPath, keys: Iterable[str]) -> Section[C]:
        """:meth:`mapping` as a :class:`Section`: each key then read by name with its getter."""
        return Section(self, self.mapping(raw, path, keys), path)

    def open_mapping(self, raw: Any, path: KeyPath) -> dict[str, Any]:
        """A mapping whose keys are the user's own (layer names, env vars)."""
        return self.mapping(raw, path, raw.keys() if isinstance(raw, dict) else ())

    def string(self, raw: Any, path: KeyPath, default: str | None = None) -> str | None:
        if raw is None:
            return default
        if isinstance(raw, (dict, list, bool)):
            self.error(path, f"expected a string, got {kind(raw)}")
            return default
        return str(raw)

    def text(self, raw: Any, path: KeyPath, default: str) -> str:
        """:meth:`string`, whose default also stands for an empty one."""
        return self.string(raw, path, default) or default

    def entries(self, raw: Any, path: KeyPath, what: str) -> list[Any]:
        """A list of entries, each for the caller to read; absent: none; anything else is reported as not a list
        of ``what`` (none)."""
        if raw is None:
            return []
        if not isinstance(raw, list):
            self.error(path, f"expected a list of {what}, got {kind(raw)}")
            return []
        return raw

    def strings(self, raw: Any, path: KeyPath) -> tuple[str, ...]:
        """A list of strings; a single string is taken as a list of one."""
        if raw is None:
            return ()
        if isinstance(raw, (str, int, float)) and not isinstance(raw, bool):
            return (str(raw),)
        if not isinstance(raw, list):
            self.error(path, f"expected a list, got {kind(raw)}")
            return ()
        items = [self.string(v, path + (i,)) for i, v in enumerate(raw)]
        return tuple(i for i in items if i is not None)

    def boolean(self, raw: Any, path: KeyPath, default: bool) -> bool:
        if raw is None:
            return default
        if not isinstance(raw, bool):
            self.error(path, f"expected true or false, got {raw!r}")
            return default
        return raw

    def integer(self, raw: Any, path: KeyPath, default: int, lo: int = 0, hi: int = 2**31) -> int:
        if raw is None:
            return default
        text = str(raw)
        if not re.fullmatch("[+-]?[0-9]{1,18}", text):  # ASCII digits only ("²" and "٣" are digits to int()), bounded
            self.error(path, f"expected a whole number, got {printable(text, 40)}")
            return default
        try:
            value = int(text)
        except ValueError:
            self.error(path, f"expected a whole number, got {printable(text, 40)}")
            return default
        if not lo <= value <= hi:
            self.error(path, f"{value} is out of range ({lo}..{hi})")
        return value

    def choice(self, raw: Any, path: KeyPath, choices: Sequence[str], default: str) -> str:
        value = self.string(raw, path, default) or default
        if value not in choices:
            self.error(path, f"{value!r} is not one of {', '.join(choices)}{did_you_mean(value, choices)}")
            return default
        return value

    def checked(self, value: str, path: KeyPath, check: grammar.Check) -> str:
        """``value`` checked against its grammar; an error (with the fix) if it fails."""
        why = check(value)
        if why:
            self.error(path, why)
        return value

    def checked_strings(self, raw: Any, path: KeyPath, check: grammar.Check) -> tuple[str, ...]:
        return tuple(self.checked(v, path + (i,), check) for i, v in enumerate(self.strings(raw, path)))

    def optional(self, raw: Any, path: KeyPath, check: grammar.Check) -> str | None:
        """A string checked against its grammar when given; None when absent."""
        text = self.string(raw, path)
        return None if text is None else self.checked(text, path, check)

    def name(self, raw: Any, path: KeyPath, pattern: re.Pattern[str], what: str, write: str,
             default: str | None = None) -> str | None:
        """A string that must match ``pattern`` whole; the default (and ``is not {what}; write {write}``) otherwise."""
        value = self.string(raw, path, default)
        if value is not None and not pattern.fullmatch(value):
            self.error(path, f"{value!r} is not {what}; write {write}")
            return default
        return value

    def duration(self, raw: Any, path: KeyPath, default: int, lo: int = 1, hi: int = 30 * 86400) -> int:
        """``90``, ``90s``, ``30m``, ``1h30m``, ``2d`` as seconds in ``lo..hi``."""
        text = self.string(raw, path)
        if text is None:
            return default
        seconds = duration_s(text.strip())
        if seconds is None:
            self.error(path, f"{printable(text, 40)} is not a duration; write e.g. 90s, 30m, 1h30m or 2d")
            return default
        if not lo <= seconds <= hi:
            self.error(path, f"{text} is out of range ({lo} s .. {hi // 86400} d)")
            return default
        return seconds

    def local_file(self, raw: Any, path: KeyPath, limit: int) -> tuple[Path, bytes, str] | None:
        """A file named in the document: inside the roots, regular, bounded, UTF-8."""
        text = self.string(raw, path)
        if text is None:
            return None
        try:
            found = confined(self.roots, text)
            return (found, *read_text(found, text, limit))
        except PathProblem as exc:
            self.error(path, str(exc))
            return None

    def local_folder(self, text: str, path: KeyPath) -> None:
        try:
            confined(self.roots, text, kind="folder")
        except PathProblem as exc:
            self.error(path, str(exc))


class Section(Mapping[str, Any], Generic[C]):
    """A section's known keys and where it was written. ``s("port", Ctx.integer, 2222, 1, 65535)`` reads key
    ``port`` at ``path.port`` with a getter of the toolkit, or of the section's own (``_sshd(ctx, raw, path)``):
    every getter takes (ctx, raw value, key path, ...); an absent key is None to it (its default)."""

    def __init__(self, ctx: C, given: dict[str, Any], path: KeyPath) -> None:
        self.ctx, self.given, self.path = ctx, given, path

    def __call__(self, key: str, getter: Callable[Concatenate[C, Any, KeyPath, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        return getter(self.ctx, self.given.get(key), self.path + (key,), *args, **kwargs)

    def __getitem__(self, key: str) -> Any:
        return self.given[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.given)

    def __len__(self) -> int:
        return len(self.given)


# -- a section's keys as a table -------------------------------------------------------

MISSING: Any = object()  # a Key without a default: its getter's own


@dataclass(frozen=True)
class Derived:
    """A default that depends on the section (cfgv's conditional keys): ``fn(given, values)``, with the
    keys written (known ones, raw) and the values of the keys read before this one."""

    fn: Callable[[Mapping[str, Any], Mapping[str, Any]], Any]


@dataclass(frozen=True)
class Key:
    """One key of a :class:`Table`: ``read(ctx, raw, path.name[, default=...])``, a getter of :class:`Ctx`
    (``functools.partial`` binds its other arguments) or the section's own; the raw value is None when
    the key is absent. ``required``: the error, at the section, when it is absent. ``optional``: an
    absent (or null) value is None and is not read. ``check``: the grammar a string read must meet."""

    name: str
    read: Callable[..., Any]
    default: Any = MISSING
    required: str = ""
    optional: bool = False
    check: grammar.Check | None = None

    def value(self, ctx: Ctx, given: Mapping[str, Any], values: Mapping[str, Any], path: KeyPath) -> Any:
        raw, where = given.get(self.name), path + (self.name,)
        if raw is None and self.optional:
            return None
        default = self.default.fn(given, values) if isinstance(self.default, Derived) else self.default
        value = self.read(ctx, raw, where) if default is MISSING else self.read(ctx, raw, where, default=default)
        if self.check is not None and isinstance(value, str):
            ctx.checked(value, where, self.check)
        return value


@dataclass(frozen=True)
class Rule:
    """A step across keys, run at its place among the keys: ``check(ctx, values, path)`` checks the values
    read so far (or completes them: a nested table's values, read where they always were)."""

    check: Callable[[Any, dict[str, Any], KeyPath], None]


def checks(name: str, check: grammar.Check) -> Rule:
    """A :class:`Rule` checking the string read for ``name`` against its grammar (later than the read)."""

    def rule(ctx: Ctx, values: dict[str, Any], path: KeyPath) -> None:
        if values[name] is not None:
            ctx.checked(values[name], path + (name,), check)

    return Rule(rule)


@dataclass(frozen=True)
class Table:
    """A section's keys, in the order they are read, and the rules across them (cfgv's ``Map``)."""

    name: str
    items: tuple[Key | Rule, ...]

    @property
    def keys(self) -> tuple[Key, ...]:
        return tuple(item for item in self.items if isinstance(item, Key))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(key.name for key in self.keys)

    def read(self, ctx: Ctx, raw: Any, path: KeyPath) -> dict[str, Any]:
        """Unknown keys and missing required ones reported, then each key read; its value by name."""
        return self.values(ctx, self.given(ctx, raw, path), path)

    def given(self, ctx: Ctx, raw: Any, path: KeyPath) -> dict[str, Any]:
        """The first half of :meth:`read`: the known keys written (raw), unknown and missing required ones reported."""
        given = ctx.mapping(raw, path, self.names)
        for key in self.keys:
            if key.required and key.name not in given:
                ctx.error(path, key.required)
        return given

    def values(self, ctx: Ctx, given: Mapping[str, Any], path: KeyPath) -> dict[str, Any]:
        """The second half of :meth:`read`: each key of ``given`` (from :meth:`given`) read, the rules run."""
        values: dict[str, Any] = {}
        for item in self.items:
            if isinstance(item, Rule):
                item.check(ctx, values, path)
            else:
                values[item.name] = item.value(ctx, given, values, path)
        return values


def kind(raw: Any) -> str:
    """What a raw YAML value is, for ``expected ..., got {kind}``."""
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(raw), type(raw).__name__
    )


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def duration_s(text: str) -> int | None:
    """``90``, ``90s``, ``30m``, ``1h30m``, ``2d`` -> seconds; None when malformed."""
    if re.fullmatch("[0-9]{1,12}", text):
        return int(text)
    m = DURATION.fullmatch(text)
    if not text or m is None:
        return None
    d, h, mi, s = (int(g or 0) for g in m.groups())
    return ((d * 24 + h) * 60 + mi) * 60 + s
