"""Pages as people see them: the HTML report of a real release and documentation pages, opened in headless
Chromium (Debian's `chromium`, which `make host` installs) at 1,400 × 900 pixels.

Checked in the browser, after layout: nothing is wider than its column (no element past the column's right edge,
no code block or table that scrolls sideways), every chart's title is drawn whole inside its chart, pictures
load, and the report's verdict and what it pushed where are above the fold. Screenshots go to build/screenshots/
(CI keeps them as artifacts).

How: each page is copied with a small script added (the report's Content-Security-Policy, which forbids scripts,
is taken out of the copy only), Chromium runs it with --dump-dom and --screenshot in one start, and the script
leaves its measurements in the DOM as JSON. Material's two table boxes reach 0.8 rem past the text column on
purpose (their padding); they are measured by the table they hold and by whether they scroll.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from imagesmith import report
from tests.conftest import ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make host installs it): "
                                                         "the pages were not opened in a browser")
WIDTH, HEIGHT = 1400, 900
SHOTS = ROOT / "build" / "screenshots"
LOCAL_RUN = ROOT / "tests" / "fixtures" / "reports" / "local-release-run.json"  # `make release` without a GPU
SLACK = 4  # pixels: an inline code's padding at the end of a line may reach past the column by 2 px

# Runs in the page once it has loaded; writes {fold, overflow, scrolls, titles, images, marks} into #imagesmith-measure.
MEASURE = """
<script>
addEventListener('load', () => setTimeout(() => {
  const column = document.querySelector(COLUMN);
  const WRAPPERS = ['md-typeset__scrollwrap', 'md-typeset__table'];  // Material's table boxes, padded past the text
  const edge = column.getBoundingClientRect().right + SLACK;
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
    (typeof el.className === 'string' && el.className ? '.' + el.className.trim().split(/\\s+/).join('.') : '');
  const text = el => (el.textContent || '').trim().replace(/\\s+/g, ' ').slice(0, 60);
  const shown = el => { const s = getComputedStyle(el); const r = el.getBoundingClientRect();
    return s.display !== 'none' && s.visibility !== 'hidden' && r.width > 0 && r.height > 0; };
  const out = {fold: innerHeight, width: innerWidth, overflow: [], scrolls: [], titles: [], images: [], marks: {}};
  for (const el of column.querySelectorAll('*')) {
    if (!shown(el) || el.closest('svg') && el.tagName.toLowerCase() !== 'svg') continue;
    const r = el.getBoundingClientRect();
    if (r.right > edge && !WRAPPERS.some(c => el.classList.contains(c)))
      out.overflow.push([name(el), Math.round(r.right - edge), text(el)]);
    const s = getComputedStyle(el);
    if (['auto', 'scroll'].includes(s.overflowX) && el.scrollWidth > el.clientWidth + 1)
      out.scrolls.push([name(el), el.scrollWidth - el.clientWidth, text(el)]);
  }
  for (const svg of column.querySelectorAll('svg[role=img]')) {
    const box = svg.viewBox.baseVal;
    const lines = [...svg.querySelectorAll('text.title')];
    const widest = Math.max(0, ...lines.map(t => t.getBBox().x + t.getComputedTextLength()));
    out.titles.push({label: svg.getAttribute('aria-label'), drawn: lines.map(t => t.textContent).join(' '),
                     right: widest, width: box.width});
  }
  for (const img of column.querySelectorAll('img'))
    out.images.push({src: img.getAttribute('src'), loaded: img.complete && img.naturalWidth > 0,
                     right: img.getBoundingClientRect().right, edge: edge});
  for (const [key, selector] of Object.entries(MARKS)) {
    const el = document.querySelector(selector);
    out.marks[key] = el ? {top: el.getBoundingClientRect().top, bottom: el.getBoundingClientRect().bottom} : null;
  }
  const pre = document.createElement('pre');
  pre.id = 'imagesmith-measure';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}, 200));
</script>
"""


def chromium(args: list[str], page: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    command = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--no-first-run", "--hide-scrollbars", f"--user-data-dir={profile}",
               f"--window-size={WIDTH},{HEIGHT}", "--virtual-time-budget=2000", *args, page.as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def measure(page: Path, column: str, marks: dict[str, str], tmp: Path, shot: str = "") -> dict[str, Any]:
    """Open a copy of ``page`` (beside it, so that its assets load) with the measuring script in it; with ``shot``,
    its first screen is saved as build/screenshots/<shot> too."""
    html = page.read_text(encoding="utf-8")
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html)
    script = MEASURE.replace("COLUMN", json.dumps(column)).replace("MARKS", json.dumps(marks)).replace("SLACK", str(SLACK))
    copy = page.with_name(f"measured-{page.name}")
    copy.write_text(html.replace("</body>", script + "</body>"), encoding="utf-8")
    if shot:
        SHOTS.mkdir(parents=True, exist_ok=True)
    dom = chromium(["--dump-dom", *([f"--screenshot={SHOTS / shot}"] if shot else [])], copy, tmp).stdout
    assert not shot or (SHOTS / shot).stat().st_size > 10_000, f"{shot}: an empty screenshot"
    found = re.search(r'<pre id="imagesmith-measure">(.*?)</pre>', dom, re.S)
    assert found, f"the measuring script did not run in {page}"
    result: dict[str, Any] = json.loads(found.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
                                        .replace("&amp;", "&"))
    return result


def readable(m: dict[str, Any]) -> None:
    """Nothing past its column, nothing scrolling sideways, every chart's title whole, every picture loaded."""
    assert m["width"] == WIDTH
    assert m["overflow"] == [], "wider than the column (element, pixels past its edge, text)"
    assert m["scrolls"] == [], "scrolls sideways (element, hidden pixels, text)"
    for t in m["titles"]:
        assert t["drawn"] == t["label"] and t["right"] <= t["width"], f"a chart's title is cut: {t}"
    assert [i for i in m["images"] if not i["loaded"] or i["right"] > i["edge"]] == []


def html_of(path: Path) -> str:
    """The HTML report of a report file (parsed as `imagesmith report` parses it, without the schema check the
    loader adds: the layout is what is under test here)."""
    return report.to_html(report.parse(json.loads(path.read_text(encoding="utf-8")), str(path)))


# -- the HTML report --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def report_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    page = tmp_path_factory.mktemp("report") / "run-report.html"
    page.write_text(html_of(LOCAL_RUN), encoding="utf-8")
    return page


def test_the_report_puts_the_verdict_and_the_release_above_the_fold(report_page: Path, tmp_path: Path) -> None:
    m = measure(report_page, "main", {"verdict": ".verdict", "released": "#released h2", "release_table": "#released table"},
                tmp_path, "run-report.png")
    readable(m)
    marks = m["marks"]
    assert marks["verdict"]["bottom"] <= m["fold"] and marks["released"]["bottom"] <= m["fold"]
    assert marks["release_table"]["top"] < m["fold"]  # the tags and digests start on the first screen


def test_every_chart_of_a_gpu_report_keeps_its_title(tmp_path: Path) -> None:
    """A standard-tier run on 2 × H200: leak charts with long titles, throughput bars, NVML series."""
    page = tmp_path / "h200x2.html"
    page.write_text(html_of(ROOT / "bench" / "results" / "quick-tier-h200" / "clean-standard-final.json"), encoding="utf-8")
    m = measure(page, "main", {}, tmp_path, "h200-standard-report.png")
    assert len(m["titles"]) >= 4
    readable(m)


# -- the documentation ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False, env={"NO_MKDOCS_2_WARNING": "1",
                                                                                      "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.parametrize(("page", "pictures"), [("quickstart", 1), ("benchmarks", 6)])
def test_documentation_pages_fit_their_column(site: Path, page: str, pictures: int, tmp_path: Path) -> None:
    m = measure(site / page / "index.html", ".md-content__inner", {}, tmp_path, f"docs-{page}.png")
    readable(m)
    assert len(m["images"]) >= pictures


def test_the_benchmark_charts_keep_their_titles(site: Path, tmp_path: Path) -> None:
    """The charts the Benchmarks page shows as pictures, drawn inline in one page so that their text is measured."""
    charts = sorted((site / "assets" / "bench").glob("*.svg"))
    body = "".join(f"<div>{c.read_text(encoding='utf-8').split('?>', 1)[1]}</div>" for c in charts)
    page = tmp_path / "charts.html"
    page.write_text(f'<!doctype html><html><body><main style="max-width:1300px">{body}</main></body></html>')
    m = measure(page, "main", {}, tmp_path)
    assert len(m["titles"]) == len(charts) >= 6
    readable(m)
