"""imagesmith.units: the one way a byte count reads (tables, progress lines, reports)."""

from __future__ import annotations

import pytest

from imagesmith.units import fmt_bytes, gb


@pytest.mark.parametrize(("n", "unit", "text"), [
    (1_500_000_000, " GB", "1.50 GB"),
    (6_123_456_789, " GB", "6.12 GB"),
    (0, " GB", "0.00 GB"),
    (1_500_000_000, "", "1.50"),
])
def test_gb(n: int, unit: str, text: str) -> None:
    assert gb(n, unit) == text


@pytest.mark.parametrize(("n", "text"), [(2_000_000_000, "2.00 GB"), (100_000_000, "0.10 GB"), (99_999_999, "95.4 MiB"),
                                         (1 << 20, "1.0 MiB")])
def test_fmt_bytes_switches_to_mib_below_a_tenth_of_a_gigabyte(n: int, text: str) -> None:
    assert fmt_bytes(n) == text
