"""YAML loaded into plain values plus the line of every key path, safely.

``load_located(data, file)`` returns ``(data, lines)`` where ``lines`` maps a
key path such as ``("matrix", "cuda", 1)`` to its 1-based line, so every
validation message can say ``matrix.yaml:4 matrix.cuda``.

A matrix arrives in a pull request, so the loader treats it as hostile: only
UTF-8 text (never echoed back when it is not), no control characters, plain
YAML tags only, no duplicate keys, merge keys (``<<: *common``) supported,
and bounded size, nesting and alias expansion (an alias bomb is refused
after a fixed number of values, in well under a second). Every refusal is a
:class:`ValidationError` with ``file:line``.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any, Iterator, Mapping, Union

import yaml

from imagesmith.errors import Problem, ValidationError

KeyPath = tuple[Union[str, int], ...]
Lines = dict[KeyPath, int]

MAX_BYTES = 1 << 20  # a matrix file; the example matrices are about 4 KiB
MAX_EVENTS = 65_536  # YAML events (values, keys, collections) before aliases are expanded
MAX_VALUES = 65_536  # values after aliases are expanded: an alias bomb stops here
MAX_DEPTH = 64  # nesting of mappings and lists

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: fast, and bounds its own nesting
_resolver = yaml.resolver.Resolver()
_BOOLS = yaml.constructor.SafeConstructor.bool_values  # YAML 1.1: yes/no/on/off/true/false
_TAG = "tag:yaml.org,2002:"
_PLAIN = {_TAG + t for t in ("str", "int", "float", "bool", "null", "timestamp")}
_AS_TEXT = {_TAG + t for t in ("int", "float", "timestamp")}  # "3.10" stays "3.10": versions are never floats
_MERGE = _TAG + "merge"
# C0/C1 controls (tab, CR and LF allowed in the file, never in a value), line and
# paragraph separators, zero-width and bidirectional controls ("Trojan Source"),
# and lone surrogates (a "\\udcff" escape: not text, and no file can hold it).
CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ud800-\udfff\ufeff\ufff9-\ufffb]")
VALUE_CONTROL = re.compile(CONTROL.pattern[:1] + "\t\n\r" + CONTROL.pattern[1:])


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.:/@+-]+")


def dotted(path: KeyPath) -> str:
    """``("matrix", "include", 0, "cuda")`` -> ``matrix.include[0].cuda``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _PLAIN_KEY.fullmatch(part):
            out += f"[{printable(part, 40)}]"  # a key a user made up: quoted, control characters escaped
        else:
            out += f".{part}" if out else part
    return out


def printable(text: str, limit: int = 60) -> str:
    """``text`` quoted for a message: control characters escaped, long text cut."""
    short = text if len(text) <= limit else text[:limit] + "..."
    return repr(short)


def control_character(text: str, pattern: re.Pattern[str] = VALUE_CONTROL) -> str | None:
    """``U+000A`` for the first control character in ``text``, or None."""
    found = pattern.search(text)
    return f"U+{ord(found.group()):04X}" if found else None


# -- bytes -> text -----------------------------------------------------------------


class TextProblem(Exception):
    """Why some bytes are not acceptable text, and where (line, column; 0 if nowhere)."""

    def __init__(self, why: str, line: int = 0, column: int = 0) -> None:
        super().__init__(why)
        self.why, self.line, self.column = why, line, column

    def where(self) -> str:
        return f":{self.line}:{self.column}" if self.line else ""


def read_limited(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (a FIFO, device or
    folder is refused without blocking). Raises OSError or TextProblem."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TextProblem("is not a regular file")
        if info.st_size > limit:
            raise TextProblem(f"is {info.st_size:,} bytes, over the {limit:,}-byte limit")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise TextProblem(f"is over the {limit:,}-byte limit")
    return data


def _position(data: bytes, offset: int) -> tuple[int, int]:
    line_start = data.rfind(b"\n", 0, offset) + 1
    return data.count(b"\n", 0, offset) + 1, offset - line_start + 1


def decode(data: bytes) -> str:
    """UTF-8 text without control characters; a leading BOM is dropped.
    Raises TextProblem, which never quotes the bytes."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff") or (b"\x00" in data[:64] and data[:64].count(b"\x00") * 4 >= len(data[:64])):
        raise TextProblem("is UTF-16 or UTF-32 text; save it as UTF-8")
    if b"\x00" in data:
        raise TextProblem("holds NUL bytes: it is a binary file, not text", *_position(data, data.index(b"\x00")))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TextProblem("is not UTF-8 text; save it as UTF-8", *_position(data, exc.start)) from None
    text = text[1:] if text.startswith("\ufeff") else text
    found = CONTROL.search(text)
    if found:
        line = text.count("\n", 0, found.start()) + 1
        column = found.start() - (text.rfind("\n", 0, found.start()) + 1) + 1
        raise TextProblem(f"holds control character U+{ord(found.group()):04X}; remove it", line, column)
    return text


# -- text -> located values ------------------------------------------------------


class _Refused(Exception):
    """A fatal problem: loading stops at once."""

    def __init__(self, line: int, path: KeyPath, why: str) -> None:
        super().__init__(why)
        self.line, self.path, self.why = line, path, why


class _Walker:
    """Nodes -> plain values and lines, with merge keys, checks and a value budget."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.lines: Lines = {}
        self.problems: list[Problem] = []
        self.values = 0
        self.active: set[int] = set()

    def problem(self, node: yaml.Node, path: KeyPath, why: str) -> None:
        self.problems.append(Problem(why, self.file, node.start_mark.line + 1, dotted(path)))

    def count(self, node: yaml.Node, path: KeyPath) -> None:
        self.values += 1
        if self.values > MAX_VALUES:
            raise _Refused(node.start_mark.line + 1, path, f"more than {MAX_VALUES:,} values once aliases (*name) are expanded; "
                           "a matrix is far smaller: remove the aliases that repeat large parts")

    def walk(self, node: yaml.Node, path: KeyPath) -> Any:
        self.count(node, path)
        if id(node) in self.active:
            raise _Refused(node.start_mark.line + 1, path, "an alias (*name) refers to a node that contains it; write the value out")
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node, path)
        if node.tag not in (_TAG + "map", _TAG + "seq"):
            self.problem(node, path, f"the tag {_short(node.tag)} is not allowed; write plain YAML (strings, numbers, true/false, lists, mappings)")
            return None
        self.active.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self.walk(item, path + (i,)) for i, item in enumerate(node.value)]
            assert isinstance(node, yaml.MappingNode)
            return self.mapping(node, path)
        finally:
            self.active.discard(id(node))

    def scalar(self, node: yaml.ScalarNode, path: KeyPath) -> Any:
        if node.tag not in _PLAIN:
            self.problem(node, path, f"the tag {_short(node.tag)} is not allowed; write plain YAML (strings, numbers, true/false, lists, mappings)")
            return None
        if node.tag == _TAG + "str" or node.tag in _AS_TEXT:
            bad = control_character(node.value)
            if bad:
                self.problem(node, path, f"holds control character {bad}; remove it (escapes such as \\n or \\t are not allowed in values)")
            return node.value
        if node.tag == _TAG + "null":
            return None
        if node.value.lower() not in _BOOLS:
            self.problem(node, path, f"{printable(node.value)} is not true or false")
            return None
        return _BOOLS[node.value.lower()]

    def key(self, node: yaml.Node, path: KeyPath) -> str | None:
        if not isinstance(node, yaml.ScalarNode) or node.tag not in _PLAIN:
            self.problem(node, path, "a key must be a plain word, not a list, mapping or tagged value")
            return None
        bad = control_character(node.value)
        if bad:
            self.problem(node, path, f"a key holds control character {bad}; remove it")
            return None
        return str(node.value)

    def pairs(self, node: yaml.MappingNode, path: KeyPath, depth: int = 0) -> Iterator[tuple[yaml.Node, yaml.Node, bool]]:
        """(key, value, merged) in order: explicit pairs, then merged ones (earlier sources first)."""
        if depth > MAX_DEPTH:
            raise _Refused(node.start_mark.line + 1, path, f"merge keys (<<) nest deeper than {MAX_DEPTH} levels")
        merged: list[tuple[yaml.Node, yaml.Node, bool]] = []
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE:
                yield key_node, value_node, False
                continue
            sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for src in sources:
                self.count(src, path)
                if not isinstance(src, yaml.MappingNode) or src.tag != _TAG + "map" or id(src) in self.active:
                    self.problem(src, path, "<< merges mappings only (<<: *name or <<: [*a, *b]), not itself")
                    continue
                self.active.add(id(src))
                try:
                    merged += [(k, v, True) for k, v, _ in self.pairs(src, path, depth + 1)]
                finally:
                    self.active.discard(id(src))
        yield from merged

    def mapping(self, node: yaml.MappingNode, path: KeyPath) -> dict[str, Any]:
        out: dict[str, Any] = {}
        first: dict[str, int] = {}
        for key_node, value_node, merged in self.pairs(node, path):
            self.count(key_node, path)
            key = self.key(key_node, path)
            if key is None or (merged and key in out):
                continue  # an explicit key (or an earlier merge source) wins over a merged one
            if key in out:
                self.problem(key_node, path + (key,), f"duplicate key (first at line {first[key]}); keep one: YAML would silently use the last")
                continue
            first[key] = key_node.start_mark.line + 1
            out[key] = self.walk(value_node, path + (key,))
            if not merged:
                self.lines[path + (key,)] = key_node.start_mark.line + 1  # a key is located at its own line
        return out


def _short(tag: str) -> str:
    return printable(("!!" + tag[len(_TAG):]) if tag.startswith(_TAG) else tag, 40)


def _yaml_problem(file: str, exc: yaml.YAMLError) -> Problem:
    mark = getattr(exc, "problem_mark", None)
    where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else file
    problem = getattr(exc, "problem", None) or "not YAML"
    return Problem(f"{where}: invalid YAML: {printable(problem, 120)[1:-1]}")


def _precheck(text: str, file: str) -> None:
    """Count events and nesting before anything is built (cheap, in libyaml)."""
    loader = _Loader(text)
    depth = events = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            events += 1
            depth += isinstance(event, yaml.CollectionStartEvent) - isinstance(event, yaml.CollectionEndEvent)
            if depth > MAX_DEPTH or events > MAX_EVENTS:
                mark = event.start_mark
                why = f"nested deeper than {MAX_DEPTH} levels" if depth > MAX_DEPTH else f"more than {MAX_EVENTS:,} YAML values"
                raise ValidationError(problems=[Problem(f"{file}:{mark.line + 1}:{mark.column + 1}: {why}; a matrix is far smaller and flatter")])
    finally:
        loader.dispose()


def load_located(data: str | bytes, file: str) -> tuple[Any, Lines]:
    """Parse ``data``; anything unacceptable raises a ValidationError located at file:line."""
    try:
        text = decode(data) if isinstance(data, bytes) else data
        if not isinstance(data, bytes) and CONTROL.search(text):
            text = decode(text.encode("utf-8", "surrogatepass"))
    except TextProblem as exc:
        raise ValidationError(problems=[Problem(f"{file}{exc.where()}: {exc.why}")]) from None
    except UnicodeError:
        raise ValidationError(problems=[Problem(f"{file}: is not UTF-8 text; save it as UTF-8")]) from None
    try:
        _precheck(text, file)
        node = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise ValidationError(problems=[_yaml_problem(file, exc)]) from None
    if node is None:
        return None, {}
    walker = _Walker(file)
    try:
        value = walker.walk(node, ())
    except _Refused as exc:
        raise ValidationError(problems=[Problem(exc.why, file, exc.line, dotted(exc.path))]) from None
    if walker.problems:
        raise ValidationError(problems=walker.problems)
    return value, walker.lines


def line_of(lines: Mapping[KeyPath, int], path: KeyPath) -> int:
    """The line of ``path``, or of its nearest located ancestor."""
    while path and path not in lines:
        path = path[:-1]
    return lines.get(path, 0)
