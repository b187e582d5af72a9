"""Inline SVG charts for the HTML report: no scripts, no external assets.

Two shapes, enough for a verification report: ``line_chart`` (series against
x, with a legend) and ``percent_bars`` (horizontal bars on a 0..N % axis with
a reference line at 100 % and an optional mark per bar).

Why hand-made: a plotting library (matplotlib, plotly, pygal) would add tens of
megabytes or a JavaScript runtime to a page that must stay self-contained under
a ``default-src 'none'`` Content-Security-Policy; two chart shapes are ~150 lines.
The price is that escaping is ours: every value that reaches the SVG (titles,
labels, tooltips, colours, class names, tick texts) goes through :func:`esc`,
and coordinates are numbers we computed. The HTML template marks the finished
SVG as safe, so nothing may be interpolated here without :func:`esc`.
"""

from __future__ import annotations

import functools
import html
import math
import textwrap
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from imagesmith import resources
from imagesmith.report.chartdata import GpuRate, LeakCurve, Throughput
from imagesmith.report.model import Check, GpuSeries, Verify, fmt_value

PALETTE = ("#1f6feb", "#d4631b", "#2da44e", "#a371f7", "#cf222e", "#0a8f8f", "#bf8700", "#6e7781")
MAX_POINTS = 1500  # points per line drawn; longer series are thinned
ROW = 26  # pixels per bar
TITLE_LINE = 16  # pixels per line of a title
TITLE_CHAR_PX = 8.0  # the widest average advance of a 13 px bold sans (DejaVu Sans Bold: 7.9); titles wrap by it


def esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


@dataclass(frozen=True)
class Line:
    label: str
    points: tuple[tuple[float, float], ...]
    colour: str
    css: str = "series"
    markers: bool = False  # a dot per point (for few points)


@dataclass(frozen=True)
class Bar:
    label: str
    percent: float  # the bar's value on its axis (a percentage on percent_bars' axis)
    colour: str
    value_text: str  # printed right of the plot
    tooltip: str = ""
    mark: float | None = None  # a dashed mark at this percent (a fail line)
    mark_tooltip: str = ""


@dataclass(frozen=True)
class Frame:
    """Data space -> pixels for one chart."""

    x0: float
    x1: float
    y0: float
    y1: float
    left: int = 64
    top: int = 44
    width: int = 470
    height: int = 200
    right: int = 24  # room after the plot (value labels)

    def px(self, x: float, y: float) -> tuple[float, float]:
        fx = (x - self.x0) / (self.x1 - self.x0)
        fy = (y - self.y0) / (self.y1 - self.y0)
        return round(self.left + fx * self.width, 1), round(self.top + (1 - fy) * self.height, 1)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (steps of 1, 2, 2.5 or 5 × 10^k)."""
    if hi <= lo:
        lo, hi = lo - (abs(lo) * 0.1 or 1), hi + (abs(hi) * 0.1 or 1)
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step + 1e-9) * step
    ticks = [start]
    while ticks[-1] < hi - 1e-9 * step:
        ticks.append(round(start + len(ticks) * step, 10))
    return ticks


def tick_labels(ticks: Sequence[float]) -> list[str]:
    """As many decimals as the tick step needs, the same for every tick of an axis."""
    step = abs(ticks[1] - ticks[0]) if len(ticks) > 1 else 1.0
    exponent = math.floor(math.log10(step) + 1e-9)
    quarter = exponent <= 0 and round(step / 10**exponent, 6) == 2.5  # 0.25 needs two decimals
    return [f"{v:,.{max(0, -exponent) + quarter}f}" for v in ticks]


def decimate(points: Sequence[tuple[float, float]]) -> Sequence[tuple[float, float]]:
    stride = math.ceil(len(points) / MAX_POINTS)
    return points if stride <= 1 else list(points[::stride]) + [points[-1]]


def y_range(ys: Sequence[float], from_zero: bool, min_span: float) -> tuple[float, float]:
    """The data's range; from 0 if asked; at least ``min_span`` wide, centred on the data, but never below 0 when
    no value is (memory, a rate: an axis of bytes that starts at -5 MiB shows something that cannot be)."""
    lo, hi = (min(0.0, *ys) if from_zero else min(ys)), max(ys)
    if hi - lo < min_span:
        mid = (hi + lo) / 2
        lo = max(0.0, mid - min_span / 2) if lo >= 0 else mid - min_span / 2
        hi = lo + min_span
    return lo, hi


def line_chart(title: str, lines: Sequence[Line], x_label: str, y_label: str, y_from_zero: bool = False,
               css: str = "", min_y_span: float = 0.0) -> str:
    """An SVG line chart: axes, ticks, grid, one polyline per line, a legend.

    ``min_y_span``: the y axis covers at least this much, so that noise of a
    few bytes is not drawn as a mountain."""
    xs = [x for ln in lines for x, _ in ln.points]
    ys = [y for ln in lines for _, y in ln.points]
    xt, yt = nice_ticks(min(xs), max(xs)), nice_ticks(*y_range(ys, y_from_zero, min_y_span))
    frame = Frame(xt[0], xt[-1], yt[0], yt[-1])
    parts = [_axes(frame, xt, yt, x_label, y_label)]
    for ln in lines:
        pixels = [frame.px(x, y) for x, y in decimate(ln.points)]
        pts = " ".join(f"{px},{py}" for px, py in pixels)
        parts.append(f'<polyline class="{esc(ln.css)}" points="{pts}" stroke="{esc(ln.colour)}"><title>{esc(ln.label)}</title></polyline>')
        if ln.markers:
            parts.append(f'<g class="markers" fill="{esc(ln.colour)}">'
                         + "".join(f'<circle cx="{px}" cy="{py}" r="2"/>' for px, py in pixels) + "</g>")
    parts.append(_legend(frame, lines))
    return svg(title, frame, "".join(parts), css)


def title_lines(title: str, width: float) -> list[str]:
    """The title in lines that fit ``width`` pixels (words kept whole), so that no chart's title is cut."""
    return textwrap.wrap(title, max(16, int((width - 16) / TITLE_CHAR_PX)), break_on_hyphens=False) or [""]


def svg(title: str, frame: Frame, body: str, css: str = "") -> str:
    """The chart: its whole title on as many lines as it needs (the plot moves down by the extra lines), then ``body``."""
    w = frame.left + frame.width + frame.right
    lines = title_lines(title, w)
    extra = TITLE_LINE * (len(lines) - 1)
    h = frame.top + frame.height + 48 + extra
    heading = "".join(f'<text class="title" x="8" y="{16 + TITLE_LINE * i}">{esc(line)}</text>' for i, line in enumerate(lines))
    body = f'<g transform="translate(0 {extra})">{body}</g>' if extra else body
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart {esc(css)}" viewBox="0 0 {w} {h}" width="{w}" height="{h}" '
            f'role="img" aria-label="{esc(title)}">{heading}{body}</svg>')


@functools.cache
def chart_css() -> str:
    """The charts' styles (``data/report/chart.css``), which the HTML report includes in its page."""
    return resources.data_file("report").joinpath("chart.css").read_text(encoding="utf-8")


def standalone(chart: str) -> str:
    """A chart as an .svg file of its own (the documentation's figures): the same drawing, its styles inside it."""
    head, sep, rest = chart.partition(">")
    return f'<?xml version="1.0" encoding="UTF-8"?>\n{head}{sep}<style>{chart_css()}</style>{rest}\n'



def _axes(f: Frame, xt: Sequence[float], yt: Sequence[float], x_label: str, y_label: str) -> str:
    out = []
    bottom, right = f.top + f.height, f.left + f.width
    for y, text in zip(yt, tick_labels(yt)):
        _, py = f.px(f.x0, y)
        out.append(f'<line class="grid" x1="{f.left}" y1="{py}" x2="{right}" y2="{py}"/>'
                   f'<text class="tick" x="{f.left - 6}" y="{py + 4}" text-anchor="end">{esc(text)}</text>')
    for x, text in zip(xt, tick_labels(xt)):
        px, _ = f.px(x, f.y0)
        out.append(f'<line class="axis" x1="{px}" y1="{bottom}" x2="{px}" y2="{bottom + 4}"/>'
                   f'<text class="tick" x="{px}" y="{bottom + 16}" text-anchor="middle">{esc(text)}</text>')
    out.append(f'<line class="axis" x1="{f.left}" y1="{bottom}" x2="{right}" y2="{bottom}"/>'
               f'<line class="axis" x1="{f.left}" y1="{f.top}" x2="{f.left}" y2="{bottom}"/>'
               f'<text class="label" x="{f.left + f.width / 2}" y="{bottom + 34}" text-anchor="middle">{esc(x_label)}</text>'
               f'<text class="label" transform="translate(14 {f.top + f.height / 2}) rotate(-90)" text-anchor="middle">{esc(y_label)}</text>')
    return "".join(out)


def _legend(f: Frame, lines: Sequence[Line]) -> str:
    """One row under the title: a swatch and a label per line."""
    out, x = [], float(f.left)
    for ln in lines:
        out.append(f'<line class="{esc(ln.css)}" x1="{x}" y1="30" x2="{x + 16}" y2="30" stroke="{esc(ln.colour)}"/>'
                   f'<text class="legend" x="{x + 20}" y="34">{esc(ln.label)}</text>')
        x += 34 + 6.2 * len(ln.label)
    return "".join(out)


def percent_bars(title: str, bars: Sequence[Bar], css: str = "", reference: str = "baseline") -> str:
    """Horizontal bars on a % axis with the 100 % reference line; '' when there are none."""
    if not bars:
        return ""
    return hbars(title, bars, max(110.0, max(b.percent for b in bars) + 5), f"% of {reference}", css, suffix="%",
                 reference=(100.0, reference))


LABEL_CHAR_PX = 6.6  # the widest average advance of an 11 px sans: bar labels set the plot's left edge by it


def hbars(title: str, bars: Sequence[Bar], x_max: float, axis_label: str, css: str = "", suffix: str = "",
          reference: tuple[float, str] | None = None) -> str:
    """Horizontal bars from 0 (``Bar.percent`` is the bar's value on this axis, 0..``x_max``), a row per bar, its
    label left of the plot (the plot starts where the longest label ends), its value text right of it; a line at
    ``reference`` (value, label) when given."""
    xt = nice_ticks(0, x_max)
    left = max(120, round(16 + LABEL_CHAR_PX * max(len(b.label) for b in bars)))
    top = 50 if reference else 36  # the reference's label sits above the plot, clear of the title
    frame = Frame(xt[0], xt[-1], 0, 1, left=left, top=top, width=520, height=ROW * len(bars), right=190)
    rows = "".join(_bar(frame, frame.top + ROW * i, b) for i, b in enumerate(bars))
    return svg(title, frame, _value_axis(frame, xt, axis_label, suffix, reference) + rows, css)


def _value_axis(f: Frame, xt: Sequence[float], axis_label: str, suffix: str, reference: tuple[float, str] | None) -> str:
    out, bottom = [], f.top + f.height
    for x, text in zip(xt, tick_labels(xt)):
        px, _ = f.px(x, 0)
        out.append(f'<line class="grid" x1="{px}" y1="{f.top}" x2="{px}" y2="{bottom}"/>'
                   f'<text class="tick" x="{px}" y="{bottom + 16}" text-anchor="middle">{esc(text)}{esc(suffix)}</text>')
    if reference is not None:
        px, _ = f.px(reference[0], 0)
        out.append(f'<line class="baseline" x1="{px}" y1="{f.top - 8}" x2="{px}" y2="{bottom}"/>'
                   f'<text class="legend" x="{px}" y="{f.top - 12}" text-anchor="middle">{esc(reference[1])}</text>')
    out.append(f'<text class="label" x="{f.left + f.width / 2}" y="{bottom + 34}" text-anchor="middle">{esc(axis_label)}</text>')
    return "".join(out)


def _bar(f: Frame, y: float, b: Bar) -> str:
    x0, _ = f.px(0, 0)
    x1, _ = f.px(min(max(b.percent, 0.0), f.x1), 0)
    out = (f'<text class="tick" x="{f.left - 8}" y="{y + 17}" text-anchor="end">{esc(b.label)}</text>'
           f'<rect class="bar" x="{x0}" y="{y + 5}" width="{max(x1 - x0, 1)}" height="16" fill="{esc(b.colour)}"><title>{esc(b.tooltip)}</title></rect>'
           f'<text class="value" x="{f.left + f.width + 10}" y="{y + 17}">{esc(b.value_text)}</text>')
    if b.mark is not None:
        mx, _ = f.px(min(b.mark, f.x1), 0)
        out += f'<line class="failline" x1="{mx}" y1="{y + 1}" x2="{mx}" y2="{y + ROW - 1}"><title>{esc(b.mark_tooltip)}</title></line>'
    return out


# -- the report's charts --------------------------------------------------------------------------------

STATUS_COLOUR = {"pass": "#1a7f37", "warn": "#9a6700", "fail": "#cf222e", "skip": "#6e7781"}
LEAK_MIN_SPAN_MIB = 8.0  # y axis of a leak chart when the check states no limit
MIB = 2.0**20


def leak_chart(curve: LeakCurve) -> str:
    """Memory samples (MiB) against step, with the fitted line across the sampled range.

    The y axis spans at least what a leak at the check's limit (``threshold``,
    MiB/step) would add over the loop: a clean run looks flat, not like noise."""
    samples = tuple((x, y / MIB) for x, y in curve.points)
    first, last = samples[0][0], samples[-1][0]
    fit = tuple((x, (curve.slope * x + curve.intercept) / MIB) for x in (first, last))
    c = curve.check
    limit = c.threshold if c.unit == "MiB/step" and c.threshold else None
    lines = [Line("samples", samples, PALETTE[0], "series samples", markers=True),
             Line(f"fit {curve.slope / MIB:+.4f} MiB/step", fit, STATUS_COLOUR["fail"], "fit")]
    return line_chart(f"{c.id}: {c.title or 'memory over the loop'}", lines, "step", "MiB in use", css="leak",
                             min_y_span=limit * (last - first) if limit else LEAK_MIN_SPAN_MIB)


def throughput_chart(items: Sequence[Throughput], gpu_name: Callable[[int], str],
                     title: str = "throughput per GPU, % of baseline (dashed: fail line)") -> str:
    """Each GPU's rate as % of its check's baseline; a dashed mark at the check's fail line."""
    bars = [_rate_bar(tp.check, rate, gpu_name) for tp in items for rate in tp.rates if tp.check.baseline]
    return percent_bars(title, bars, "throughput")


def _rate_bar(c: Check, rate: GpuRate, gpu_name: Callable[[int], str]) -> Bar:
    baseline = c.baseline or 1.0
    pct = 100 * rate.value / baseline
    below = c.threshold is not None and rate.value < c.threshold
    who = f"GPU {rate.gpu}" if rate.gpu.isdigit() else ""
    name = gpu_name(int(rate.gpu)) if rate.gpu.isdigit() else ""
    mark = 100 * c.threshold / baseline if c.threshold is not None else None
    return Bar(
        label=f"{c.id} · {who}" if who else c.id, percent=pct, colour=STATUS_COLOUR["fail" if below else ("warn" if c.status == "warn" else "pass")],
        value_text=f"{fmt_value(rate.value, c.unit)} · {pct:.1f}%",
        tooltip=f"{c.id} {who} {name}: {fmt_value(rate.value, c.unit)} = {pct:.1f}% of baseline {fmt_value(c.baseline, c.unit)}",
        mark=mark, mark_tooltip=f"fail line {fmt_value(c.threshold, c.unit)} ({mark or 0:.0f}% of baseline)")


# metric, title, unit, y axis from zero
NVML_CHARTS = (("memory_used_mib", "memory used", "MiB", True), ("utilization_gpu_pct", "GPU utilisation", "%", True),
               ("temperature_c", "temperature", "°C", False), ("power_w", "power", "W", True))


def nvml_charts(v: Verify) -> list[str]:
    """One chart per metric, one line per GPU; metrics nobody recorded are left out."""
    out = []
    for key, title, unit, from_zero in NVML_CHARTS:
        lines = [line for i, g in enumerate(v.nvml.gpus) if (line := _gpu_line(v, g, i, key))]
        if lines:
            out.append(line_chart(title, lines, "seconds", unit, y_from_zero=from_zero, css=f"nvml {key}"))
    return out


def _gpu_line(v: Verify, g: GpuSeries, i: int, key: str) -> Line | None:
    pts = tuple((t, y) for t, y in zip(g.t, g.values.get(key, ())) if y is not None)
    if not pts:
        return None
    name = g.name or v.gpu_name(g.gpu)
    label = f"GPU {g.gpu}" + (f" {name}" if name and len(v.nvml.gpus) == 1 else "")
    return Line(label, pts, PALETTE[i % len(PALETTE)])
