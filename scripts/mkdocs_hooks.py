"""mkdocs hooks (mkdocs.yml ``hooks:``): the benchmark charts, drawn on every build from bench/results/.

bench/figures.py draws them with the HTML report's own chart code; they join the site as assets/bench/*.svg
(virtual files: nothing is written into docs/), so a page links them like any picture and `mkdocs build
--strict` fails on a link to a chart that was not drawn.
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


def figures() -> ModuleType:
    """bench/figures.py (bench/ is a folder of scripts, not a package); the repository root on sys.path for imagesmith."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location("imagesmith_bench_figures", ROOT / "bench" / "figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def on_files(files: Files, config: Any) -> Files:
    for name, svg in figures().bench_charts().items():
        files.append(File.generated(config, f"{FOLDER}/{name}", content=svg))
    return files
