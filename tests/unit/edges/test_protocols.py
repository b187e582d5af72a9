"""The real edges satisfy the protocols the stages take (mypy --strict checks these assignments)."""

from __future__ import annotations

import pytest

from imagesmith.edges.engine import Engine, Running
from imagesmith.edges.protocols import EngineProtocol, RegistryProtocol, RunningProtocol
from imagesmith.edges.registry import Registry
from tests.doubles import EngineBase, RegistryBase


def test_the_real_engine_and_registry_are_what_the_stages_ask_for() -> None:
    engine: EngineProtocol = Engine(client=object())
    registry: RegistryProtocol = Registry("registry.example.com")
    running: RunningProtocol = Running(object())
    assert isinstance(engine, Engine) and registry.host == "registry.example.com" and isinstance(running, Running)


def test_the_doubles_bases_are_what_the_stages_ask_for() -> None:
    engine: EngineProtocol = EngineBase()
    registry: RegistryProtocol = RegistryBase()
    with pytest.raises(AssertionError, match=r"engine.image\('x'\) is not expected in this test"):
        engine.image("x")
    with pytest.raises(AssertionError, match=r"registry\.tags is not expected in this test"):
        registry.tags("ml")
