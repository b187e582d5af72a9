"""One command's run context: the engine, the credential store, the registry clients, progress and the clock.

A command builds one :class:`RunContext` at its start and hands it down; it is the only code that constructs an
:class:`~imagesmith.edges.engine.Engine` or a :class:`~imagesmith.edges.registry.Registry`. The engine is made on
first use and kept (a command that never needs it never connects); a registry client is made for the host it is
asked, with the credentials the caller got from the store for that host. Tests plug their doubles in through
``engine_factory`` and ``registry_factory`` (or hand a ready engine as ``engine``).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from imagesmith.edges.credentials import CredentialStore
from imagesmith.edges.protocols import EngineProtocol
from imagesmith.progress import Display, QuietDisplay

if TYPE_CHECKING:  # docker and requests are imported only when an engine or a client is made
    from imagesmith.edges.registry import Credentials, Registry


class RegistryFactory(Protocol):
    def __call__(self, host: str, credentials: Credentials | None = None, *, ca_file: Path | None = None,
                 anonymous_hint: str = "") -> Registry: ...


def docker_engine(**options: Any) -> EngineProtocol:
    """The engine DOCKER_HOST names (docker SDK; Podman's Docker API too)."""
    from imagesmith.edges.engine import Engine

    return Engine(**options)


def http_registry(host: str, credentials: Credentials | None = None, *, ca_file: Path | None = None,
                  anonymous_hint: str = "") -> Registry:
    """A Registry HTTP API v2 client for ``host``, sending ``credentials`` (those the store holds for that host)."""
    from imagesmith.edges.registry import Registry

    return Registry(host, credentials, ca_file=ca_file, anonymous_hint=anonymous_hint)


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


@dataclass
class RunContext:
    """What one command's stages share, built once by the command."""

    store: CredentialStore = field(default_factory=CredentialStore)
    progress: Display = field(default_factory=QuietDisplay)
    clock: Callable[[], dt.datetime] = utc_now
    engine_factory: Callable[[], EngineProtocol] = docker_engine
    registry_factory: RegistryFactory = http_registry
    engine_given: EngineProtocol | None = field(default=None, repr=False)

    @property
    def engine(self) -> EngineProtocol:
        """The run's engine, made on first use and kept."""
        if self.engine_given is None:
            self.engine_given = self.engine_factory()
        return self.engine_given

    def registry(self, host: str, credentials: Credentials | None = None, *, ca_file: Path | None = None,
                 anonymous_hint: str = "") -> Registry:
        """A client for ``host`` sending ``credentials`` (asked of :attr:`store` by the caller, who knows whether the
        host was declared or read from an artifact)."""
        return self.registry_factory(host, credentials, ca_file=ca_file, anonymous_hint=anonymous_hint)


__all__ = ["RegistryFactory", "RunContext", "docker_engine", "http_registry", "utc_now"]
