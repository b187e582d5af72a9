"""The fleet report in `imagesmith report`: Markdown, JUnit (read back with junitparser), HTML; one row per class."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from junitparser import Failure, JUnitXml, Skipped

from imagesmith.model import fleetreport as report
from imagesmith.model.fleetreport import CellResult, Figure, FleetReport
from imagesmith.stages.fleet import render

GOOD, BAD = "sha256:" + "a" * 64, "sha256:" + "b" * 64
REPO = "127.0.0.1:5000/ml/pytorch"
FIG = Figure("gemm.bf16", 771.2, "TFLOP/s", 784.0, 98.4, "pass")


def fleet_report(interrupted: bool = False) -> FleetReport:
    cells = (
        CellResult(f"{REPO}@{GOOD}", "h200", "slurm", "pass", "every required check passed", "quick", "12", "COMPLETED",
                   "gpu-07", 0, 4.0, 31.0, "aaaaaaaaaaaa/h200/verify.json", {"pass": 40, "warn": 1, "fail": 0, "skip": 2},
                   (), ("NVIDIA H200",) * 8, (FIG,)),
        CellResult(f"{REPO}@{GOOD}", "l40s", "kubernetes", "pass", "every required check passed", "quick", "ml/j-1", "Complete",
                   "node-3", 0, 20.0, 45.0, None, {"pass": 38, "warn": 0, "fail": 0, "skip": 4}),
        CellResult(f"{REPO}@{BAD}", "h200", "slurm", "fail", "failed checks: versions.torch <script>", "quick", "13", "FAILED",
                   "gpu-07", 0, 4.0, 29.0, None, {"pass": 39, "warn": 0, "fail": 1, "skip": 2}, ("versions.torch",)),
        CellResult(f"{REPO}@{BAD}", "l40s", "kubernetes", "cancelled", "interrupted (Ctrl-C): ml/j-2 cancelled", "quick", "ml/j-2"),
    )
    return FleetReport("fleet.yaml", "r1", "quick", "2026-11-30T10:00:00+00:00", ("h200", "l40s"), cells, 80.0, interrupted)


def test_markdown_has_one_row_per_class_and_the_verdict_per_image() -> None:
    md = render.to_markdown(fleet_report())
    assert md.startswith("## ❌ imagesmith fleet: 2 images x 2 classes: 2 of 4 cells did not pass\n")
    assert f"### `{REPO}@{GOOD}`\n\npassed every required class (h200, l40s)\n" in md
    assert f"### `{REPO}@{BAD}`\n\nheld back by h200, l40s\n" in md
    assert "| ✅ h200 | pass | slurm | 12 | COMPLETED | gpu-07 | 4 s | 31 s | 40/1/0/2 | every required check passed |" in md
    assert "| ❌ h200 | fail | slurm | 13 | FAILED | gpu-07 | 4 s | 29 s | 39/0/1/2 | failed checks: versions.torch \\<script> |" in md
    assert "| ⏹ l40s | cancelled | kubernetes | ml/j-2 | - | - | - | - | -/-/-/- | interrupted (Ctrl-C): ml/j-2 cancelled |" in md
    assert "| aaaaaaaaaaaa | h200 | gemm.bf16 | 771.2 TFLOP/s | 784.0 TFLOP/s | 98.4% | pass |" in md


def test_junit_one_suite_per_image_one_case_per_class() -> None:
    xml = JUnitXml.fromstring(render.to_junit(fleet_report()))
    suites = list(xml)
    assert [s.name for s in suites] == [f"{REPO}@{GOOD}", f"{REPO}@{BAD}"]
    assert [(s.tests, s.failures, s.skipped) for s in suites] == [(2, 0, 0), (2, 1, 1)]
    bad = {c.name: c for c in suites[1]}
    assert isinstance(bad["h200"].result[0], Failure) and bad["h200"].result[0].message == "failed checks: versions.torch <script>"
    assert isinstance(bad["l40s"].result[0], Skipped)
    good = {c.name: c for c in suites[0]}
    assert good["h200"].system_out == "gemm.bf16: 771.2 TFLOP/s (98.4% of baseline)" and good["h200"].time == 31.0


def test_html_escapes_and_is_self_contained() -> None:
    page = render.to_html(fleet_report())
    assert "<script>" not in page and "&lt;script&gt;" in page and "http" not in page.split("<main>")[1].replace(REPO, "")
    body = page.split("<body>")[1].split("</body>")[0]
    ET.fromstring(body)  # well-formed
    assert page.count("<tr class=") == 4 and "held back by h200, l40s" in page and "98.4%" in page


def test_interrupted_is_said() -> None:
    assert "interrupted" in render.headline(fleet_report(interrupted=True))


@pytest.mark.parametrize("fmt", ["md", "junit", "html"])
def test_imagesmith_report_renders_a_fleet_report(tmp_path: Path, fmt: str) -> None:
    path = report.write(fleet_report(), tmp_path / "fleet-report.json")
    out = tmp_path / f"out.{fmt}"
    done = subprocess.run([sys.executable, "-m", "imagesmith.cli", "report", str(path), "--format", fmt, "--out", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert out.read_text() == render.render(report.load(path), fmt)
    assert done.stderr.strip() == f"{out}: {fmt} fleet report of 4 cells (with failures)"
