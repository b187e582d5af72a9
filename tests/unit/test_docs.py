"""The README and the documentation site, checked without running mkdocs (`make docs` runs it, --strict):
a README a newcomer reads in two minutes, every page the nav names present, the CLI reference pointing
at the real click group, and the verification page's check table equal to the payload's registry."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 150
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)")


def nav_pages(nav: Any) -> list[str]:
    """Every page file named in an mkdocs nav (nested lists and {title: page} mappings)."""
    if isinstance(nav, str):
        return [] if "://" in nav else [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return []


def mkdocs_config() -> dict[str, Any]:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert isinstance(config, dict)
    return config


def test_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; at most {MAX_README_LINES}: move detail into docs/"


def test_readme_starts_with_the_two_commands() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert lines[:5] == [
        "# imagesmith",
        "",
        "```sh",
        "make release   # the main job: build, verify, tag and push examples/local.yaml to a local registry it starts",
        "make test      # the tests: unit + integration against a real Docker engine and registry",
    ]


def test_readme_links_lead_to_files() -> None:
    targets = [t for t in LINK.findall(README.read_text(encoding="utf-8")) if "://" not in t]
    assert targets, "README.md links into the docs"
    assert [t for t in targets if not (ROOT / t).is_file()] == []


@pytest.mark.parametrize(
    ("nav", "pages"),
    [
        (["index.md"], ["index.md"]),
        ([{"Home": "index.md"}, {"Use": [{"A": "a.md"}, "b.md"]}], ["index.md", "a.md", "b.md"]),
        ([{"Site": "https://example.com/"}], []),
    ],
)
def test_nav_pages(nav: Any, pages: list[str]) -> None:
    assert nav_pages(nav) == pages


def test_every_nav_page_exists() -> None:
    pages = nav_pages(mkdocs_config()["nav"])
    assert "index.md" in pages and "cli.md" in pages
    assert [page for page in pages if not (DOCS / page).is_file()] == []


def test_cli_reference_names_the_click_group() -> None:
    """The mkdocs-click directive in docs/cli.md documents the real group, so the reference cannot drift."""
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    found = re.search(r"^::: mkdocs-click\n\s+:module: (\S+)\n\s+:command: (\S+)", text, re.MULTILINE)
    assert found, "docs/cli.md holds a ::: mkdocs-click block"
    module = __import__(found.group(1), fromlist=[found.group(2)])
    group = getattr(module, found.group(2))
    assert isinstance(group, click.Group)
    assert {"build", "verify", "publish", "evidence", "fleet"} <= set(group.commands)


def test_check_table_matches_the_payload_registry() -> None:
    sys.path.insert(0, str(ROOT / "verify"))
    try:
        import imagesmith_payload.checks  # noqa: F401  (registers every check)
        from imagesmith_payload.registry import REGISTRY
    finally:
        sys.path.remove(str(ROOT / "verify"))
    text = (DOCS / "verification.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([a-z0-9_.]+)` \| (quick|standard) \| (\w+) \| ", text, re.MULTILINE)
    assert rows == [(s.id, s.tier, s.needs) for s in REGISTRY.values()]


def test_matrix_reference_documents_every_key() -> None:
    """Every key the loader accepts (imagesmith/model/matrix/sections.py) has its entry in docs/matrix.md."""
    from imagesmith.model import tags
    from imagesmith.model.matrix import records, sections

    text = (DOCS / "matrix.md").read_text(encoding="utf-8")
    wanted = [f"## {key}\n" for key in sections.TOP_KEYS]
    wanted += [f"| `matrix.{key}` |" for key in (*records.AXES, records.PLATFORM, "cudnn", "include", "exclude")]
    wanted += [f"| `sources.{key}` |" for key in sections.SOURCES.names]
    wanted += [f"| `{key}` |" for key in sections.LAYER_KEYS if key != "services"] + ["| `services.jupyter` |", "| `services.sshd` |"]
    wanted += [f"`{{{field}}}`" for field in tags.TAG_FIELDS]
    assert [w for w in wanted if w not in text] == []
