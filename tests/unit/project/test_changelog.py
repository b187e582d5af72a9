"""The changelog's habit (docs/development.md, "The changelog"): fragments in changes/ that scripts/changelog.py
folds into docs/changelog.md at a release. The committed fragments must be well-formed; the script's parts are
checked on a copy."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import ROOT


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("imagesmith_changelog", ROOT / "scripts" / "changelog.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["imagesmith_changelog"] = module
    spec.loader.exec_module(module)
    return module


changelog = load()


def test_the_committed_fragments_are_well_formed() -> None:
    assert changelog.problems() == []
    assert changelog.main(["--check"]) == 0


@pytest.mark.parametrize(("name", "text", "problem"), [
    ("Report.fixed.md", "- x\n", "Report.fixed.md: name it <topic>.<kind>.md"),
    ("report.bugfix.md", "- x\n", "report.bugfix.md: name it <topic>.<kind>.md"),
    ("report.fixed.md", "Fixed the report.\n", "report.fixed.md: write one or more Markdown bullets"),
    ("report.fixed.md", "- one\nnot a bullet\n", "report.fixed.md: a line that is neither a bullet"),
    ("report.fixed.md", "- one\n  its second line\n- two\n", ""),
])
def test_a_fragment_is_checked(tmp_path: Path, name: str, text: str, problem: str) -> None:
    (tmp_path / name).write_text(text)
    (tmp_path / "README.md").write_text("# not a fragment\n")
    found = changelog.problems(tmp_path)
    assert [p[:len(problem)] for p in found] == ([problem] if problem else [])


def test_a_release_folds_the_fragments_in_under_its_version(tmp_path: Path) -> None:
    (tmp_path / "tier.fixed.md").write_text("- plan gives the matrix's tier\n")
    (tmp_path / "wheel.added.md").write_text("- a wheel\n  with the payload inside\n")
    (tmp_path / "badge.changed.md").write_text("- orange for not GPU-verified\n")
    section = changelog.section("0.2.0 (2026-12-04)", changelog.fragments(tmp_path))
    assert section.splitlines() == [
        "## 0.2.0 (2026-12-04)", "",
        "### Added", "", "- a wheel", "  with the payload inside", "",
        "### Changed", "", "- orange for not GPU-verified", "",
        "### Fixed", "", "- plan gives the matrix's tier"]
    page = "# Changelog\n\nIntro.\n\n<!-- unreleased: ... -->\n\n## 0.1.0\n\n- first\n"
    folded = changelog.fold(page, section)
    assert folded.index("## 0.2.0") < folded.index("## 0.1.0") and folded.startswith("# Changelog\n\nIntro.")
    assert folded.count("## 0.1.0\n\n- first") == 1
