"""Where the integration tier's wall time goes: each module's span on its worker.

``--durations`` names the slowest tests; it does not say which worker ran what, nor which chain of modules held the
run open. Each pytest process notes, per module, when its first test started and when its last one finished (wall
clock, so workers compare); under pytest-xdist every worker hands its spans to the controller (``workeroutput``),
which prints one table for the run, in start order, and each worker's busy time: the longest is the run's critical
path.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

WORKER_KEY = "imagesmith_timeline"


@dataclass
class Timeline:
    spans: dict[str, list[Any]] = field(default_factory=dict)  # module -> [worker, first start, last end]

    def start(self, nodeid: str, worker: str) -> None:
        module = nodeid.split("::", 1)[0]
        now = time.time()
        self.spans.setdefault(module, [worker, now, now])

    def finish(self, nodeid: str) -> None:
        span = self.spans.get(nodeid.split("::", 1)[0])
        if span is not None:
            span[2] = time.time()

    def to_json(self) -> dict[str, Any]:
        return {"spans": self.spans}

    def merge(self, doc: dict[str, Any]) -> None:
        for module, (worker, begin, end) in doc["spans"].items():
            self.spans[module] = [str(worker), float(begin), float(end)]

    def lines(self) -> list[str]:
        if not self.spans:
            return []
        zero = min(begin for _, begin, _ in self.spans.values())
        lines = [f"{'from s':>7} {'to s':>7} {'span s':>7}  worker  module"]
        busy: dict[str, float] = {}
        for module, (worker, begin, end) in sorted(self.spans.items(), key=lambda item: item[1][1]):
            busy[worker] = busy.get(worker, 0.0) + end - begin
            lines.append(f"{begin - zero:7.0f} {end - zero:7.0f} {end - begin:7.0f}  {worker:<6}  {module}")
        lines.append("busy: " + ", ".join(f"{worker} {seconds:.0f} s" for worker, seconds in sorted(busy.items())))
        return lines
