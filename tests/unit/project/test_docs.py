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

ROOT = Path(__file__).resolve().parents[3]
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
    """Every key the loader accepts (imagesmith/model/matrix/: sections, sources, layers) has its entry in docs/matrix.md."""
    from imagesmith.model import tags
    from imagesmith.model.matrix import layers, records, sections, sources

    text = (DOCS / "matrix.md").read_text(encoding="utf-8")
    wanted = [f"## {key}\n" for key in sections.TOP_KEYS]
    wanted += [f"| `matrix.{key}` |" for key in (*records.AXES, records.PLATFORM, "cudnn", "include", "exclude")]
    wanted += [f"| `sources.{key}` |" for key in sources.SOURCES.names]
    wanted += [f"| `{key}` |" for key in layers.LAYER_KEYS if key != "services"] + ["| `services.jupyter` |", "| `services.sshd` |"]
    wanted += [f"`{{{field}}}`" for field in tags.TAG_FIELDS]
    assert [w for w in wanted if w not in text] == []


# -- readable pages: rendered as mkdocs renders them (Python-Markdown with mkdocs.yml's extensions) ---------------

MAX_WORDS = 150  # a paragraph, a list item or a table cell longer than this is a wall of text
PAGES = sorted(DOCS.rglob("*.md"))
# Words that name the project's own work (its issue tracker, its sessions, its history) rather than the product.
WORK_ITEMS = [
    re.compile(r"(?i)\bissues?(?![a-z])"),  # "issue 24", "(issue 23)", "the goals", bench/results/issue23
    re.compile(r"(?i)(?<!upload )\bsessions?\b"),  # a registry's upload session is the product's word
    re.compile(r"(?i)\brooms?\b"),
    re.compile(r"(?i)\bstop \d+\b"),
    re.compile(r"(?i)\bround \d+\b|\b(?:this|that|last|next|earlier|previous|an earlier) (?:round|turn)\b"),
    re.compile(r"(?i)\((?:added|written|moved) (?:when|after|in)\b"),
    re.compile(r"(?<![\w/&(])#\d+\b"),  # a tracker's #123 (not a link's anchor)
    re.compile(r"(?i)\b(?:work items?|tickets?|milestones?|backlog)\b"),
]


def markdown_extensions() -> list[str]:
    """mkdocs.yml's Markdown extensions that Python-Markdown loads by name (mkdocs-click expands cli.md only)."""
    names = [e if isinstance(e, str) else next(iter(e)) for e in mkdocs_config()["markdown_extensions"]]
    return [n for n in names if n != "mkdocs-click"]


def rendered(text: str) -> str:
    """The page as mkdocs renders it: mkdocs.yml's extensions and their settings (snippets read from the root)."""
    import markdown

    configs = {next(iter(e)): dict(next(iter(e.values()))) for e in mkdocs_config()["markdown_extensions"] if isinstance(e, dict)}
    if "pymdownx.snippets" in configs:
        configs["pymdownx.snippets"]["base_path"] = [str(ROOT)]
    html: str = markdown.markdown(text, extensions=markdown_extensions(), extension_configs=configs)
    return html


def work_items(text: str) -> list[str]:
    return [m.group(0) for pattern in WORK_ITEMS for m in pattern.finditer(text)]


def long_blocks(html: str, limit: int = MAX_WORDS) -> list[str]:
    """Paragraphs, list items (their own words, not those of a list inside them) and table cells over ``limit`` words."""
    out = []
    for tag in ("p", "li", "td"):
        for m in re.finditer(rf"<{tag}>((?:(?!</?{tag}>).)*)</{tag}>", html, re.S):
            own = re.sub(r"<(ul|ol)>.*?</\1>", "", m.group(1), flags=re.S)
            words = re.sub(r"<[^>]+>", " ", own).split()
            if len(words) > limit:
                out.append(f"{tag} of {len(words)} words: {' '.join(words[:12])} ...")
    return out


def glued_lists(html: str) -> list[str]:
    """Lists that render as a run-on paragraph: a paragraph holding a line that starts like a list item (the
    Markdown has no blank line before the list)."""
    return [m.group(1)[:80] for m in re.finditer(r"<p>((?:(?!</p>).)*)</p>", html, re.S)
            if re.search(r"\n\s*(?:[-*+]|\d+\.)\s+\S", m.group(1))]


@pytest.mark.parametrize(("text", "found"), [
    ("arm64 under emulation (issue 24)", ["issue"]),
    ("see bench/results/issue23/topology.json", ["issue"]),
    ("Three of the issue's goals are not met.", ["issue"]),
    ("## Districts (added when the house reached 49 rooms)", ["rooms", "(added when"]),
    ("The first session's clean runs; see stop 3, fixed in #12.", ["session", "stop 3", "#12"]),
    ("the registry keeps an upload session; see [anchor](#5-steps)", []),
])
def test_the_work_item_check_finds_what_it_should(text: str, found: list[str]) -> None:
    assert sorted(work_items(text)) == sorted(found)


def test_the_readability_checks_can_fail() -> None:
    html = rendered("Rules:\n1. one\n2. two\n\n" + "word " * 151 + "\n\n- " + "item " * 151 + "\n")
    assert glued_lists(html) == ["Rules:\n1. one\n2. two"]
    assert [b.split(" of ")[0] for b in long_blocks(html)] == ["p", "li"]
    assert glued_lists(rendered("Rules:\n\n1. one\n2. two\n")) == []


@pytest.mark.parametrize("page", [*PAGES, README], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_names_a_work_item(page: Path) -> None:
    assert work_items(page.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_pages_read_as_paragraphs_and_lists(page: Path) -> None:
    html = rendered(page.read_text(encoding="utf-8"))
    assert long_blocks(html) == [], f"split these into paragraphs of at most {MAX_WORDS} words"
    assert glued_lists(html) == [], "a list needs a blank line before it, or it renders as one paragraph"


# -- Troubleshooting quotes the code --------------------------------------------------------------------------------

PLACEHOLDER = re.compile(r"<[a-z][a-z ]*>")


def code_text() -> str:
    """imagesmith's and the payload's source and the Makefile, with adjacent string literals joined (a message split
    over lines, "... over "\\n f"the next line", reads as one)."""
    files = [*sorted((ROOT / "imagesmith").rglob("*.py")), *sorted((ROOT / "verify").rglob("*.py")), ROOT / "Makefile"]
    text = "\n".join(f.read_text(encoding="utf-8") for f in files)
    return re.sub(r"""(["'])\s*\n\s*(?:rf|fr|f|r)?\1""", "", text).replace('\\"', '"')


def quoted_messages(page: str) -> list[str]:
    """Each line of the page's ```text blocks: the messages it quotes."""
    return [line for block in re.findall(r"```text\n(.*?)```", page, re.S) for line in block.splitlines() if line.strip()]


def missing_from(code: str, message: str) -> list[str]:
    """The pieces of ``message`` (split at its <placeholders>) that the code does not hold word for word."""
    return [piece for piece in map(str.strip, PLACEHOLDER.split(message)) if len(piece) >= 8 and piece not in code]


def test_the_message_check_can_fail() -> None:
    code = 'raise UserError(f"{path} resolves to {where}, outside "\n    f"{base}; keep it")'
    assert missing_from(code_text() + code, "resolves to <path>, outside <folder>; keep it") == []
    assert missing_from(code, "resolves to <path>, inside the folder") == [", inside the folder"]


def test_troubleshooting_quotes_messages_the_code_still_says() -> None:
    page = (DOCS / "troubleshooting.md").read_text(encoding="utf-8")
    messages = quoted_messages(page)
    assert len(messages) >= 15
    code = code_text()
    assert {m: missing_from(code, m) for m in messages if missing_from(code, m)} == {}
