"""The registry of checks: one function and one decorator line per check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, List, Sequence, Union

from .parsers import matches_any

if TYPE_CHECKING:  # pragma: no cover
    from .context import Context
    from .results import Result

TIER_ORDER = {"quick": 0, "standard": 1, "soak": 2}
# What a check needs before it can mean anything; the runner skips it otherwise.
NEEDS = ("nothing", "torch", "gpu", "multi_gpu")

CheckFunc = Callable[["Context"], "Result"]
Timeout = Union[float, Callable[["Context"], float]]


@dataclass(frozen=True)
class CheckSpec:
    id: str
    title: str
    func: CheckFunc
    tier: str = "quick"
    unit: str = ""
    needs: str = "torch"
    optional: bool = False
    timeout_s: Timeout = 300.0
    throughput: bool = False  # judged against a rate: inconclusive on a shared GPU
    worker: str = ""  # runs in this named worker process beside the main one (offload.py)

    def timeout_for(self, ctx: "Context") -> float:
        return float(self.timeout_s(ctx) if callable(self.timeout_s) else self.timeout_s)


REGISTRY: Dict[str, CheckSpec] = {}


def check(check_id: str, title: str, *, tier: str = "quick", unit: str = "",
          needs: str = "torch", optional: bool = False,
          timeout_s: Timeout = 300.0, throughput: bool = False,
          worker: str = "") -> Callable[[CheckFunc], CheckFunc]:
    """Register `func` as check `check_id` (ids are unique)."""
    if tier not in ("quick", "standard") or needs not in NEEDS:
        raise ValueError(f"check {check_id}: bad tier {tier!r} or needs {needs!r}")

    def register(func: CheckFunc) -> CheckFunc:
        if check_id in REGISTRY:
            raise ValueError(f"check {check_id} registered twice")
        REGISTRY[check_id] = CheckSpec(check_id, title, func, tier, unit, needs, optional, timeout_s,
                                       throughput, worker)
        return func
    return register


def select(tier: str, only: Sequence[str] = (), skip: Sequence[str] = (),
           registry: Dict[str, CheckSpec] = REGISTRY) -> List[CheckSpec]:
    """Checks of `tier` and below: quick ones first, registration order within."""
    level = TIER_ORDER[tier]
    chosen = [s for s in registry.values() if TIER_ORDER[s.tier] <= level]
    if only:
        chosen = [s for s in chosen if matches_any(s.id, only)]
    chosen = [s for s in chosen if not matches_any(s.id, skip)]
    return sorted(chosen, key=lambda s: TIER_ORDER[s.tier])
