"""How many builds run at once (``--jobs``), and in which order: one slot per job, lent to a parent's build while
its child waits for it (no deadlock however deep the plan), given first to the targets with the most descendants.
A target queues when it becomes ready (:meth:`Slots.enter`), so a finished parent can hand its slot to the best of
what its end made ready, not to whatever waited longest."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
from typing import Iterator

from imagesmith.errors import BuildError
from imagesmith.model.plan import Plan

Ticket = tuple[tuple[int, ...], int]  # (priority, arrival): a place in the queue


class Slots:
    """At most ``n`` docker builds at once; waiting targets are served by priority
    (lowest first), then by arrival. A target waiting for something else (its
    CUDA image) lends its slot meanwhile."""

    def __init__(self, n: int, cancel: threading.Event) -> None:
        self.free, self.cancel = max(1, n), cancel
        self.cond = threading.Condition()
        self.waiting: list[tuple[tuple[int, ...], int]] = []  # a heap of (priority, arrival)
        self.arrival = itertools.count()

    @contextlib.contextmanager
    def held(self, priority: tuple[int, ...], ticket: Ticket | None = None) -> Iterator[None]:
        self.acquire(priority, ticket)
        try:
            yield
        finally:
            self.release()

    def enter(self, priority: tuple[int, ...]) -> Ticket:
        """Queue now (the scheduler does, as a target becomes ready); :meth:`acquire` with the ticket waits its turn."""
        with self.cond:
            entry = (priority, next(self.arrival))
            heapq.heappush(self.waiting, entry)
            return entry

    @contextlib.contextmanager
    def lent(self, priority: tuple[int, ...]) -> Iterator[None]:
        self.release()
        try:
            yield
        finally:
            self.acquire(priority)

    def acquire(self, priority: tuple[int, ...], ticket: Ticket | None = None) -> None:
        entry = ticket or self.enter(priority)
        with self.cond:
            try:
                while self.free == 0 or self.waiting[0] != entry:
                    if self.cancel.is_set():
                        raise BuildError("cancelled")
                    self.cond.wait(timeout=0.5)
            except BaseException:
                self.waiting.remove(entry)
                heapq.heapify(self.waiting)
                self.cond.notify_all()
                raise
            heapq.heappop(self.waiting)
            self.free -= 1
            self.cond.notify_all()  # a next waiter may go too, if slots are left

    def release(self) -> None:
        with self.cond:
            self.free += 1
            self.cond.notify_all()


def priorities(plan: Plan) -> dict[str, tuple[int, ...]]:
    """Build order among ready targets: more descendants first (the longer chains), then shared-CUDA
    bases (admitted first, they lend their slot while their CUDA image is made), then plan order."""
    def descendants(tid: str) -> int:
        seen, todo = set(), [tid]
        while todo:  # (a cyclic plan is refused later, in one line: no recursion here)
            for child in plan.children(todo.pop()):
                if child.id not in seen:
                    seen.add(child.id)
                    todo.append(child.id)
        return len(seen)
    return {t.id: (-descendants(t.id), 0 if t.cuda_set is not None else 1, i) for i, t in enumerate(plan.targets)}
