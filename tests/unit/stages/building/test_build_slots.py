"""slots.Slots (at most ``jobs`` docker builds, served by priority) and slots.priorities
(the order in which ready targets get them). Order is judged by what was recorded, never by time."""

from __future__ import annotations

import threading
import time
from typing import Callable

import pytest

from imagesmith.errors import BuildError
from imagesmith.model import matrix, plan
from imagesmith.stages.building import slots as build
from tests.conftest import LOCAL_ROOTS, ROOT


def wait_until(check: Callable[[], bool]) -> None:
    for _ in range(2000):
        if check():
            return
        time.sleep(0.005)
    raise AssertionError("condition never held")


def waiters(slots: build.Slots) -> int:
    with slots.cond:
        return len(slots.waiting)


def test_the_best_priority_waiting_goes_first_then_arrival() -> None:
    slots, order = build.Slots(1, threading.Event()), []
    slots.acquire((0,))

    def take(name: str, priority: tuple[int, ...]) -> None:
        with slots.held(priority):
            order.append(name)

    threads = []
    for name, priority in [("late-low", (5,)), ("high", (1,)), ("low-second", (5,))]:
        threads.append(threading.Thread(target=take, args=(name, priority)))
        threads[-1].start()
        wait_until(lambda: waiters(slots) == len(threads))
    slots.release()
    for th in threads:
        th.join(timeout=10)
    assert order == ["high", "late-low", "low-second"]


def test_two_slots_let_two_holders_in_and_no_third() -> None:
    slots = build.Slots(2, threading.Event())
    slots.acquire((1,))
    slots.acquire((1,))
    third = threading.Thread(target=slots.acquire, args=((0,),))
    third.start()
    wait_until(lambda: waiters(slots) == 1)
    assert slots.free == 0 and third.is_alive()
    slots.release()
    third.join(timeout=10)
    assert not third.is_alive() and slots.free == 0 and waiters(slots) == 0


def test_a_lent_slot_serves_another_target_and_comes_back() -> None:
    slots, order = build.Slots(1, threading.Event()), []
    lending, back = threading.Event(), threading.Event()

    def waiter() -> None:
        with slots.held((0,)):
            with slots.lent((0,)):
                lending.set()
                back.wait(timeout=10)
            order.append("waiter again")

    first = threading.Thread(target=waiter)
    first.start()
    lending.wait(timeout=10)
    with slots.held((9,)):  # the lent slot: taken while the first waits for its CUDA image
        order.append("other")
    back.set()
    first.join(timeout=10)
    assert order == ["other", "waiter again"] and slots.free == 1


def test_cancel_ends_a_wait_with_an_error_and_leaves_no_waiter() -> None:
    cancel = threading.Event()
    slots = build.Slots(1, cancel)
    slots.acquire((0,))
    errors: list[str] = []

    def wait() -> None:
        try:
            slots.acquire((0,))
        except BuildError as exc:
            errors.append(str(exc))

    th = threading.Thread(target=wait)
    th.start()
    wait_until(lambda: waiters(slots) == 1)
    cancel.set()
    th.join(timeout=10)
    assert errors == ["cancelled"] and waiters(slots) == 0 and slots.free == 0


@pytest.fixture(scope="module")
def local_plan() -> plan.Plan:
    return plan.expand(matrix.load(ROOT / "examples" / "local.yaml", allowed_roots=LOCAL_ROOTS), "20261130")


def test_longer_chains_first_then_shared_cuda_bases(local_plan: plan.Plan) -> None:
    prio = build.priorities(local_plan)
    bases = sorted((t.id for t in local_plan.targets if t.parent is None), key=prio.__getitem__)
    assert bases == ["2.14.1-cu130-py3.11-debian12-base", "2.13.0-cpu-py3.11-debian12-base",  # 3 and 1 descendants
                     "2.14.1-cu130-py3.13-debian13-base"]
    cv, nlp = prio["2.14.1-cu130-py3.11-debian12-cv"], prio["2.14.1-cu130-py3.11-debian12-nlp"]
    assert cv < nlp  # cv has a child (project), nlp none
