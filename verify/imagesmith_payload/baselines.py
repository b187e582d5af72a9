"""Per-GPU-model baselines (verify/baselines.json) and config overrides."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Mapping, Optional

from .judge import DEFAULT_FAIL_FRACTION, DEFAULT_WARN_FRACTION, Threshold

SCHEMA = "imagesmith.baselines/1"
DEFAULT_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "baselines.json")

Baselines = Dict[str, Any]


def load_baselines(path: str = DEFAULT_PATH) -> Baselines:
    """The baselines file; an unreadable file means 'no baselines'."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {"schema": SCHEMA, "gpus": {}}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object with schema {SCHEMA!r}, got a {type(data).__name__}")
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema is {data.get('schema')!r}, expected {SCHEMA!r}")
    return data


def threshold_for(baselines: Baselines, gpu_name: Optional[str], check_id: str,
                  overrides: Mapping[str, Mapping[str, float]] = {}) -> Optional[Threshold]:
    """Baseline of `check_id` on `gpu_name`, with config `thresholds` on top."""
    defaults = baselines.get("defaults", {})
    entry = dict(baselines.get("gpus", {}).get(gpu_name or "", {}).get(check_id, {}))
    entry.update(overrides.get(check_id, {}))
    baseline = entry.get("baseline", entry.get("value"))
    if baseline is None:
        return None
    return Threshold(
        baseline=float(baseline),
        fail_fraction=float(entry.get("fail_fraction", defaults.get("fail_fraction",
                                                                     DEFAULT_FAIL_FRACTION))),
        warn_fraction=float(entry.get("warn_fraction", defaults.get("warn_fraction",
                                                                     DEFAULT_WARN_FRACTION))),
        unit=str(entry.get("unit", "")),
        source=str(entry.get("source", "config" if check_id in overrides else "")),
    )
