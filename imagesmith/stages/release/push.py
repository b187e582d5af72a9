"""The one push path: an engine push with the registry's own detail on a server error, retried with backoff
(tenacity) on what retrying may help. The release push (:mod:`imagesmith.stages.release.publish`) and the staging push
(:mod:`imagesmith.stages.building.staging`) both go through it; each words its own final failure.
This module never imports docker.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Mapping

import tenacity

from imagesmith.edges.protocols import EngineProtocol, LineSink, RegistryProtocol
from imagesmith.edges.registry import RegistryHTTPError
from imagesmith.errors import EngineConnectionLost, ImagesmithError, RegistryError

Note = Callable[[tenacity.RetryCallState], None]


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff: ``tries`` attempts, waiting first, first*factor, ... (capped)."""

    tries: int = 5
    first: float = 1.0
    factor: float = 2.0
    cap: float = 30.0

    def delays(self) -> list[float]:
        return [min(self.cap, self.first * self.factor**i) for i in range(max(0, self.tries - 1))]

    def wait(self) -> tenacity.wait.wait_base:
        """The same schedule as :meth:`delays`, for tenacity."""
        return tenacity.wait_exponential(multiplier=self.first, exp_base=self.factor, min=0, max=self.cap)


def transient(exc: BaseException) -> bool:
    """May retrying help? Decided by type and HTTP status, never by a message's words: a registry
    that answered 408/425/429/5xx (:data:`imagesmith.edges.registry.TRANSIENT_STATUS`; a 500 whose body
    says its storage is full is not) or did not answer at all (:class:`RegistryUnreachable`),
    the engine's connection lost, a connection reset or timed out: yes. 400/401/403/404, TLS
    problems, anything else: no."""
    if isinstance(exc, RegistryHTTPError):
        return exc.transient
    return isinstance(exc, (EngineConnectionLost, ConnectionError, TimeoutError))


def message_of(exc: BaseException) -> str:
    return str(exc).strip() or type(exc).__name__


def retrying(backoff: Backoff, sleep: Callable[[float], None] = time.sleep, note: Note | None = None) -> tenacity.Retrying:
    """Retry :func:`transient` errors on ``backoff``'s schedule (``note`` before each wait); the last error is raised."""
    return tenacity.Retrying(retry=tenacity.retry_if_exception(transient), stop=tenacity.stop_after_attempt(max(1, backoff.tries)),
                             wait=backoff.wait(), sleep=sleep, before_sleep=note, reraise=True)


def registry_answer(registry: RegistryProtocol, repo: str) -> RegistryHTTPError | None:
    """The registry's own error for an upload to ``repo``; None when it accepts one."""
    try:
        registry.check_upload(repo)
    except RegistryHTTPError as exc:
        return exc
    except (ImagesmithError, OSError):
        return None
    return None


def push_once(engine: EngineProtocol, registry: RegistryProtocol, repo: str, name: str, tag: str,
              auth: Mapping[str, str] | None, on_line: LineSink) -> str:
    """One engine push of ``name:tag`` (``repo`` on ``registry``); when the registry answered it with a server
    error, its own error body (which the engine does not pass on) decides and is shown."""
    try:
        return engine.push(name, tag, auth, on_line)
    except RegistryError as exc:
        status = getattr(exc, "status", None)
        if status is None or status < 500:  # refused (auth, missing), or no answer at all: nothing more to ask
            raise
        answer = registry_answer(registry, repo)
        if answer is None:
            raise
        said = getattr(exc, "said", message_of(exc))
        advice = answer.hint or f"check that {registry.host} is healthy"
        raise RegistryHTTPError(f"push {name}:{tag} failed: {said}; the registry says: {answer.said} ({advice})",
                                answer.status, answer.transient, said=answer.said, hint=answer.hint) from None
