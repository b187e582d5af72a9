"""One reader kit for the values of a JSON document another job wrote.

:mod:`imagesmith.model.loader` lets a file in (confined, bounded, strict JSON, its schema); a reader then takes
its values out into frozen records. :class:`Fields` is how every such reader does that (the build artifact and the
build report of a whole job in ``model.buildreport``, the verify report in ``model.verifyreport``, the release report in
``model.releasereport``, the fleet report in ``model.fleetreport``, the run report in ``report.parse``): typed access to
one field at a time, and, where a value is not what the reader takes, a :class:`~imagesmith.model.loader.LoadError`
that names the file, the key path and what was found there::

    r = Fields("OUT/a/report.json")
    r.number(check, "threshold", "report.checks[4]")
    # LoadError: OUT/a/report.json: report.checks[4].threshold: expected a number, got '784'

Key paths are the reader's own words (``report.checks[4]``, ``cells[0]``, ``verify.<target>``), joined with
``.key`` by :meth:`Fields.at`. The readers came from three hand-written copies whose messages users and tests know
word for word, so how a reader names what it found is a :class:`Wording`, one per reader; the checks are shared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from imagesmith.model.loader import LoadError

_WORDS = {dict: "an object", list: "a list", str: "text", type(None): "null"}


def kind_words(value: Any) -> str:
    """What was found, in words: ``an object``, ``a list``, ``text``, ``null``, else its type (``int``, ``bool``)."""
    return _WORDS.get(type(value), type(value).__name__)


def type_name(value: Any) -> str:
    """What was found, as its Python type: ``dict``, ``list``, ``str``, ``int``, ``NoneType``."""
    return type(value).__name__


@dataclass(frozen=True)
class Wording:
    """How one reader words a value it does not take. ``{value!r}`` and ``{kind}`` (``kind(value)``) are filled in."""

    kind: Callable[[Any], str] = kind_words  # names what was found in "expected X, got <kind>"
    not_number: str = "expected a number, got {value!r}"
    not_valid: str = "{value!r} is not a valid value"  # a required or patterned text that is missing or wrong

    def say(self, template: str, value: Any) -> str:
        return template.format(value=value, kind=self.kind(value))


WORDS = Wording()


def is_number(value: Any) -> bool:
    """A JSON number (``true`` is not one, though Python's bool is an int)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Fields:
    """Typed reads of the values of one document (``source``: the file, as messages name it); a value that is not
    what the reader takes raises a :class:`LoadError` ``SOURCE: KEY.PATH: why[; fix]`` (exit 1)."""

    def __init__(self, source: str, fix: str = "", wording: Wording = WORDS) -> None:
        self.source, self.fix, self.wording = source, fix, wording

    @staticmethod
    def at(where: str, key: str | int) -> str:
        """The key path of ``key`` inside ``where``: ``report.checks`` + 4 -> ``report.checks[4]``, + ``id`` ->
        ``report.checks[4].id``."""
        return f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else key

    def fail(self, where: str, why: str) -> LoadError:
        """The error for the value at ``where`` (the caller raises it)."""
        return LoadError(self.source, why, where, self.fix)

    def expected(self, where: str, what: str, value: Any) -> LoadError:
        """``expected <what>, got <what was found>``."""
        return self.fail(where, f"expected {what}, got {self.wording.kind(value)}")

    # -- containers ----------------------------------------------------------------------------------------------

    def mapping(self, raw: Any, where: str) -> Mapping[str, Any]:
        """An object."""
        if not isinstance(raw, Mapping):
            raise self.expected(where, "an object", raw)
        return raw

    def items(self, raw: Any, where: str) -> list[Any]:
        """A list; absent (``None``) is an empty one."""
        if raw is None:
            return []
        if not isinstance(raw, list):
            raise self.expected(where, "a list", raw)
        return raw

    def strings(self, d: Mapping[str, Any], key: str, where: str) -> list[str]:
        """``d[key]``: a list of strings (absent: empty)."""
        items = self.typed(d, key, list, where, [])
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise self.expected(self.at(self.at(where, key), i), "a string", item)
        return list(items)

    # -- scalars -------------------------------------------------------------------------------------------------

    def typed(self, d: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str, default: Any = None) -> Any:
        """``d[key]`` of the Python type ``kind`` (``(int, float)``: a number; a bool is never a number). Absent, it
        is ``default``; absent or null with no default, ``None`` (an optional field)."""
        value = d.get(key, default)
        if value is None and default is None:
            return None
        numeric = kind in (int, float, (int, float))
        if not isinstance(value, kind) or (numeric and isinstance(value, bool)):
            raise self.expected(self.at(where, key), getattr(kind, "__name__", "a number"), value)
        return value

    def text(self, d: Mapping[str, Any], key: str, where: str, default: str = "") -> str:
        """``d[key]`` as text, leniently: absent or null is ``default``, a number or bool its ``str``; an object
        or a list is refused."""
        value = d.get(key)
        if value is None:
            return default
        if isinstance(value, (Mapping, list)):
            raise self.expected(self.at(where, key), "text", value)
        return str(value)

    def valid(self, d: Mapping[str, Any], key: str, where: str, pattern: re.Pattern[str] | None = None,
              optional: bool = False) -> Any:
        """``d[key]``: a string (matching ``pattern`` whole, when given); ``optional``: absent or null is ``None``.
        Anything else is :attr:`Wording.not_valid`."""
        value = d.get(key)
        if value is None and optional:
            return None
        if not isinstance(value, str) or (pattern is not None and not pattern.fullmatch(value)):
            raise self.fail(self.at(where, key), self.wording.say(self.wording.not_valid, value))
        return value

    def number(self, d: Mapping[str, Any], key: str, where: str) -> float | None:
        """``d[key]`` as a float; absent or null is ``None``. Anything else is :attr:`Wording.not_number`."""
        value = d.get(key)
        if value is None:
            return None
        return float(self._number(value, key, where))

    def amount(self, d: Mapping[str, Any], key: str, where: str, default: int = 0) -> int | float:
        """``d[key]``: a number as written (an int stays exact); absent is ``default``; null is refused."""
        return self._number(d.get(key, default), key, where)

    def _number(self, value: Any, key: str, where: str) -> int | float:
        if not is_number(value):
            raise self.fail(self.at(where, key), self.wording.say(self.wording.not_number, value))
        return value  # type: ignore[no-any-return]

    # -- optional values, as written (a reader that tells "not said" from "said empty") ---------------------------

    def obj(self, d: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any] | None:
        """``d[key]``: an object, or None where absent or null."""
        value = d.get(key)
        return None if value is None else self.mapping(value, self.at(where, key))

    def listed(self, d: Mapping[str, Any], key: str, where: str) -> list[Any]:
        """``d[key]``: a list; absent or null is an empty one."""
        return self.items(d.get(key), self.at(where, key))

    def string(self, value: Any, where: str) -> str:
        """``value`` itself: text (a list's item)."""
        if not isinstance(value, str):
            raise self.expected(where, "text", value)
        return value

    def maybe_text(self, d: Mapping[str, Any], key: str, where: str) -> str | None:
        """``d[key]``: text, or None where absent or null (strictly: a number is refused)."""
        value = d.get(key)
        if value is not None and not isinstance(value, str):
            raise self.expected(self.at(where, key), "text or null", value)
        return value

    def scalar(self, d: Mapping[str, Any], key: str, where: str) -> str | None:
        """``d[key]`` as text where a writer may put a number (a version, a capability); None where absent or null."""
        return None if d.get(key) is None else self.text(d, key, where)

    def choice(self, d: Mapping[str, Any], key: str, where: str, allowed: tuple[str, ...]) -> str | None:
        """``d[key]``: one of ``allowed``, or None where absent or null."""
        value = d.get(key)
        if value is not None and value not in allowed:
            raise self.fail(self.at(where, key), f"expected one of {', '.join(allowed)}, got {value!r}")
        return value

    def figure(self, d: Mapping[str, Any], key: str, where: str) -> int | float | None:
        """``d[key]``: a number as written (an int stays an int), or None where absent or null."""
        return None if d.get(key) is None else self.amount(d, key, where)

    def whole(self, d: Mapping[str, Any], key: str, where: str) -> int | None:
        """``d[key]``: a whole number, or None where absent or null."""
        value = d.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise self.expected(self.at(where, key), "a whole number or null", value)
        return value

    def count(self, d: Mapping[str, Any], key: str, where: str) -> int:
        """``d[key]``: a whole number, 0 or more."""
        value = self.whole(d, key, where)
        if value is None or value < 0:
            raise self.fail(self.at(where, key), f"expected a count (a whole number, 0 or more), got {value!r}")
        return value

    def flag(self, d: Mapping[str, Any], key: str, where: str) -> bool:
        """``d[key]``: true or false; absent or null is false."""
        value = d.get(key)
        if value is not None and not isinstance(value, bool):
            raise self.fail(self.at(where, key), f"expected true or false, got {value!r}")
        return value is True
