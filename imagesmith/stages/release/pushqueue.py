"""Image pushes side by side, never two at once that would send the same layer.

An engine push compresses each layer it sends on one core (gzip), so one image at a time leaves a core idle
for most of a release: the CUDA layer alone is minutes of one core. Two images whose layers not yet in the
registry are disjoint push at once. Two that share such a layer (a cell and its own layers above it, two cells
on one CUDA layer or one OS base) never do: the engine would send it once for both, and each push would say it
sent it (the release's traffic counted twice). The later one waits until the earlier is done, and then finds
the layer already there.

A push that fails leaves its layers unsent for the ones after it. The first push that raises stops the queue:
nothing new starts, what runs finishes, then its error is raised. Pure scheduling (:func:`startable`) and the
threads that run it (:func:`push_all`); this module never imports docker.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Collection, Mapping, Sequence

Layers = Mapping[str, frozenset[str]]  # an image's key -> the diff IDs of its layers


def startable(waiting: Sequence[str], layers: Layers, running: Collection[str], sent: Collection[str], room: int) -> list[str]:
    """Of ``waiting`` (in order), those to start now: at most ``room``, each sharing no layer that is not yet
    ``sent`` with what is ``running`` or with one started before it here. A later image may start ahead of an
    earlier one that has to wait."""
    busy = set().union(*(layers[k] for k in running)) - set(sent)
    out: list[str] = []
    for key in waiting:
        if len(out) >= room:
            break
        unsent = layers[key] - set(sent)
        if unsent & busy:
            continue
        out.append(key)
        busy |= unsent
    return out


def push_all(keys: Sequence[str], layers: Layers, at_once: int, push: Callable[[str], bool]) -> None:
    """``push(key)`` for every key, ``at_once`` at most side by side in the order :func:`startable` allows;
    ``push`` says whether the image is now in the registry (its layers count as sent). The first exception a
    push raises stops the queue (what runs finishes) and is raised; keys not started are left alone."""
    finished: queue.Queue[tuple[str, bool, BaseException | None]] = queue.Queue()
    waiting, running, sent = list(keys), set[str](), set[str]()
    stop: BaseException | None = None

    def work(key: str) -> None:
        try:
            finished.put((key, push(key), None))
        except BaseException as exc:  # handed to the caller's thread, raised there
            finished.put((key, False, exc))

    while waiting or running:
        if stop is None:
            for key in startable(waiting, layers, running, sent, max(1, at_once) - len(running)):
                waiting.remove(key)
                running.add(key)
                threading.Thread(target=work, args=(key,), name=f"push-{key}", daemon=True).start()
        if not running:
            break
        key, there, exc = finished.get()
        running.discard(key)
        if there:
            sent |= layers[key]
        stop = stop or exc
    if stop is not None:
        raise stop
