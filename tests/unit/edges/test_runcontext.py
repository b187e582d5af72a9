"""The run context: the one maker of engines and registry clients; doubles plug in through its factories."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from imagesmith.edges.credentials import CredentialStore, Declared
from imagesmith.edges.registry import Credentials, Registry
from imagesmith.edges.runcontext import RunContext
from tests.doubles import EngineBase


def test_the_engine_is_made_on_first_use_and_kept() -> None:
    made: list[EngineBase] = []

    def factory() -> EngineBase:
        made.append(EngineBase())
        return made[-1]

    context = RunContext(engine_factory=factory)
    assert made == []  # a command that never needs the engine never connects
    assert context.engine is context.engine is made[0]
    assert len(made) == 1


def test_a_given_engine_is_used_as_is() -> None:
    engine = EngineBase()
    assert RunContext(engine_given=engine).engine is engine


def test_registry_clients_come_from_the_factory_with_what_the_caller_asked() -> None:
    asked: list[tuple[Any, ...]] = []

    def factory(host: str, credentials: Credentials | None = None, *, ca_file: Path | None = None,
                anonymous_hint: str = "") -> Registry:
        asked.append((host, credentials, ca_file, anonymous_hint))
        return Registry(host, credentials)

    creds = Credentials("robot", "secret", "test")
    context = RunContext(CredentialStore(Declared(release="harbor.example.com")), registry_factory=factory)
    client = context.registry("harbor.example.com", creds, ca_file=Path("/ca.pem"), anonymous_hint="declare it")
    assert (client.host, client.credentials) == ("harbor.example.com", creds)
    assert asked == [("harbor.example.com", creds, Path("/ca.pem"), "declare it")]


def test_the_default_registry_is_the_http_client() -> None:
    client = RunContext().registry("127.0.0.1:5000")
    assert isinstance(client, Registry) and client.insecure and client.credentials is None
