"""mkdocs hooks (mkdocs.yml ``hooks:``), run by every `make docs`:

* the benchmark charts, drawn from bench/results/ by bench/figures.py with the HTML report's own chart code; they
  join the site as assets/bench/*.svg (virtual files: nothing is written into docs/), so a page links them like any
  picture and `mkdocs build --strict` fails on a link to a chart that was not drawn;
* the changelog's *Unreleased* section: the fragments in changes/ (scripts/changelog.py), shown where
  docs/changelog.md has its marker, so the site says what the next release brings before it is folded in.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
FOLDER = "assets/bench"


UNRELEASED = "<!-- unreleased:"


def script(name: str, path: str) -> ModuleType:
    """A script of this repository (bench/ and scripts/ are folders of scripts, not packages), imported by path."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # bench/figures.py imports imagesmith
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if page.file.src_uri != "changelog.md" or UNRELEASED not in markdown:
        return markdown
    changelog = script("imagesmith_changelog", "scripts/changelog.py")
    found = changelog.fragments()
    lines = markdown.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(UNRELEASED))
    if not found:
        return "\n".join(lines[:at] + lines[at + 1:]) + "\n"
    return "\n".join(lines[:at] + [changelog.section("Unreleased", found)] + lines[at + 1:]) + "\n"


def on_files(files: Files, config: Any) -> Files:
    for name, svg in script("imagesmith_bench_figures", "bench/figures.py").bench_charts().items():
        files.append(File.generated(config, f"{FOLDER}/{name}", content=svg))
    return files
