"""The second guard of rendering: a rendered file holds only what its template put there.

Templates render with every ``{{ expression }}`` output wrapped in two marker
characters (control characters, which no validated value can hold), so after
rendering it is known which characters came from values. :func:`strip`
removes the markers (that is the file written) and returns the value spans.

For a Dockerfile, :meth:`Guard.dockerfile` then checks, with BuildKit's own
parser (the ``dockerfile`` package wraps its Go code):

* every instruction starts in the template's text (a value never starts an
  instruction, nor continues one onto the next line with a trailing ``\\``);
* the file parses to the same instructions, flags and argument counts as the
  same render with every value replaced by a plain word (so no value added an
  ENV or LABEL pair, a JSON array element or an instruction);
* each value is inert where it stands: in a shell command (RUN, CMD, ...) it
  is one quoted or plain word with no shell syntax; in ENV, LABEL, ARG and
  the other instructions it expands no variable and closes no quote.

Values made only of letters, digits and ``._:/@+,%-`` are inert anywhere, so
the parser's answer for a file depends only on its "skeleton" (those values
replaced by ``x``): thousands of targets share a few skeletons, and each is
parsed once. ``Guard.python`` and ``Guard.config`` check the service files
(Python source: each value inside one string or number token; sshd_config:
each value one word, never a keyword).
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

import dockerfile

OPEN, CLOSE = "\x1e", "\x1f"  # record separator / unit separator: refused in every matrix value
_MARKERS = re.compile("[\x1e\x1f]")
_INERT_VALUE = re.compile(OPEN + r"[A-Za-z0-9_][A-Za-z0-9._:/@+,%-]*" + CLOSE)
_SHELL_FORM = {"RUN", "CMD", "ENTRYPOINT", "HEALTHCHECK", "SHELL"}

Span = tuple[int, int]


class TemplateText(str):
    """Output that is the template's own text (a captured block), its inner values still marked."""


def template_text(value: object) -> TemplateText:
    """The ``template_text`` filter: ``{{ captured | trim | template_text }}``."""
    return TemplateText(value)


def mark(value: object) -> str:
    """Jinja ``finalize``: an expression's output between markers (nothing for empty output)."""
    text = str(value)
    return text if isinstance(value, TemplateText) or not text else f"{OPEN}{text}{CLOSE}"


def unmark(marked: str) -> str:
    """The file as written: the markers removed."""
    return marked.replace(OPEN, "").replace(CLOSE, "")


def strip(marked: str, trusted_macros: bool = False) -> tuple[str, list[Span]]:
    """The text without markers, and the spans of values in it: innermost
    outputs that hold no other output (a macro's or block's output that
    holds values is the template's text around those values). With
    ``trusted_macros`` (a user's template), a multi-line output without values
    inside is taken for a value-free macro's output: template text."""
    text: list[str] = []
    spans: list[Span] = []
    stack: list[list[int]] = []  # [start in the output, holds an inner output, start in ``marked``]
    pos = last = 0
    for m in _MARKERS.finditer(marked):
        chunk = marked[last:m.start()]
        text.append(chunk)
        pos += len(chunk)
        last = m.end()
        if m.group() == OPEN:
            if stack:
                stack[-1][1] = 1
            stack.append([pos, 0, m.end()])
        elif stack:
            start, inner, at = stack.pop()
            if not inner and not (trusted_macros and "\n" in marked[at:m.start()]):
                spans.append((start, pos))
    text.append(marked[last:])
    return "".join(text), sorted(spans)


@dataclass(frozen=True)
class Finding:
    line: int
    why: str


# -- lexing one instruction ----------------------------------------------------------

# What a value may be, by the quoting state it stands in (it must leave that state as it found it).
_VALUE_RULES = {
    ("shell", ""): re.compile(r"(?:[A-Za-z0-9_@%+=:,./-]|'[^']*'|\"[^\"$`\\!]*\")*"),
    ("shell", '"'): re.compile(r"[^\"$`\\!]*"),
    ("shell", "'"): re.compile(r"[^']*"),
    ("word", ""): re.compile(r"(?:[A-Za-z0-9_@%+:,./~#-]|\"(?:[^\"\\$]|\\[\\\"$])*\"|'[^']*')*"),
    ("word", '"'): re.compile(r"(?:[^\"\\$]|\\[\\\"$])*"),
    ("word", "'"): re.compile(r"[^']*"),
    ("json", '"'): re.compile(r"(?:[^\"\\]|\\.)*"),
}
_NEXT = {  # where the quoting state can change, by state
    ("shell", ""): re.compile(r"[\\'\"]|(?:(?<=\s)|^)#"),
    ("word", ""): re.compile(r"[\\'\"]"),
    ("json", ""): re.compile(r"\""),
    ("shell", '"'): re.compile(r"[\\\"]"), ("word", '"'): re.compile(r"[\\\"]"), ("json", '"'): re.compile(r"[\\\"]"),
    ("shell", "'"): re.compile(r"'"), ("word", "'"): re.compile(r"'"),
}


def _advance(mode: str, state: str, text: str) -> str:
    """The quoting state after the template's own ``text``."""
    i = 0
    while True:
        m = _NEXT[(mode, state)].search(text, i)
        if m is None:
            return state
        c, i = m.group(), m.end()
        if c == "\\":
            i += 1  # an escaped character (or a line continuation)
        elif c == "#":
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
        elif state == "":
            state = c  # an opening quote
        else:
            state = ""  # the closing one


def _inert(mode: str, state: str, value: str) -> bool:
    rule = _VALUE_RULES.get((mode, state))
    return bool(rule and rule.fullmatch(value))


def lex(mode: str, text: str, spans: list[Span], offset: int) -> str | None:
    """Why a value in this instruction is not inert, or None. ``spans`` are the
    instruction's values, relative to the file; ``offset`` is where ``text`` starts."""
    state, at = "", offset
    for start, end in spans:
        state = _advance(mode, state, text[at - offset:start - offset])
        value = text[start - offset:end - offset]
        if not _inert(mode, state, value):
            where = {"": "unquoted", '"': "inside double quotes", "'": "inside single quotes"}[state]
            return f"the value {value[:60]!r} ({where}) would be read as syntax, not as data"
        at = end
    return None


# -- the guard ------------------------------------------------------------------------


@dataclass
class Guard:
    """Checks rendered files; remembers its verdict per skeleton."""

    verdicts: dict[tuple[str, bool, str], list[Finding]] = field(default_factory=dict)
    parsed_files: dict[str, tuple["dockerfile.Command", ...]] = field(default_factory=dict)  # what BuildKit's parser read

    def check(self, kind: str, marked: str, trusted_macros: bool = False) -> list[Finding]:
        """Findings for a rendered file (``kind``: dockerfile, python, config or shell), given
        with its markers. A Dockerfile is judged by its skeleton: inert values replaced by x."""
        key = (kind, trusted_macros, _INERT_VALUE.sub(f"{OPEN}x{CLOSE}", marked) if kind == "dockerfile" else marked)
        if key not in self.verdicts and not _utf8(marked):
            return [Finding(0, "it holds a character no UTF-8 file can (a lone surrogate such as \\udcff)")]
        if key not in self.verdicts:
            text, spans = strip(key[2], trusted_macros)
            judge = {"dockerfile": self._judge, "python": _python, "config": _config, "shell": _shell}[kind]
            self.verdicts[key] = judge(text, spans)
        return self.verdicts[key]

    def _parse(self, text: str) -> tuple["dockerfile.Command", ...]:
        if text not in self.parsed_files:
            self.parsed_files[text] = dockerfile.parse_string(text)
        return self.parsed_files[text]

    def _judge(self, skeleton: str, spans: list[Span]) -> list[Finding]:
        try:
            commands = self._parse(skeleton)
            shape, plain = _shape(commands), _shape(self._parse(_plain(skeleton, spans)))
        except dockerfile.GoParseError as exc:
            return [Finding(0, f"BuildKit's parser refuses it: {str(exc)[:200]}")]
        found = [Finding(int(str(a[4])), f"{a[0]} is not the instruction the template makes with plain values "
                                 "(a value added an instruction, argument, flag or line)")
                 for a, b in zip(shape, plain) if a != b][:1]
        if len(shape) != len(plain):
            found.append(Finding(0, f"{len(shape)} instructions where the template makes {len(plain)}"))
        lines = _line_starts(skeleton)
        inside = _membership(spans)
        for c in commands:
            found += _provenance(c, skeleton, lines, inside, spans)
        return found



def _config(text: str, spans: list[Span]) -> list[Finding]:
    """A keyword-value file (sshd_config): each value one word after a template keyword."""
    out = []
    for start, end in spans:
        line_start = text.rfind("\n", 0, start) + 1
        if not re.fullmatch(r"[^\s\"'#\\]+", text[start:end]) or not text[line_start:start].strip():
            out.append(Finding(text.count("\n", 0, start) + 1, f"the value {text[start:end][:60]!r} is not one plain word after a keyword"))
    return out


def _shell(text: str, spans: list[Span]) -> list[Finding]:
    why = lex("shell", text, spans, 0)
    return [Finding(text.count("\n", 0, spans[0][0]) + 1 if spans else 0, why)] if why else []


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:  # BuildKit's parser (through cgo) would crash the process on it
        return False


def _shape(commands: tuple["dockerfile.Command", ...]) -> list[tuple[object, ...]]:
    return [(c.cmd, c.json, len(c.flags), len(c.value), c.start_line, c.end_line, len(c.heredocs)) for c in commands]


def _plain(text: str, spans: list[Span]) -> str:
    """``text`` with every value replaced by ``x``: what the template makes with plain values."""
    out, at = [], 0
    for start, end in spans:
        out += [text[at:start], "x"]
        at = end
    return "".join(out + [text[at:]])


def _line_starts(text: str) -> list[int]:
    return [0] + [m.end() for m in re.finditer("\n", text)]


def _membership(spans: list[Span]) -> set[int]:
    return {i for start, end in spans for i in range(start, end)}


def _provenance(c: "dockerfile.Command", text: str, lines: list[int], inside: set[int], spans: list[Span]) -> list[Finding]:
    first = lines[c.start_line - 1]
    keyword = first + len(text[first:]) - len(text[first:].lstrip(" \t"))
    if keyword in inside:
        return [Finding(c.start_line, "an instruction starts inside a value, not in the template's text")]
    end = lines[c.end_line] if c.end_line < len(lines) else len(text)
    for n in range(c.start_line, c.end_line):
        line_end = len(text[:lines[n] - 1].rstrip()) - 1
        if line_end in inside:
            return [Finding(n, "a value ends a line with \\, joining the next line to this instruction")]
    mine = [(s, e) for s, e in spans if first <= s < end]
    mode = "json" if c.json else ("shell" if c.cmd in _SHELL_FORM else "word")
    why = lex(mode, text[keyword + len(c.cmd):end], mine, keyword + len(c.cmd)) if mine and not c.heredocs else None
    return [Finding(c.start_line, f"{c.cmd}: {why}")] if why else []


def _python(text: str, spans: list[Span]) -> list[Finding]:
    """Python source: it compiles, and each value lies inside one string or number token."""
    try:
        compile(text, "<rendered>", "exec")
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (SyntaxError, tokenize.TokenError, ValueError) as exc:
        return [Finding(getattr(exc, "lineno", 0) or 0, f"not valid Python once rendered ({type(exc).__name__})")]
    lines = _line_starts(text)
    literals = [(lines[t.start[0] - 1] + t.start[1], lines[t.end[0] - 1] + t.end[1])
                for t in tokens if t.type in (tokenize.STRING, tokenize.NUMBER)]
    return [Finding(text.count("\n", 0, start) + 1, f"the value {text[start:end][:60]!r} is not inside one Python string or number")
            for start, end in spans if not any(a <= start and end <= b for a, b in literals)]
