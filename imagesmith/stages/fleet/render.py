"""The fleet report for people and CI: Markdown, JUnit XML, HTML; one row per class.

Pure functions over :class:`FleetReport`; the escaping helpers and the page
style are the ones ``imagesmith report`` uses for every other report.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any, Callable

from imagesmith import __version__
from imagesmith.errors import UserError
from imagesmith.model.fleetreport import CellResult, FleetReport
from imagesmith.report import html
from imagesmith.report import markdown as md
from imagesmith.report.junit import sum_counts, xml_text
from imagesmith.report.model import fmt_value

ICON = {"pass": "✅", "fail": "❌", "cancelled": "⏹"}
COUNTS = ("pass", "warn", "fail", "skip")


def headline(rep: FleetReport) -> str:
    bad = [c for c in rep.cells if not c.ok]
    digests, classes = len(rep.digests()), len({c.klass for c in rep.cells})
    what = f"{digests} image{'s' if digests != 1 else ''} x {classes} class{'es' if classes != 1 else ''}"
    verdict = f"{len(bad)} of {len(rep.cells)} cells did not pass" if bad else f"all {len(rep.cells)} cells passed"
    return f"{what}: {verdict}" + ("; interrupted" if rep.interrupted else "")


def _by_digest(rep: FleetReport) -> list[tuple[str, list[CellResult]]]:
    return [(d, [c for c in rep.cells if c.digest == d]) for d in rep.digests()]


def _verdict(rep: FleetReport, cells: list[CellResult]) -> str:
    held = [k for k in rep.requires if not any(c.klass == k and c.ok for c in cells)]
    return f"held back by {', '.join(held)}" if held else f"passed every required class ({', '.join(rep.requires)})"


def _row(c: CellResult) -> list[Any]:
    counts = "/".join(str(c.summary.get(k, "-")) for k in COUNTS)
    return [f"{ICON.get(c.status, '')} {c.klass}", c.status, c.scheduler, c.job_id or "-", c.state or "-", c.node or "-",
            _secs(c.queued_s), _secs(c.ran_s), counts, c.reason]


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} s"


HEADERS = ["class", "result", "scheduler", "job", "state", "node", "queued", "ran", "pass/warn/fail/skip", "detail"]
FIGURE_HEADERS = ["image", "class", "check", "value", "baseline", "% of baseline", "status"]


def _figure_rows(rep: FleetReport) -> list[list[Any]]:
    return [[c.digest[7:19], c.klass, f.check, fmt_value(f.value, f.unit), fmt_value(f.baseline, f.unit),
             f"{f.percent:.1f}%" if f.percent is not None else "-", f.status] for c in rep.cells for f in c.figures]


# -- Markdown ----------------------------------------------------------------------------------------


def to_markdown(rep: FleetReport) -> str:
    lines = [f"## {'✅' if rep.ok else '❌'} imagesmith fleet: {md.text(headline(rep))}", "",
             md.text(f"started {rep.started_at} · fleet {rep.fleet_file} · tier {rep.tier} · run {rep.run_id}"), ""]
    for _digest, cells in _by_digest(rep):
        lines += [f"### {md.cell(md.Code(cells[0].ref))}", "", md.text(_verdict(rep, cells)), "",
                  *md.table(HEADERS, [_row(c) for c in cells]), ""]
    lines += md.section("Measured against each class's baseline", FIGURE_HEADERS, _figure_rows(rep))
    return "\n".join(lines).rstrip() + "\n"


# -- JUnit -----------------------------------------------------------------------------------------------


def to_junit(rep: FleetReport) -> str:
    """One testsuite per image, one testcase per class; a failed cell is a
    <failure>, a cancelled (interrupted) one <skipped>."""
    root = ET.Element("testsuites", name="imagesmith fleet")
    for _digest, cells in _by_digest(rep):
        suite = ET.SubElement(root, "testsuite", name=xml_text(cells[0].ref), timestamp=xml_text(rep.started_at))
        for c in cells:
            suite.append(_case(c))
        sum_counts(suite, suite.findall("testcase"))
    sum_counts(root, root.findall("testsuite"))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _case(c: CellResult) -> ET.Element:
    case = ET.Element("testcase", classname=xml_text(f"fleet.{c.digest[7:19]}"), name=xml_text(c.klass),
                      time=f"{c.ran_s or 0:.1f}")
    if c.status == "fail":
        ET.SubElement(case, "failure", message=xml_text(c.reason[:500]), type="fleet").text = xml_text(
            f"{c.scheduler} job {c.job_id or '-'} ({c.state or 'not submitted'}) on {c.node or '-'}: {c.reason}")
    elif c.status == "cancelled":
        ET.SubElement(case, "skipped", message=xml_text(c.reason))
    figures = [f"{f.check}: {fmt_value(f.value, f.unit)}" + (f" ({f.percent:.1f}% of baseline)" if f.percent is not None else "")
               for f in c.figures]
    if figures:
        ET.SubElement(case, "system-out").text = xml_text("\n".join(figures))
    return case


# -- HTML --------------------------------------------------------------------------------------------------


def to_html(rep: FleetReport) -> str:
    """The page ``imagesmith report`` draws, one section per image (template ``fleet.html.j2``)."""
    sub = f"fleet report · started {rep.started_at} · {rep.fleet_file} · tier {rep.tier} · run {rep.run_id} · imagesmith {__version__}"
    images = [(cells[0].ref, _verdict(rep, cells), [(c, _row(c)[2:-1]) for c in cells]) for _, cells in _by_digest(rep)]
    return html.page("fleet.html.j2", "imagesmith fleet: " + headline(rep), "imagesmith fleet", sub, headline(rep), rep.ok,
                     images=images, headers=HEADERS, figures=_figure_rows(rep), figure_headers=FIGURE_HEADERS)


RENDERERS: dict[str, Callable[[FleetReport], str]] = {"md": to_markdown, "junit": to_junit, "html": to_html}


def render(rep: FleetReport, fmt: str) -> str:
    if fmt not in RENDERERS:
        raise UserError(f"unknown report format {fmt!r}; use one of {', '.join(RENDERERS)}")
    return RENDERERS[fmt](rep)
