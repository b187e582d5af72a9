"""Every report says the state of the run that wrote it.

A run writes its report when it starts (``state: running``, atomically
replacing whatever an earlier run left there), rewrites it as it progresses,
and ends it ``complete`` — or ``interrupted`` (Ctrl-C, SIGTERM, an error), with
the reason. Nothing reads a report whose run is not complete as success.

Reports without a ``state`` key were written by imagesmith before reports
carried one; those were only ever written when a run had finished, so they
read as complete.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any, Callable, Mapping

from imagesmith.atomic import write_json

RUNNING, COMPLETE, INTERRUPTED = "running", "complete", "interrupted"
STATES = (RUNNING, COMPLETE, INTERRUPTED)

Document = Mapping[str, Any]


def state_of(doc: Document) -> str:
    state = doc.get("state", COMPLETE)
    return state if isinstance(state, str) and state in STATES else f"unknown ({str(state)[:40]})"


def is_complete(doc: Document) -> bool:
    return state_of(doc) == COMPLETE


def not_complete(doc: Document, what: str) -> str:
    """Why ``doc`` (one of ``what``) cannot be read as a result."""
    state = state_of(doc)
    why = doc.get("interrupted_by")
    if state == RUNNING:
        return f"{what} is from a run that has not finished (state: running; still going, or killed without a trace)"
    return f"{what} is from a run that did not complete (state: {state}{', ' + str(why) if why else ''})"


def stopped_by(exc: BaseException) -> str:
    """SIGINT, SIGTERM or the error that ended a run early."""
    if isinstance(exc, KeyboardInterrupt):
        return "SIGTERM" if str(exc) == "signal 15" else "SIGINT"
    if isinstance(exc, SystemExit):
        return f"exit {exc.code}"
    return f"error: {type(exc).__name__}: {str(exc)[:300]}"


class Tracked:
    """One report file through a run: :meth:`update` while it runs, :meth:`complete`
    at its end; leaving the ``with`` block by an exception (a signal included)
    rewrites the last document as interrupted, then lets the exception go on.

    ``interrupt`` adjusts the last document for the interrupted state (e.g. sets
    ``ok`` false); it must not raise."""

    def __init__(self, path: Path | None, first: Document,
                 interrupt: Callable[[dict[str, Any]], dict[str, Any]] = lambda doc: doc) -> None:
        self.path, self.interrupt = path, interrupt
        self.last: dict[str, Any] = {}
        self.done = False
        self.update(first)

    def _write(self, doc: Document, state: str) -> None:
        self.last = {**doc, "state": state}
        if self.path is not None:  # None: the caller wants no file (e.g. verify without --json)
            write_json(self.path, self.last)

    def update(self, doc: Document) -> None:
        self._write(doc, RUNNING)

    def complete(self, doc: Document) -> None:
        self._write(doc, COMPLETE)
        self.done = True

    def stop(self, exc: BaseException, doc: Document | None = None) -> None:
        if self.done:
            return
        self.done = True
        try:
            self._write({**self.interrupt(dict(doc or self.last)), "interrupted_by": stopped_by(exc)}, INTERRUPTED)
        except OSError:
            pass  # the report stays "running", which no reader takes for success either

    def __enter__(self) -> "Tracked":
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc is not None:
            self.stop(exc)
