"""The documentation's pictures: bench/figures.py draws them with the HTML report's chart code (one drawing code).
The pipeline diagram is committed (the README shows it on GitHub and GitLab) and must be what the script draws; the
benchmark charts are drawn by `make docs` (scripts/mkdocs_hooks.py) from bench/results/, each with its whole title."""

from __future__ import annotations

import importlib.util
import re
import sys
import xml.etree.ElementTree as ET
from types import ModuleType

import pytest

from imagesmith.report import svg
from tests.conftest import ROOT

SVG = "{http://www.w3.org/2000/svg}"


def load(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


figures = load("imagesmith_bench_figures", "bench/figures.py")
CHARTS: dict[str, str] = figures.bench_charts()


def test_the_committed_pipeline_diagram_is_what_the_script_draws() -> None:
    assert (ROOT / "docs" / "assets" / "pipeline.svg").read_text(encoding="utf-8") == figures.pipeline_svg(), \
        "run: python3 bench/figures.py --pipeline"


def test_the_pipeline_diagram_names_every_stage_in_order() -> None:
    root = ET.fromstring(figures.pipeline_svg())
    names = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "name"]
    assert names == ["matrix.yaml", "validate", "plan", "render", "build", "verify", "publish", "evidence"]
    assert float(root.get("width", 0)) <= 800  # a README column and a docs page show it whole


@pytest.mark.parametrize("name", sorted(CHARTS))
def test_each_benchmark_chart_is_a_standalone_svg_with_its_whole_title(name: str) -> None:
    root = ET.fromstring(CHARTS[name].split("\n", 1)[1])
    assert root.find(f"{SVG}style") is not None and svg.chart_css() in CHARTS[name]  # the report's own styles
    lines = [t.text or "" for t in root.iter(f"{SVG}text") if t.get("class") == "title"]
    assert " ".join(lines) == root.get("aria-label") and lines[0]
    assert [line for line in lines if 8 + len(line) * svg.TITLE_CHAR_PX > float(root.get("width", 0))] == []


def test_the_charts_are_drawn_from_the_committed_results() -> None:
    bars = re.findall(r'<text class="value" [^>]*>([^<]+)</text>', CHARTS["build-times.svg"])
    assert bars[0] == "266.2 s · 7 of 7 built"  # bench/results/build-local.json, the cold build
    assert "803.4 TFLOP/s · 102.5%" in CHARTS["verify-h200-throughput.svg"]  # bench/results/h200-standard.json, gemm.bf16
    assert "fit +0.0503 MiB/step" in CHARTS["leak-injected.svg"]


def test_the_benchmarks_page_shows_every_chart() -> None:
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    shown = set(re.findall(r"\]\(assets/bench/([\w.-]+\.svg)\)", text))
    assert shown == set(CHARTS)
