"""Progress for long work (build, verify, push): one line per item.

On a terminal a live rich table; elsewhere (CI) plain timestamped lines;
``quiet`` prints nothing. Safe to call from worker threads.
"""

from __future__ import annotations

import datetime as dt
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol, TextIO

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from imagesmith.inert import inert

STYLE = {"queued": "dim", "building": "cyan", "verifying": "cyan", "pushing": "cyan", "cached": "green",
         "done": "green", "passed": "green", "pushed": "green", "failed": "bold red", "skipped": "yellow",
         "cancelled": "yellow", "warn": "yellow"}


class Display(Protocol):
    def update(self, item: str, state: str, detail: str = "") -> None: ...
    def note(self, message: str) -> None: ...
    def close(self) -> None: ...


@dataclass
class _Row:
    state: str = "queued"
    detail: str = ""
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None

    def elapsed(self) -> float:
        return (self.ended or time.monotonic()) - self.started


FINAL = {"cached", "done", "passed", "pushed", "failed", "skipped", "cancelled"}


class PlainDisplay:
    """Timestamped lines, printed when an item's state changes."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.rows: dict[str, _Row] = {}
        self.lock = threading.Lock()

    def update(self, item: str, state: str, detail: str = "") -> None:
        with self.lock:
            row = self.rows.setdefault(item, _Row())
            changed = (row.state, row.detail) != (state, detail)
            if state != row.state and state not in FINAL and row.state == "queued":
                row.started = time.monotonic()
            row.state, row.detail = state, detail
            if state in FINAL:
                row.ended = time.monotonic()
            if changed:
                self._print(inert(f"{item}: {state}{' ' + detail if detail else ''}", one_line=True) + f" ({row.elapsed():.1f}s)")

    def note(self, message: str) -> None:
        with self.lock:
            self._print(message)

    def _print(self, text: str) -> None:
        """What an item or a note says (a check's detail, a registry's answer) with its control characters escaped
        (an item's line: its line breaks too), so it can neither move the cursor nor rewrite a line already printed."""
        stamp = dt.datetime.now().strftime("%H:%M:%S")
        print(f"{stamp} {inert(text)}", file=self.stream, flush=True)

    def close(self) -> None:
        pass


class LiveDisplay(PlainDisplay):
    """A live table: one line per item with its state and elapsed time."""

    def __init__(self, title: str) -> None:
        super().__init__()
        self.title = title
        self.console = Console(stderr=True)
        self.live = Live(self._table(), console=self.console, refresh_per_second=4, transient=False)
        self.live.__enter__()

    def _table(self) -> Table:
        table = Table(title=self.title, title_justify="left", expand=False)
        for col in ("item", "state", "detail", "elapsed"):
            table.add_column(col, overflow="fold")
        for item, row in list(self.rows.items()):
            table.add_row(_shown(item), f"[{STYLE.get(row.state, '')}]{_shown(row.state)}[/]", _shown(row.detail),
                          f"{row.elapsed():.0f}s")
        return table

    def update(self, item: str, state: str, detail: str = "") -> None:
        with self.lock:
            row = self.rows.setdefault(item, _Row())
            if row.state == "queued" and state != "queued":
                row.started = time.monotonic()
            row.state, row.detail = state, detail
            row.ended = time.monotonic() if state in FINAL else None
            self.live.update(self._table())

    def note(self, message: str) -> None:
        with self.lock:
            self.console.print(escape(inert(message)))

    def close(self) -> None:
        with self.lock:
            self.live.update(self._table())
            self.live.__exit__(None, None, None)


def _shown(text: str) -> str:
    """Text for the live table: control characters escaped, rich markup shown as the characters it is."""
    return escape(inert(text, one_line=True))


class QuietDisplay:
    def update(self, item: str, state: str, detail: str = "") -> None:
        pass

    def note(self, message: str) -> None:
        pass

    def close(self) -> None:
        pass


def make_display(title: str, quiet: bool = False) -> Display:
    if quiet:
        return QuietDisplay()
    if sys.stderr.isatty():
        return LiveDisplay(title)
    return PlainDisplay()
