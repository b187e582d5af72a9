"""Reports from report.json: parsing (exact errors), Markdown, JUnit (read back
with junitparser), self-contained HTML with SVG charts (geometry checked)."""

from __future__ import annotations

import copy
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, cast

import pytest
from junitparser import Failure, JUnitXml, Skipped
from markdown_it import MarkdownIt

from imagesmith import report
from imagesmith.errors import UserError
from imagesmith.report import chartdata
from imagesmith.report import svg as charts

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "reports"
CV_LOG = "tests/fixtures/reports/logs/cv-build.log"
SVG = "{http://www.w3.org/2000/svg}"
MIB = 2**20


def raw(name: str) -> dict[str, Any]:
    return cast(dict[str, Any], json.loads((FIXTURES / f"{name}.json").read_text()))


def run_of(name: str, doc: dict[str, Any] | None = None) -> report.Run:
    """Parse a fixture; build logs are read from the fixture folder (no cwd dependence)."""
    logs = {CV_LOG: (FIXTURES / "logs" / "cv-build.log").read_text().splitlines()}
    return report.parse(doc if doc is not None else raw(name), f"{name}.json", lambda log: logs.get(log, []))


# -- parsing ---------------------------------------------------------------------------------------------

KINDS = [
    ("verify-cpu", "verify", {"2.13.0-cpu-py3.11-debian12-base": "passed"}),
    ("verify-gpu", "verify", {"2.14.1-cu130-py3.11-debian12-base": "failed"}),
    ("build-failed", "build", {"2.14.1-cu130-py3.11-debian12-base": "built",
                               "2.14.1-cu130-py3.11-debian12-cv": "build failed",
                               "2.14.1-cu130-py3.11-debian12-project": "build skipped"}),
    ("run-report", "run", {"2.14.1-cu130-py3.11-debian12-base": "passed, GPU-verified on 1 GPU",
                           "2.14.1-cu130-py3.11-debian12-nlp": "not verified"}),
]


@pytest.mark.parametrize("name, kind, statuses", KINDS, ids=[k[0] for k in KINDS])
def test_each_schema_parses_into_targets(name: str, kind: str, statuses: dict[str, str]) -> None:
    run = run_of(name)
    assert run.kind == kind
    assert {t.id: t.status for t in run.targets} == statuses
    assert run.ok == (name == "verify-cpu")


def _with(path: tuple[Any, ...], value: Any, base: str = "verify-gpu") -> dict[str, Any]:
    """A fixture with the value at ``path`` (keys and list indexes) replaced."""
    doc = copy.deepcopy(raw(base))
    *parents, last = path
    node: Any = doc
    for key in parents:
        node = node[key]
    node[last] = value
    return doc


FIX = "; is this the report imagesmith verify wrote?"  # the verify report's reader says what it expects
BAD = [
    pytest.param([], "x.json: report: expected an object, got a list", id="not-an-object"),
    pytest.param({"schema": "imagesmith.plan/1"},
                 "x.json: schema: 'imagesmith.plan/1' is not one of imagesmith.build-report/1, imagesmith.verify-report/1, "
                 "imagesmith.run-report/1, imagesmith.release/1; is this an imagesmith report?", id="other-schema"),
    pytest.param(_with(("checks",), {"id": "x"}), "x.json: report.checks: expected a list, got an object" + FIX, id="checks-not-list"),
    pytest.param(_with(("checks", 2, "status"), "ok"), "x.json: report.checks[2].status: expected one of pass, warn, fail, skip, inconclusive, got 'ok'" + FIX,
                 id="bad-status"),
    pytest.param(_with(("sharing",), {"exclusive": "no", "allowed": False, "foreign": []}),
                 "x.json: report.sharing.exclusive: expected true, false or null, got 'no'" + FIX, id="sharing-exclusive"),
    pytest.param(_with(("sharing",), {"exclusive": False, "allowed": False, "foreign": [
        {"gpu": 0, "uuid": "GPU-1", "pid": "4242", "name": None, "used_bytes": None, "seen": "both"}]}),
                 "x.json: report.sharing.foreign[0].pid: expected a whole number or null, got text" + FIX, id="sharing-pid"),
    pytest.param(_with(("sharing",), {"exclusive": False, "allowed": False, "foreign": [
        {"gpu": 0, "uuid": "GPU-1", "pid": 1, "name": None, "used_bytes": None, "seen": "later"}]}),
                 "x.json: report.sharing.foreign[0].seen: expected one of start, end, both, during, got 'later'" + FIX, id="sharing-seen"),
    pytest.param(_with(("checks", 4, "baseline"), "784"), "x.json: report.checks[4].baseline: expected a number, got '784'" + FIX,
                 id="baseline-text"),
    pytest.param(_with(("targets", 1, "status"), ["failed"], "build-failed"), "x.json: targets[1].status: expected text, got a list",
                 id="build-status-list"),
    pytest.param(_with(("targets", 0, "target"), "../../etc", "build-failed"), "x.json: targets[0].target: '../../etc' is not a target id",
                 id="build-target-path"),
    pytest.param(_with(("build", "targets", 0, "seconds"), "12", "run-report"), "x.json: build.targets[0].seconds: expected a number, got '12'",
                 id="run-build-seconds-text"),
    pytest.param(_with(("build", "targets", 0, "staged"), {"repository": "harbor.example.com/ml/staging", "tag": "t", "digest": "sha256:x"},
                       "local-release-run"),
                 "x.json: build.targets[0].staged.digest: 'sha256:x' is not a valid value", id="run-build-staged-digest"),
    pytest.param(_with(("verify", "2.14.1-cu130-py3.11-debian12-base"), {"schema": "imagesmith.build-report/1"}, "run-report"),
                 "x.json: verify.2.14.1-cu130-py3.11-debian12-base.schema: expected 'imagesmith.verify-report/1', "
                 "got 'imagesmith.build-report/1'" + FIX, id="run-with-wrong-verify"),
]


@pytest.mark.parametrize("doc, message", BAD)
def test_bad_reports_say_where(doc: Any, message: str) -> None:
    with pytest.raises(UserError) as info:
        report.parse(doc, "x.json")
    assert str(info.value) == message


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "r.json"
    broken.write_text('{"schema": \n')
    with pytest.raises(UserError, match=r"r.json:2:1: not JSON \(Expecting value\)"):
        report.load(broken)
    with pytest.raises(UserError, match=r"missing.json: cannot be read \(No such file or directory\)"):
        report.load(tmp_path / "missing.json")


def test_load_reads_the_tail_of_a_failed_build_log(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text("".join(f"line {i}\n" for i in range(30)) + "\x1b[31mERROR: boom\x1b[0m\n")
    doc = _with(("targets", 1, "log"), str(log), "build-failed")
    path = tmp_path / "report.json"
    path.write_text(json.dumps(doc))
    tail = report.load(path).targets[1].build.log_tail  # type: ignore[union-attr]
    assert len(tail) == report.LOG_TAIL_LINES and tail[-1] == "ERROR: boom" and tail[0] == "line 11"


def test_a_verify_report_without_image_is_named_after_its_file() -> None:
    doc = _with(("image",), None, "verify-cpu")
    assert report.parse(doc, "bench/h200-quick.json").targets[0].id == "h200-quick"


# -- the data the charts show, in the shapes the payload and hostinfo write ----------------------------------


def test_leak_curve_uses_the_payloads_fit() -> None:
    (curve,) = report.leak_curves(run_of("verify-gpu").targets[0].verify)  # type: ignore[arg-type]
    assert curve.check.id == "leak.cuda" and len(curve.points) == 60
    assert (curve.slope, curve.intercept) == (float(MIB), float(512 * MIB))


def test_leak_curve_without_a_fit_is_fitted_with_the_payloads_least_squares() -> None:
    (curve,) = report.leak_curves(run_of("run-report").targets[0].verify)  # type: ignore[arg-type]
    assert curve.check.id == "leak.device" and len(curve.points) == 200
    assert abs(curve.slope) < 50  # bytes/step: noise of +-4 KiB around a flat line
    assert curve.intercept == pytest.approx(300 * MIB, abs=8192)


LEAK_DATA = [
    ({"steps": [0, 1, 2], "bytes": [1, 3, 5]}, [(2.0, 1.0)]),
    ({"steps": [10, 20, 30], "bytes": [7, 7, 7]}, [(0.0, 7.0)]),
    ({"steps": [5, 5], "bytes": [1, 3]}, []),  # one step: no line to draw
    ({"steps": [0, 1, 2], "bytes": [1, None, 5]}, [(2.0, 1.0)]),  # a sample NVML could not read is left out
    ({"samples": 3}, []),  # no series
]


@pytest.mark.parametrize("data, expected", LEAK_DATA)
def test_leak_fit(data: dict[str, Any], expected: list[tuple[float, float]]) -> None:
    doc = _with(("checks", 7, "data"), data)
    curves = report.leak_curves(run_of("x", doc).targets[0].verify)  # type: ignore[arg-type]
    assert [(c.slope, c.intercept) for c in curves] == [pytest.approx(e) for e in expected]


PER_GPU = [
    ({"per_gpu_tflops": {"0": 776.0, "1": None}, "spread_percent": 1.1}, [("0", 776.0)]),
    ({"per_gpu_gbps": {"3": 4115.1}}, [("3", 4115.1)]),
    ({"per_gpu_gbps": [4115.1]}, []),  # not a shape the payload writes
    ({"spread_percent": 1.1}, []),
]


@pytest.mark.parametrize("data, expected", PER_GPU)
def test_per_gpu_rates(data: dict[str, Any], expected: list[tuple[str, float]]) -> None:
    assert [(r.gpu, r.value) for r in chartdata.per_gpu(data)] == expected


def test_nvml_series_per_gpu() -> None:
    two = run_of("verify-gpu").targets[0].verify.nvml  # type: ignore[union-attr]
    assert [(g.gpu, len(g.t)) for g in two.gpus] == [(0, 120), (1, 120)] and two.interval_s == 0.25
    assert two.gpus[1].values["utilization_gpu_pct"][50] == 97
    one = run_of("run-report").targets[0].verify.nvml  # type: ignore[union-attr]
    assert [(g.gpu, g.name, len(g.t)) for g in one.gpus] == [(0, "NVIDIA H200", 80)]
    assert one.gpus[0].values["utilization_gpu_pct"][40] == 99


def rendered(md: str) -> str:
    """The Markdown as GitHub and GitLab show it (CommonMark with GFM tables, by markdown-it-py)."""
    html: str = MarkdownIt("commonmark").enable("table").render(md)
    return html


# -- Markdown --------------------------------------------------------------------------------------------------


def test_markdown_of_a_gpu_run() -> None:
    md = report.to_markdown(run_of("verify-gpu"))
    assert md.startswith("## ❌ imagesmith verify: the target failed\n")
    assert "| ❌ 2.14.1-cu130-py3.11-debian12-base | failed | 5 pass, 2 warn, 3 fail, 1 skip |" in md
    failed = md.split("### Failed checks")[1].split("###")[0]
    assert [row.split(" | ")[1] for row in failed.splitlines() if row.startswith("| 2.14")] == [
        "gemm.fp32", "leak.cuda", "layers.nlp.tokenizer (optional)"]
    assert "tokenizer returned \\<script>alert(\"x\")\\</script> & \\| pipes for 'hello'" in md
    assert "<script" not in rendered(md)
    measured = md.split("### Measured against baseline")[1]
    assert measured.count("\n| 2.14") == 6
    assert "| 2.14.1-cu130-py3.11-debian12-base | gemm.fp32 · 0 | 30.1 TFLOP/s | 61.4% (49.0 TFLOP/s) | 36.8 TFLOP/s | fail |" in measured


def test_markdown_of_a_failed_build_shows_the_log_tail_without_escape_codes() -> None:
    md = report.to_markdown(run_of("build-failed"))
    assert md.startswith("## ❌ imagesmith build: 2 of 3 targets did not build\n")
    assert "| target | status | build |\n" in md  # a build report has no check counts
    failures = md.split("### Build failures")[1]
    assert "**2.14.1-cu130-py3.11-debian12-cv**: The command '/bin/sh -c pip install opencv-python-headless==9.9.9'" in failures
    assert ("ERROR: No matching distribution found for opencv-python-headless==9.9.9\n"
            "ERROR: The command '/bin/sh -c pip install opencv-python-headless==9.9.9' returned a non-zero code: 1\n~~~\n") in failures
    assert "\x1b" not in md and "\x07" not in md


def test_markdown_of_a_clean_cpu_run_has_no_problem_sections() -> None:
    md = report.to_markdown(run_of("verify-cpu"))
    assert md.startswith("## ✅ imagesmith verify: the target passed\n")
    assert "###" not in md


def test_markdown_of_a_run_lists_the_release() -> None:
    md = report.to_markdown(run_of("run-report"))
    assert md.startswith("## ❌ imagesmith run: 1 of 2 targets failed; the release failed\n")
    assert "### Release 20261130: 127.0.0.1:5000/imagesmith/local\n\n**FAILED**: 1 image pushed, 0 unchanged, 1 not released" in md
    assert ("| 2.14.1-cu130-py3.11-debian12-base | pushed | `2.14.1-cuda13.0-py3.11-debian12-base-20261130`"
            " | `sha256:4d4d4d4d4d4d` | GPU-verified on 1 GPU | - |") in md
    assert "#### Floating tags" in md and "#### Problems\n\n- 2.14.1-cu130-py3.11-debian12-nlp: not verified" in md


def test_release_md_is_the_release_part_of_a_run_report() -> None:
    """One release Markdown: release.md (publish) and a run report's release section are one renderer."""
    doc = raw("run-report")["release"]
    document = report.markdown.release_document(doc)
    assert document.startswith("# Release 20261130: 127.0.0.1:5000/imagesmith/local\n")
    section = report.to_markdown(run_of("run-report")).split("### Release", 1)[1]
    assert document.split("# Release", 1)[1].replace("## ", "#### ").strip() == section.strip()


# -- JUnit ---------------------------------------------------------------------------------------------------------


def junit(name: str) -> JUnitXml:
    return JUnitXml.fromstring(report.to_junit(run_of(name)))


def outcome(case: Any) -> str:
    kinds = {type(r) for r in case.result}
    return "failure" if Failure in kinds else "skipped" if Skipped in kinds else "passed"


JUNIT_COUNTS = [
    # name, tests, failures, skipped
    ("verify-cpu", 9, 0, 4),
    ("verify-gpu", 11, 2, 2),  # the failed optional check is skipped, not a failure
    ("build-failed", 3, 1, 1),
    ("run-report", 9, 1, 1),  # base: build + 4 checks + release; nlp: build, verify (missing: failure), release (skipped)
]


@pytest.mark.parametrize("name, tests, failures, skipped", JUNIT_COUNTS, ids=[c[0] for c in JUNIT_COUNTS])
def test_junit_counts_read_back_by_a_junit_parser(name: str, tests: int, failures: int, skipped: int) -> None:
    xml = junit(name)
    cases = [case for suite in xml for case in suite]
    assert len(cases) == tests
    assert sum(outcome(c) == "failure" for c in cases) == failures
    assert sum(outcome(c) == "skipped" for c in cases) == skipped
    root = ET.fromstring(report.to_junit(run_of(name)))
    assert (root.get("tests"), root.get("failures"), root.get("skipped"), root.get("errors")) == (
        str(tests), str(failures), str(skipped), "0")


def test_junit_one_testcase_per_target_and_check() -> None:
    cases = {(c.classname, c.name): c for suite in junit("verify-gpu") for c in suite}
    base = "2.14.1-cu130-py3.11-debian12-base"
    assert outcome(cases[(base, "gemm.fp32")]) == "failure"
    assert cases[(base, "gemm.fp32")].result[0].message == ("fp32 10000^3 on GPU 0 61.4% of baseline 49 TFLOP/s, "
                                                            "below the fail line 0.75x")
    assert "baseline: 49.0 TFLOP/s (61.4% of it)" in cases[(base, "gemm.fp32")].result[0].text
    assert outcome(cases[(base, "gemm.fp16")]) == "passed"
    assert cases[(base, "gemm.fp16")].system_out.startswith("WARN: fp16 8192^3 on GPU 0 86.2% of baseline")
    assert cases[(base, "layers.nlp.tokenizer")].result[0].message.startswith("optional check failed: tokenizer returned <script>")
    assert cases[(base, "nccl.smoke")].result[0].message == "one GPU visible: nothing to all-reduce"
    assert cases[(base, "gemm.bf16")].time == pytest.approx(3.1)


def test_junit_build_failure_carries_the_log_and_survives_control_characters() -> None:
    cases = {(c.classname, c.name): c for suite in junit("build-failed") for c in suite}
    failed = cases[("2.14.1-cu130-py3.11-debian12-cv", "build")]
    assert outcome(failed) == "failure"
    text = failed.result[0].text
    assert "Dockerfile: build/2.14.1-cu130-py3.11-debian12-cv/Dockerfile" in text
    assert "ERROR: No matching distribution found for opencv-python-headless==9.9.9\n" in text  # bell and colour codes gone
    skipped = cases[("2.14.1-cu130-py3.11-debian12-project", "build")]
    assert skipped.result[0].message == "skipped: parent 2.14.1-cu130-py3.11-debian12-cv failed"


def test_junit_release_cases() -> None:
    cases = {(c.classname, c.name): c for suite in junit("run-report") for c in suite}
    pushed = cases[("2.14.1-cu130-py3.11-debian12-base", "release")]
    assert outcome(pushed) == "passed" and pushed.system_out.endswith("@sha256:" + "4d" * 32 + " latest")
    assert cases[("2.14.1-cu130-py3.11-debian12-nlp", "release")].result[0].message == "not-verified"
    assert cases[("2.14.1-cu130-py3.11-debian12-nlp", "verify")].result[0].message == "no verify report for this target"


# -- HTML ------------------------------------------------------------------------------------------------------------


def svgs(page: str, css: str) -> list[ET.Element]:
    """The inline SVG charts whose class contains ``css``, parsed as XML (so they are well-formed)."""
    found = [ET.fromstring(m) for m in re.findall(r"<svg .*?</svg>", page, re.S)]
    return [s for s in found if css in (s.get("class") or "").split()]


def points(polyline: ET.Element) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in (p.split(",") for p in (polyline.get("points") or "").split())]


def by_class(svg: ET.Element, tag: str, css: str) -> list[ET.Element]:
    return [e for e in svg.iter(SVG + tag) if css in (e.get("class") or "").split()]


def test_html_leak_chart_draws_the_samples_and_the_fitted_line_through_them() -> None:
    page = report.to_html(run_of("verify-gpu"))
    (leak,) = svgs(page, "leak")
    (samples,) = by_class(leak, "polyline", "samples")
    (fit,) = by_class(leak, "polyline", "fit")
    pts, (start, end) = points(samples), points(fit)
    assert len(pts) == 60 and len(by_class(leak, "g", "markers")[0]) == 60
    assert end[1] < start[1]  # memory grows: the fitted line rises (SVG y points down)
    assert start[0] == pts[0][0] and end[0] == pts[-1][0]

    def fit_y(x: float) -> float:
        return start[1] + (end[1] - start[1]) * (x - start[0]) / (end[0] - start[0])

    # samples are the line +-6 MiB of noise; the axis spans ~150 MiB in 200 px: within 9 px of the fit
    assert max(abs(y - fit_y(x)) for x, y in pts) < 9
    assert "fit +1.0000 MiB/step" in ET.tostring(leak, encoding="unicode")


def test_html_leak_chart_of_a_clean_run_is_flat() -> None:
    (leak,) = svgs(report.to_html(run_of("run-report")), "leak")
    (start, end) = points(by_class(leak, "polyline", "fit")[0])
    ys = [y for _, y in points(by_class(leak, "polyline", "samples")[0])]
    assert abs(end[1] - start[1]) < 0.5 and max(ys) - min(ys) < 1  # +-4 KiB on an axis of >= 100 MiB


def test_html_throughput_bars_against_baseline() -> None:
    (chart,) = svgs(report.to_html(run_of("verify-gpu")), "throughput")
    bars = by_class(chart, "rect", "bar")
    labels = [t.text for t in chart.iter(SVG + "text") if t.get("text-anchor") == "end"]
    assert labels == ["gemm.bf16 · GPU 0", "gemm.bf16 · GPU 1", "gemm.fp16 · GPU 0", "gemm.fp16 · GPU 1",
                      "gemm.fp32 · GPU 0", "gemm.fp32 · GPU 1"]
    assert [b.get("fill") for b in bars] == ["#1a7f37", "#1a7f37", "#9a6700", "#9a6700", "#cf222e", "#1a7f37"]
    assert len(by_class(chart, "line", "failline")) == 6 and len(by_class(chart, "line", "baseline")) == 1
    widths = [float(b.get("width") or 0) for b in bars]
    assert widths[4] / widths[5] == pytest.approx(30.1 / 47.9, rel=1e-3)  # bar length is the rate


def test_html_nvml_series_per_gpu() -> None:
    charts_ = svgs(report.to_html(run_of("verify-gpu")), "nvml")
    assert [c.get("aria-label") for c in charts_] == ["memory used", "GPU utilisation", "temperature", "power"]
    for chart in charts_:
        lines = by_class(chart, "polyline", "series")
        assert [len(points(p)) for p in lines] == [120, 120]


def test_html_of_a_cpu_run_says_there_are_no_nvml_samples() -> None:
    page = report.to_html(run_of("verify-cpu"))
    assert "No NVML samples: this run saw no NVIDIA GPU (CPU mode)." in page
    assert "No leak-check samples in this report" in page and "<svg" not in page


def test_html_of_a_gpu_run_without_the_host_sampler_says_why() -> None:
    doc = raw("verify-gpu")
    del doc["nvml"]
    page = report.to_html(run_of("x", doc))
    assert "No NVML samples: the payload ran without imagesmith&#39;s host-side sampler (e.g. verify/run.py on its own)." in page


def test_html_names_the_sampler_error_when_there_is_one() -> None:
    doc = _with(("nvml",), {"interval_s": 0.25, "error": "NVML unavailable (NVMLError_LibraryNotFound)", "gpus": []})
    assert "No NVML samples: NVML unavailable (NVMLError_LibraryNotFound)." in report.to_html(run_of("x", doc))


EVIL = '<img src=x onerror="alert(1)">'


def test_html_escapes_everything_the_report_carries() -> None:
    doc = raw("verify-gpu")
    doc["image"]["labels"]["io.imagesmith.target"] = f"t{EVIL}"
    for check in doc["checks"]:
        check["title"], check["unit"] = f"title {EVIL}", f"u{EVIL}"
    doc["environment"]["gpus"][0]["name"] = EVIL
    page = report.to_html(run_of("x", doc))
    assert "<img" not in page and "<script" not in page.lower()
    assert "tokenizer returned &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; | pipes" in page
    assert len(svgs(page, "chart")) == 6  # still well-formed XML: leak, throughput, 4 NVML


@pytest.mark.parametrize("name", [k[0] for k in KINDS])
def test_html_is_self_contained(name: str) -> None:
    page = report.to_html(run_of(name))
    outside = re.findall(r"(?:src|href)=\"(?!#)[^\"]*\"|https?://(?!www\.w3\.org/2000/svg)[^\s\"<]+|<script|<link|@import", page)
    assert outside == []
    assert "Content-Security-Policy" in page


def test_long_series_are_thinned() -> None:
    line = charts.Line("x", tuple((float(i), float(i % 7)) for i in range(10_000)), "#000")
    chart = ET.fromstring(charts.line_chart("t", [line], "s", "v"))
    (poly,) = chart.iter(SVG + "polyline")
    assert len(points(poly)) <= charts.MAX_POINTS + 1 and points(poly)[-1][0] == 64 + 470  # the last point is kept


TICKS = [
    ((0, 125), [0, 25, 50, 75, 100, 125], ["0", "25", "50", "75", "100", "125"]),
    ((0, 1), [0, 0.2, 0.4, 0.6, 0.8, 1.0], ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]),
    ((296, 304), [296, 298, 300, 302, 304], ["296", "298", "300", "302", "304"]),
    ((0, 50_000), [0, 10_000, 20_000, 30_000, 40_000, 50_000], ["0", "10,000", "20,000", "30,000", "40,000", "50,000"]),
    ((0, 1.1), [0, 0.25, 0.5, 0.75, 1.0, 1.25], ["0.00", "0.25", "0.50", "0.75", "1.00", "1.25"]),
    ((0, 11), [0, 2.5, 5, 7.5, 10, 12.5], ["0.0", "2.5", "5.0", "7.5", "10.0", "12.5"]),
    ((5, 5), [4.4, 4.6, 4.8, 5.0, 5.2, 5.4, 5.6], ["4.4", "4.6", "4.8", "5.0", "5.2", "5.4", "5.6"]),  # a flat series
]


@pytest.mark.parametrize("span, ticks, labels", TICKS)
def test_ticks(span: tuple[float, float], ticks: list[float], labels: list[str]) -> None:
    assert charts.nice_ticks(*span) == pytest.approx(ticks)
    assert charts.tick_labels(charts.nice_ticks(*span)) == labels


# -- writing --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", report.FORMATS)
def test_write_puts_the_rendering_on_disk(tmp_path: Path, fmt: str) -> None:
    run = run_of("verify-gpu")
    out = report.write(run, fmt, tmp_path / "sub" / f"report.{fmt}")
    assert out.read_text() == report.render(run, fmt)
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no temporary file left


def test_unknown_format() -> None:
    with pytest.raises(UserError, match="unknown report format 'pdf'; use one of md, junit, html"):
        report.render(run_of("verify-cpu"), "pdf")


def test_run_report_combines_the_stage_artifacts() -> None:
    doc = report.run_report(raw("build-failed"), {"2.14.1-cu130-py3.11-debian12-base": raw("verify-gpu")})
    run = report.parse(doc)
    assert run.kind == "run" and [t.status for t in run.targets] == ["failed", "build failed", "build skipped"]
    assert run.targets[0].verify is not None and run.targets[0].build is not None


def test_a_real_two_h200_standard_run_renders() -> None:
    """bench/results/h200x2-standard.json as the payload wrote it on 2 x H200 (no host-side NVML block, no sharing
    verdict: every check passed, but nobody watched the GPUs for the whole run, so it is not GPU-verified)."""
    run = run_of("h200x2-standard")
    (target,) = run.targets
    assert target.id == "h200x2-standard" and target.status == "passed, not GPU-verified (GPU exclusivity not measured)"
    assert target.tone == "unvetted" and run.tone == "unvetted"
    page = report.to_html(run)
    assert [s.get("aria-label") for s in svgs(page, "leak")] == [
        "leak.device: fixed-shape training loop: allocated memory stays flat",
        "leak.host: fixed-shape training loop: host RSS stays flat"]
    (bars,) = svgs(page, "throughput")
    labels = [t.text for t in bars.iter(SVG + "text") if t.get("text-anchor") == "end"]
    assert labels[:3] == ["sdpa.perf", "gemm.bf16 · GPU 0", "gemm.bf16 · GPU 1"] and len(labels) == 13
    xml = JUnitXml.fromstring(report.to_junit(run))
    cases = [c for suite in xml for c in suite]
    assert len(cases) == len(target.verify.checks) == 51  # type: ignore[union-attr]
    assert sum(outcome(c) == "skipped" for c in cases) == 7 and not any(outcome(c) == "failure" for c in cases)


def test_a_cuda_image_verified_in_cpu_mode_reads_not_gpu_verified(tmp_path: Path) -> None:
    doc = json.loads((FIXTURES / "run-report.json").read_text())
    target = "2.14.1-cu130-py3.11-debian12-base"
    doc["verify"][target]["environment"]["gpus"] = []
    doc["verify"][target]["mode"] = {"mode": "cpu", "gpus": 0, "requested": "all", "status": "skip",
                                     "reason": "CPU mode: no GPU visible (x); CPU verification allowed "
                                               "(--allow-cpu-verification / verify.require_gpu: false): not GPU-verified",
                                     "gpu_checks": {"skip": 9}}
    rel = next(t for t in doc["release"]["targets"] if t["target"] == target)
    rel["note"] = "not GPU-verified: CPU mode; immutable tag only"
    run = report.parse(doc, "run-report.json")
    t = next(t for t in run.targets if t.id == target)
    assert (t.status, t.ok, t.vetted) == ("passed, not GPU-verified (CPU mode)", True, False)
    md = report.to_markdown(run)
    assert f"| ⚠️ {target} | passed, not GPU-verified (CPU mode) |" in md
    assert "1. not GPU-verified: CPU mode; immutable tag only" in md
    page = report.to_html(run)
    assert '<span class="badge s-unvetted">passed, not GPU-verified (CPU mode)</span>' in page
    assert 'class="badge s-passed"' not in page


# -- hostile values: a check detail or target name from a pull request ---------------------------------------

HOSTILE = 'x<script>alert("1")</script>\'q\' ]]> a|b\nc'


def hostile_run() -> report.Run:
    doc = raw("verify-gpu")
    doc["image"]["labels"]["io.imagesmith.target"] = f"t{HOSTILE}"
    for check in doc["checks"]:
        check["detail"], check["id"] = f"detail {HOSTILE}", f"{check['id']}{HOSTILE if check['id'] == 'gemm.fp32' else ''}"
    return run_of("x", doc)


def test_a_hostile_value_is_escaped_in_html() -> None:
    page = report.to_html(hostile_run())
    assert "<script" not in page.lower() and "]]>" not in page
    assert "detail x&lt;script&gt;alert(&#34;1&#34;)&lt;/script&gt;&#39;q&#39; ]]&gt; a|b\nc" in page
    assert '<a href="#t-tx_script_alert__1____script__q______a_b_c">' in page  # the anchor holds no markup
    assert len(svgs(page, "chart")) == 6  # the charts that carry the check id are still well-formed XML


def test_a_hostile_value_survives_junit_intact_and_well_formed() -> None:
    xml = report.to_junit(hostile_run())
    assert "<script" not in xml and "]]>" not in xml.replace("]]&gt;", "")
    root = ET.fromstring(xml)  # well-formed
    suite = root.find("testsuite")
    assert suite is not None and suite.get("name") == f"t{HOSTILE}"
    failure = next(e for e in root.iter("failure") if e.get("type", "").startswith("gemm.fp32"))
    assert failure.get("type") == f"gemm.fp32{HOSTILE}" and failure.get("message") == f"detail {HOSTILE}"


def test_a_hostile_value_cannot_break_a_markdown_table() -> None:
    md = report.to_markdown(hostile_run())
    rows = [line for line in md.splitlines() if "gemm.fp32" in line]
    cell = "x\\<script>alert(\"1\")\\</script>'q' \\]\\]> a\\|b c"
    assert rows and all(cell in row for row in rows)
    assert all(row.count(" | ") == row.replace("\\|", "").count(" | ") for row in rows)  # every pipe of the value escaped
    assert "<script" not in rendered(md) and "&lt;script&gt;" in rendered(md)


SHARED_REPORT = Path(__file__).resolve().parents[3] / "bench" / "results" / "quick-tier-h200" / "shared-standard.json"


def test_a_shared_gpu_run_shows_in_the_tables() -> None:
    """The H200 run beside a bf16 GEMM loop (bench/device_quick_tier.sh): inconclusive checks, the tenant named."""
    run = report.load(SHARED_REPORT)
    (target,) = run.targets
    assert target.verify is not None and target.verify.shared is not None
    assert "GPU 0 shared with PID 977" in report.to_html(run)
    assert (target.verify.shared.exclusive, [(t.pid, t.name, t.seen) for t in target.verify.shared.foreign]) == \
        (False, [(977, "python3", "both")])
    assert target.verify.count("inconclusive") == 6 and target.verify.ok
    text = report.to_markdown(run)
    line = r"not exclusive: GPU 0 shared with PID 977 python3, 1.0 GiB (throughput checks inconclusive; not verified: no floating tag)"
    assert "### Inconclusive (a shared GPU)" in text and line in text
    assert text.count("inconclusive: GPU 0 shared with PID 977 python3, 1.0 GiB") == 6
    xml = report.to_junit(run)
    assert xml.count('<skipped message="inconclusive: GPU 0 shared with PID 977') == 6


CONTAINER_RUN = Path(__file__).resolve().parents[3] / "bench" / "results" / "container-gpu" / "rerun" / "shared-during.json"


def test_a_container_run_the_hosts_watch_judged_renders() -> None:
    """A real container on the H200 with a neighbour during two checks (bench/container_gpu.sh): the host's watch
    lists the tenant it saw (``seen: during``); the report reads and names it."""
    run = report.load(CONTAINER_RUN)
    (target,) = run.targets
    assert target.verify is not None and target.verify.shared is not None
    assert [(t.pid, t.seen) for t in target.verify.shared.foreign] == [(1202, "during")]
    assert target.verify.count("inconclusive") == 1 and target.verify.ok
    assert "not exclusive: GPU 0 shared with PID 1202 python3, 2.0 GiB" in report.to_markdown(run)
