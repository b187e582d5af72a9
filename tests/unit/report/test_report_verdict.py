"""Reports that put the verdict first: a pass on a GPU and a pass without one never look alike, what was pushed where
comes under the verdict, a note many targets share is said once, and release.md reads well raw and rendered on
GitLab and GitHub (no table wider than six columns, digests, no escaped entities). The release alone renders too."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from imagesmith import cli, report
from imagesmith.report.markdown import release_document
from imagesmith.report.model import headline

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "reports"
LOCAL = FIXTURES / "local-release-run.json"  # `make release` of examples/local.yaml on a host without a GPU
BASE = "2.14.1-cu130-py3.11-debian12-base"
CPU_NOTE = "immutable tag only, marked -not-gpu-verified, no floating tags"
MAX_COLUMNS = 6


def local() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(LOCAL.read_text())
    return doc


def outside_raw_json(page: str) -> str:
    """The page without its collapsed release.json (which holds every note as the release wrote it)."""
    return re.sub(r"<details><summary>release.json</summary><pre>.*?</pre></details>", "", page, flags=re.S)


# -- the verdict ---------------------------------------------------------------------------------------------------


def test_a_release_of_cuda_images_verified_without_a_gpu_is_not_green() -> None:
    run = report.load(LOCAL)
    assert headline(run) == "all 7 targets passed; 5 not GPU-verified (CPU mode)"
    assert (run.ok, run.tone) == (True, "unvetted")
    page = report.to_html(run)
    assert '<p class="verdict unvetted">all 7 targets passed; 5 not GPU-verified (CPU mode)</p>' in page
    badges = re.findall(r'<span class="badge s-(\w+)">(passed[^<]*)</span>', page.split('id="targets"')[1].split("</table>")[0])
    assert sorted(set(badges)) == [("pass", "passed"), ("unvetted", "passed, not GPU-verified (CPU mode)")]
    assert report.to_markdown(run).startswith("## ⚠️ imagesmith run: all 7 targets passed; 5 not GPU-verified (CPU mode)\n")


def sharing(exclusive: bool | None) -> dict[str, Any]:
    if exclusive is None:
        return {"exclusive": None, "allowed": False, "foreign": [], "reason": "the engine is remote: nothing watched the GPU"}
    foreign = [] if exclusive else [{"gpu": 0, "uuid": "GPU-1", "pid": 4242, "name": "python3", "used_bytes": 2**30, "seen": "both"}]
    return {"exclusive": exclusive, "allowed": False, "foreign": foreign, "reason": "watched"}


@pytest.mark.parametrize(("exclusive", "status", "tone", "verdict"), [
    (True, "passed, GPU-verified on 1 GPU", "pass", "ok"),
    (None, "passed, not GPU-verified (GPU exclusivity not measured)", "unvetted", "unvetted"),
    (False, "passed, not GPU-verified (the GPU was not exclusive to the run)", "unvetted", "unvetted"),
], ids=["exclusive", "not-measured", "not-exclusive"])
def test_the_badge_says_how_a_cuda_image_passed(exclusive: bool | None, status: str, tone: str, verdict: str) -> None:
    doc = json.loads((FIXTURES / "run-report.json").read_text())["verify"][BASE] | {"sharing": sharing(exclusive)}
    run = report.parse(doc, "verify.json")
    (target,) = run.targets
    assert (target.status, target.tone, run.tone) == (status, tone, verdict)
    page = report.to_html(run)
    assert f'<p class="verdict {verdict}">the target {status}</p>' in page
    assert f'<span class="badge s-{tone}">{status}</span>' in page


def test_a_cpu_image_passes_plainly() -> None:
    run = report.parse(json.loads((FIXTURES / "verify-cpu.json").read_text()), "verify.json")
    assert (run.targets[0].status, run.tone, headline(run)) == ("passed", "ok", "the target passed")


# -- the page: what was pushed where first, each note once ----------------------------------------------------------


def test_what_was_pushed_where_comes_under_the_verdict() -> None:
    page = report.to_html(report.load(LOCAL))
    order = [page.index(mark) for mark in ('class="verdict', 'id="released"', 'id="targets"', f'id="t-{BASE}"', 'id="release-details"')]
    assert order == sorted(order)
    released = page.split('id="released"')[1].split("</section>")[0]
    assert "<code>127.0.0.1:5000/imagesmith/local</code>" in released and "7 images pushed, 0 unchanged, 0 not released" in released
    digests = [t["digest"][:19] for t in local()["release"]["targets"]]
    assert [d for d in digests if f"<code>{d}</code>" not in released] == []


def test_a_note_many_targets_share_is_said_once() -> None:
    page = outside_raw_json(report.to_html(report.load(LOCAL)))
    assert page.count(CPU_NOTE) == 1  # the release policy's note on 5 targets: once, and each row names its number
    assert page.count("<td class=\"num\">note 1</td>") == 5
    assert page.count("No throughput measurements in this report.") == 1  # said for every target, above them
    assert "For every target: " in page


def test_a_note_of_one_target_stays_with_it() -> None:
    page = report.to_html(report.parse(json.loads((FIXTURES / "verify-cpu.json").read_text()), "verify.json"))
    assert "For every target" not in page and "No throughput measurements in this report." in page


# -- release.md ----------------------------------------------------------------------------------------------------


def tables(md: str) -> list[list[str]]:
    out: list[list[str]] = [[]]
    for line in md.splitlines():
        if line.startswith("|"):
            out[-1].append(line)
        elif out[-1]:
            out.append([])
    return [t for t in out if t]


def columns(row: str) -> int:
    return row.replace("\\|", "").count("|") - 1


def test_release_md_reads_well_raw_and_rendered() -> None:
    rel = local()["release"]
    md = release_document(rel)
    assert [max(columns(r) for r in t) for t in tables(md) if max(columns(r) for r in t) > MAX_COLUMNS] == []
    assert re.findall(r"&[a-z]+;|&#\d+;|\\[()]", md) == []  # the raw text has no entities, no escaped parentheses
    assert "nvidia-ctk runtime configure --runtime=docker && systemctl restart docker" in md
    assert md.count(CPU_NOTE) == 1 and md.count("| note 1 |") == 5
    assert "docker-image-id@" not in md  # digests, never image IDs
    for t in rel["targets"]:
        row = next(line for line in md.splitlines() if line.startswith(f"| {t['target']} | "))
        assert f"`{t['digest'][:19]}`" in row and f"`{t['tag']}`" in row and "signed by local" in row
    assert "**OK**: 7 images pushed, 0 unchanged, 0 not released; floating tags: 2 created." in md
    evidence = md.split("## Evidence attached")[1]
    assert len(tables(evidence)[0]) == 2 + 7  # one row per released digest, not one per artifact
    html = MarkdownIt("commonmark").enable("table").render(md)
    assert "&amp;amp;" not in html and "nvidia-ctk runtime configure --runtime=docker &amp;&amp; systemctl" in html


def test_the_ci_summary_keeps_to_six_columns() -> None:
    for name in ("verify-gpu", "run-report", "build-failed"):
        md = report.to_markdown(report.parse(json.loads((FIXTURES / f"{name}.json").read_text()), f"{name}.json"))
        assert [len(t) for t in tables(md) if max(columns(r) for r in t) > MAX_COLUMNS] == [], name


# -- the release alone ---------------------------------------------------------------------------------------------


def test_report_renders_a_release_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "release.json"
    path.write_text(json.dumps(local()["release"]))
    for fmt in ("html", "md", "junit"):
        out = tmp_path / f"release.{fmt}"
        with pytest.raises(SystemExit) as done:
            cli.main(["report", str(path), "--format", fmt, "--out", str(out)])
        assert done.value.code == 0, capsys.readouterr().err
    page = (tmp_path / "release.html").read_text()
    assert '<p class="verdict unvetted">all 7 targets released; 5 not GPU-verified (CPU mode)</p>' in page
    assert 'id="targets"' not in page and 'href="#t-' not in page  # nothing but the release to show: no empty sections
    assert "## ⚠️ imagesmith release: all 7 targets released" in (tmp_path / "release.md").read_text()


def test_a_failed_release_reads_red() -> None:
    rel = copy.deepcopy(local()["release"])
    rel["targets"][1] |= {"status": "failed", "error": "push refused: 401", "digest": None}
    rel["ok"] = False
    run = report.parse(rel, "release.json")
    assert (headline(run), run.tone) == ("1 of 7 targets not released; the release failed", "bad")


# -- charts: whole titles, sane axes ---------------------------------------------------------------------------


def leak(title: str, mib: float, threshold: float | None = None) -> str:
    from imagesmith.report.chartdata import LeakCurve
    from imagesmith.report.model import Check
    from imagesmith.report.svg import leak_chart

    check = Check("leak.probe", "pass", title=title, unit="MiB/step", threshold=threshold)
    points = tuple((float(step), mib * 2**20 + (step % 3) * 1024) for step in range(0, 60, 2))
    return leak_chart(LeakCurve(check, points, 0.0, mib * 2**20))


def test_a_long_chart_title_is_drawn_whole_on_lines_that_fit() -> None:
    import xml.etree.ElementTree as ET

    from imagesmith.report.svg import TITLE_CHAR_PX

    title = "short training loop: allocated memory and host RSS stay flat, measured over every step of the loop"
    root = ET.fromstring(leak(title, 64))
    width = float(root.get("width", 0))
    lines = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text") if t.get("class") == "title"]
    assert len(lines) >= 2 and " ".join(lines) == root.get("aria-label") == f"leak.probe: {title}"
    assert [line for line in lines if 8 + len(line) * TITLE_CHAR_PX > width] == []


@pytest.mark.parametrize("mib", [0.0, 0.3, 3.0, 64.0])
def test_a_flat_leak_chart_never_shows_negative_memory(mib: float) -> None:
    ticks = re.findall(r'<text class="tick" x="58" y="[\d.]+" text-anchor="end">([^<]+)</text>', leak("memory", mib))
    values = [float(t.replace(",", "")) for t in ticks]
    assert values and min(values) >= 0 and min(values) <= mib <= max(values)
    assert max(values) - min(values) >= 8  # a flat line on an axis of at least 8 MiB: noise is not drawn as a mountain
