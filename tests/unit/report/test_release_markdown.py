"""release.md from release.json: traffic and promotion sections, values escaped (the report package)."""

from __future__ import annotations

from typing import Any

from markdown_it import MarkdownIt

from imagesmith.report.markdown import release_document


def release(**target: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"target": "2.9.1-base", "status": "pushed", "reference": "r.test/ml/pytorch:t", "digest": "sha256:" + "a" * 64,
            "versions": {"torch": "2.9.1"}, "floating": [], "evidence": None}
    return {"schema": "imagesmith.release/1", "ok": True, "registry": "r.test", "repository": "ml/pytorch", "date": "20261130",
            "pushed": ["r.test/ml/pytorch:t"], "unchanged": [], "floating": [], "errors": [],
            "traffic": {"pushed_bytes": 2_500_000_000, "pushed_layers": 3, "existing_bytes": 1_000_000_000, "existing_layers": 2},
            "targets": [base | target]}


def test_traffic_is_summed_and_shown_per_target() -> None:
    doc = release_document(release(traffic={"pushed_bytes": 2_500_000_000, "pushed_layers": 3,
                                            "existing_bytes": 1_000_000_000, "existing_layers": 2}))
    assert "Sent 2.50 GB in 3 layers; the registry already had 2 layers (1.00 GB)." in doc
    row = next(line for line in versions(doc) if line.startswith("| 2.9.1-base |"))
    assert row == "| 2.9.1-base | 2.9.1 | - | - | 2.50 GB | 1.00 GB |"


def test_a_promoted_target_lists_what_moved_with_hostile_text_escaped() -> None:
    doc = release_document(release(source="stage.test/ci/x@sha256:" + "b" * 64 + "|<b>x</b>",
                                   promotion={"mounted": 4, "copied": 1, "present": 2, "bytes_moved": 1234, "seconds": 0.5}))
    lines = doc.splitlines()
    start = lines.index("## Promoted from staging")
    row = next(line for line in lines[start:] if line.startswith("| 2.9.1-base |"))
    assert "4 / 1 / 2" in row and "| 1234 | 0.5 |" in row
    assert "\\|<b>x</b>` |" in row  # a code span: its pipe escaped, its tags shown as text
    cells = MarkdownIt("commonmark").enable("table").render("\n".join(lines[start:])).split("<td>")
    assert "<code>stage.test/ci/x@sha256:" + "b" * 64 + "|&lt;b&gt;x&lt;/b&gt;</code>" in cells[2]


def test_a_push_without_traffic_figures_says_so() -> None:
    doc = release_document(release(traffic=None) | {"traffic": None})
    assert "Sent " not in doc
    row = next(line for line in versions(doc) if line.startswith("| 2.9.1-base |"))
    assert row.endswith("| - | - |")


def versions(doc: str) -> list[str]:
    """The lines of the versions and traffic section."""
    return doc.split("## Versions and traffic", 1)[1].split("\n## ", 1)[0].splitlines()
