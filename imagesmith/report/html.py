"""A self-contained HTML page (no scripts, no external assets; charts are inline SVG).

The page is a Jinja2 template (``imagesmith/data/report/``) rendered by a
sandboxed environment with autoescaping on: every value from a report is
escaped by the template engine, not by hand. The only markup marked safe is
the SVG of :mod:`imagesmith.report.svg`, which escapes each value it places.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from jinja2 import FileSystemLoader, StrictUndefined, Template
from jinja2.sandbox import ImmutableSandboxedEnvironment
from markupsafe import Markup

from imagesmith import __version__, resources
from imagesmith.inert import inert
from imagesmith.report import svg
from imagesmith.report.chartdata import leak_curves, throughputs
from imagesmith.report.model import STATUSES, Run, Verify, env_line, fmt_value, footnotes, headline, release_summary
from imagesmith.units import fmt_bytes


@functools.cache
def template(name: str) -> Template:
    env = ImmutableSandboxedEnvironment(loader=FileSystemLoader(resources.data_file("report")), autoescape=True,
                                        undefined=StrictUndefined, keep_trailing_newline=True, finalize=_inert)
    return env.get_template(name)


def _inert(value: Any) -> Any:
    """Every printed text with its control characters escaped (U+202E reorders a line in a browser too); the SVG
    marked safe is left as it is (svg escapes each value it places)."""
    return inert(value) if isinstance(value, str) and not isinstance(value, Markup) else value


def page(name: str, title: str, heading: str, sub: str, verdict: str, ok: bool, tone: str = "", **context: Any) -> str:
    """Render a page template (it extends ``page.html.j2``); ``tone`` colours the verdict (ok, unvetted, bad), by
    default from ``ok``."""
    return template(name).render(title=title, heading=heading, sub=sub, verdict=verdict, ok=ok,
                                 tone=tone or ("ok" if ok else "bad"), **context)


def _safe_svg(draw: Any) -> Any:
    """A chart function whose SVG the template may insert as it is (svg escapes every value)."""
    def wrapped(*args: Any) -> Any:
        out = draw(*args)
        return [Markup(s) for s in out] if isinstance(out, list) else Markup(out)
    return wrapped


def anchor(target_id: str) -> str:
    return "t-" + re.sub(r"[^A-Za-z0-9_.-]", "_", target_id)


def why_no_nvml(v: Verify) -> str:
    if v.nvml.error:
        return v.nvml.error
    if not v.environment.get("gpus"):
        return "this run saw no NVIDIA GPU (CPU mode)"
    if not v.nvml.present:
        return "the payload ran without imagesmith's host-side sampler (e.g. verify/run.py on its own)"
    return "the sampler recorded none"


LEAK_NONE = "No leak-check samples in this report (the standard tier runs the leak check)."
THROUGHPUT_NONE = "No throughput measurements in this report."


def missing(v: Verify) -> dict[str, str]:
    """What a target's sections say when they have nothing to draw: {"leak" | "throughput" | "nvml": note}."""
    out = {"leak": LEAK_NONE} if not leak_curves(v) else {}
    if not throughputs(v):
        out["throughput"] = THROUGHPUT_NONE
    if not v.nvml.gpus:
        out["nvml"] = f"No NVML samples: {why_no_nvml(v)}."
    return out


def said_once(run: Run) -> list[str]:
    """The notes every verified target would repeat (no leak samples, no NVML, ...): the page says them once, above
    the targets, when two or more targets share them."""
    notes = [set(missing(t.verify).values()) for t in run.targets if t.verify]
    return sorted(set.intersection(*notes)) if len(notes) > 1 else []


def to_html(run: Run) -> str:
    """The run report as one page: the verdict, what was pushed where, the targets, each target's build and checks
    with charts, then the release's details."""
    sub = " · ".join(p for p in (f"{run.kind} report", f"started {run.started_at}" if run.started_at else "",
                                 f"matrix {run.matrix}" if run.matrix else "", run.source, f"imagesmith {__version__}") if p)
    rel = run.release
    return page(
        "run.html.j2", "imagesmith: " + headline(run), "imagesmith report", sub, headline(run), run.ok, run.tone, run=run,
        has_build=run.kind not in ("verify", "release"), has_verify=run.kind not in ("build", "release"), statuses=STATUSES,
        release_where=f"{rel.registry}/{rel.repository}".strip("/") if rel else "",
        release_summary=release_summary(rel) if rel else "",
        release_notes=footnotes(t.release.remark for t in run.targets if t.release), said_once=said_once(run),
        release_json=json.dumps(rel.raw, indent=2, sort_keys=True, default=str) if rel else "",
        anchor=anchor, env_line=env_line, fmt_bytes=fmt_bytes, fmt_value=fmt_value, missing=missing,
        leak_curves=leak_curves, throughputs=throughputs, leak_chart=_safe_svg(svg.leak_chart),
        throughput_chart=_safe_svg(svg.throughput_chart), nvml_charts=_safe_svg(svg.nvml_charts))
