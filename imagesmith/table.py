"""Tables for people: rich on a terminal, plain aligned text elsewhere."""

from __future__ import annotations

from typing import Sequence

from rich import box
from rich.console import Console
from rich.table import Table


def console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, soft_wrap=False, highlight=False)


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]], stderr: bool = False) -> None:
    out = console(stderr)
    table = Table(title=title, box=box.SIMPLE if out.is_terminal else box.ASCII2, title_justify="left")
    for header in headers:
        table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*(str(c) for c in row))
    if not out.is_terminal:
        out.width = max(out.width, 240)
    out.print(table)
