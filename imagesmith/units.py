"""How a byte count reads in tables, progress lines and reports: one source of truth, importing
nothing, so that planning, engine-side and report code alike may use it."""

from __future__ import annotations


def gb(n: float, unit: str = " GB") -> str:
    """``n`` bytes in decimal gigabytes with two decimals: ``1.50 GB`` (``unit=""`` in a column headed GB)."""
    return f"{n / 1e9:.2f}{unit}"


def fmt_bytes(n: float) -> str:
    """A size of any order: gigabytes from 0.1 GB up, MiB below."""
    return gb(n) if n >= 1e8 else f"{n / 2**20:.1f} MiB"
