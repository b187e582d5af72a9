"""The plan use case: a matrix planned and rendered into build contexts (``imagesmith render``), or only
checked (``imagesmith matrix validate``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from imagesmith.model.matrix import Matrix
from imagesmith.model.plan import Plan


@dataclass(frozen=True)
class Rendered:
    """``render``'s outcome: how many build contexts, and (with ``check``) how what is on disk differs."""

    contexts: int
    drift: tuple[str, ...] = ()


def render(matrix: Matrix, date: str, out: Path, check: bool = False) -> Rendered:
    """Plan ``matrix`` and render one build context per target into ``out`` (with ``check``: write nothing, compare)."""
    from imagesmith.model import plan
    from imagesmith.render import contexts

    rendered = contexts.render_all(plan.expand(matrix, date), matrix)
    if check:
        return Rendered(len(rendered), tuple(contexts.check(rendered, out)))
    contexts.write(rendered, out)
    return Rendered(len(rendered))


def validate(matrix: Matrix, date: str) -> Plan:
    """Plan ``matrix`` and render every target in memory (nothing is written), so what passes here renders."""
    from imagesmith.model import plan
    from imagesmith.render import contexts

    planned = plan.expand(matrix, date)
    contexts.render_all(planned, matrix)
    return planned
