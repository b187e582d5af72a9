"""What every section parser of the matrix shares: its context (the located toolkit's, plus the knowledge base
every cell is checked against), the bounds of the files a matrix names, and the values a few keys may take."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from imagesmith.model import compat, grammar
from imagesmith.model.located import KeyPath, Lines
from imagesmith.model.paths import Roots
from imagesmith.model.validation import Ctx

BASE_FROM = ("os", "cuda-runtime", "cuda-devel")


CUDA_LIBS = ("shared", "venv")  # base layer: torch's CUDA wheels in a layer shared across cells, or in each venv


NETWORK_MODES = ("default", "host", "none")


KB_PINNED = ("torch", "torchvision", "torchaudio", "numpy")


REQUIREMENTS_LIMIT = 1 << 20  # bytes of a requirements file


CA_LIMIT = 4 << 20  # bytes of a CA bundle


TEMPLATE_LIMIT = 256 << 10  # bytes of a user template


class MatrixCtx(Ctx):
    """The shared toolkit's context, plus the knowledge base every cell is checked against."""

    def __init__(self, file: Path, lines: Lines, kb: compat.KnowledgeBase, roots: Roots | None = None) -> None:
        super().__init__(file, lines, roots)
        self.kb = kb
        self.variants: set[str] = set()  # the torch wheel variants the cells need (sources.torch_index_url's check)


def pairs(ctx: MatrixCtx, raw: Any, path: KeyPath, key_check: grammar.Check) -> tuple[tuple[str, str], ...]:
    """A mapping of the user's own keys (env names, label keys) to free text, both checked."""
    out = []
    for key, value in ctx.open_mapping(raw, path).items():
        ctx.checked(key, path + (key,), key_check)
        text = ctx.string(value, path + (key,), "")
        out.append((key, ctx.checked("" if text is None else text, path + (key,), grammar.text)))
    return tuple(sorted(out))
