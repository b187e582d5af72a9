"""Reports people read, from ONE versioned report.json.

``parse`` reads a build, verify or run report into frozen records
(``model``); ``chartdata`` picks what the charts show; one module per format
renders those records: ``markdown`` (CI job summaries), ``junit`` (CI test
tabs), ``html`` (a self-contained page from a Jinja2 template, charts from
``svg``). Renderers are pure functions returning text; ``write`` puts it on
disk atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from imagesmith.atomic import write_text
from imagesmith.errors import UserError
from imagesmith.report.chartdata import leak_curves, throughputs
from imagesmith.report.html import to_html
from imagesmith.report.junit import to_junit
from imagesmith.report.markdown import to_markdown
from imagesmith.report.model import Run
from imagesmith.report.parse import LOG_TAIL_LINES, load, log_tail, parse, run_report, verify_run

FORMATS = ("md", "junit", "html")
RENDERERS: dict[str, Callable[[Run], str]] = {"md": to_markdown, "junit": to_junit, "html": to_html}

__all__ = ["FORMATS", "LOG_TAIL_LINES", "Run", "leak_curves", "load", "log_tail", "parse", "render", "run_report",
           "throughputs", "to_html", "to_junit", "to_markdown", "verify_run", "write"]


def render(run: Run, fmt: str) -> str:
    if fmt not in RENDERERS:
        raise UserError(f"unknown report format {fmt!r}; use one of {', '.join(FORMATS)}")
    return RENDERERS[fmt](run)


def write(run: Run, fmt: str, out: Path) -> Path:
    """Render ``fmt`` and write it to ``out`` atomically."""
    write_text(out, render(run, fmt))
    return out
