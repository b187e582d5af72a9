"""Tables for people: rich on a terminal, plain aligned text elsewhere."""

from __future__ import annotations

from typing import Sequence

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from imagesmith.inert import inert


def console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, soft_wrap=False, highlight=False)


def shown(value: object) -> str:
    """A cell or a title as rich prints it: control characters escaped (:func:`imagesmith.inert.inert`), rich's
    markup (``[link=...]``, ``[bold]``) shown as the characters it is."""
    return escape(inert(str(value), one_line=True))


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]], stderr: bool = False) -> None:
    """A table whose every cell and title is text another job may have written: each goes through :func:`shown`."""
    out = console(stderr)
    table = Table(title=shown(title), box=box.SIMPLE if out.is_terminal else box.ASCII2, title_justify="left")
    for header in headers:
        table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*(shown(c) for c in row))
    if not out.is_terminal:
        out.width = max(out.width, 240)
    out.print(table)
