"""Text for people, made inert: what a report, a registry, an advisory snapshot or a build log says reaches a
terminal, a progress line or a Markdown page only with its control characters escaped.

An ESC starts a terminal control sequence (``\\x1b[2J`` clears the screen, ``\\x1b]8;;URL`` makes a link, OSC 52
writes the clipboard), a BEL rings, a carriage return overwrites the line already printed, and bidirectional
overrides (U+202E) and zero-width characters make text read otherwise than it is. Each is shown as its Python
escape (``\\x1b``, ``\\u202e``), so the reader sees that it was there and nothing acts on it.
"""

from __future__ import annotations

import re

# C0 (but tab and newline), DEL, C1, zero-width and bidirectional formatting, line and paragraph separators,
# word joiners and invisible operators, lone surrogates, the byte-order mark, interlinear annotations
_MULTI_LINE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ud800-\udfff\ufeff\ufff9-\ufffb]")
_ONE_LINE = re.compile("[\t\n" + _MULTI_LINE.pattern[1:])


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert(text: str, one_line: bool = False) -> str:
    """``text`` with every control character escaped (``one_line``: tabs and newlines too)."""
    return (_ONE_LINE if one_line else _MULTI_LINE).sub(_escape, text)
