"""The staging push through the engine goes the release's way (stages.release.push): retried with backoff while retrying may help,
with the registry's own words when it answered the engine's push with a server error."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import pytest

from imagesmith.edges.protocols import LineSink
from imagesmith.edges.registry import RegistryHTTPError
from imagesmith.errors import BuildError
from imagesmith.progress import QuietDisplay
from imagesmith.stages.building.staging import Stage
from imagesmith.stages.release.push import Backoff
from tests.doubles import EngineBase, RegistryBase

DIGEST = "sha256:" + "d" * 64
IMAGE = "sha256:" + "1" * 64
BUSY = RegistryHTTPError("push failed: received unexpected HTTP status: 503 Service Unavailable", 503)
FULL = RegistryHTTPError("push failed: received unexpected HTTP status: 500 Internal Server Error", 500)


@dataclass
class Pusher(EngineBase):
    """Fails each push with the next of ``errors``, then answers ``DIGEST``."""

    errors: list[Exception] = field(default_factory=list)
    pushes: int = 0
    tags: list[str] = field(default_factory=list)

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        assert image_id == IMAGE
        self.tags.append(f"{repository}:{tag}")

    def untag(self, ref: str) -> None:
        self.tags.remove(ref)

    def push(self, repository: str, tag: str, auth: Mapping[str, str] | None, on_line: LineSink) -> str:
        self.pushes += 1
        if self.errors:
            raise self.errors.pop(0)
        return DIGEST


FULL_ANSWER = RegistryHTTPError("the registry's storage is full", 507, transient=False, said="storage quota exceeded",
                                hint="free space on harbor.example.com")


class Staging(RegistryBase):
    """Takes uploads, unless ``answer``: the registry's own error for one."""

    host = "harbor.example.com"

    def __init__(self, answer: RegistryHTTPError | None = None) -> None:
        self.answer = answer

    def check_upload(self, repo: str) -> None:
        if self.answer is not None:
            raise self.answer


class Notes(QuietDisplay):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, message: str) -> None:
        self.notes.append(message)


def stage(engine: Pusher, tmp_path: Path, notes: Notes, waits: list[float], registry: Staging | None = None) -> Stage:
    return Stage(engine, registry or Staging(), "ml/staging", tmp_path, display=notes, backoff=Backoff(tries=3), sleep=waits.append,
                 direct=False)


def test_a_busy_registry_is_tried_again(tmp_path: Path) -> None:
    engine, notes, waits = Pusher([BUSY]), Notes(), list[float]()
    assert stage(engine, tmp_path, notes, waits)._push_image(IMAGE, "ctx-1") == DIGEST
    assert (engine.pushes, waits, engine.tags) == (2, [1.0], [])
    assert notes.notes == ["staging push harbor.example.com/ml/staging:ctx-1: push failed: received unexpected HTTP status: "
                           "503 Service Unavailable; retry 1 of 2 in 1s"]


def test_a_registry_that_stays_busy_is_one_error_saying_how_often(tmp_path: Path) -> None:
    engine, notes, waits = Pusher([BUSY, BUSY, BUSY]), Notes(), list[float]()
    with pytest.raises(BuildError) as err:
        stage(engine, tmp_path, notes, waits)._push_image(IMAGE, "ctx-1")
    assert str(err.value) == ("staging push harbor.example.com/ml/staging:ctx-1 failed 3 times; last error: push failed: "
                              "received unexpected HTTP status: 503 Service Unavailable. The staging registry harbor.example.com "
                              "looks down or overloaded: check it, then build again (what was staged stays)")
    assert (engine.pushes, waits) == (3, [1.0, 2.0])


def test_a_server_error_carries_the_registrys_own_words_and_is_not_retried_when_they_say_it_will_not_help(tmp_path: Path) -> None:
    engine, notes, waits = Pusher([FULL]), Notes(), list[float]()
    with pytest.raises(RegistryHTTPError) as err:
        stage(engine, tmp_path, notes, waits, Staging(FULL_ANSWER))._push_image(IMAGE, "ctx-1")
    assert str(err.value) == ("push harbor.example.com/ml/staging:ctx-1 failed: push failed: received unexpected HTTP status: "
                              "500 Internal Server Error; the registry says: storage quota exceeded (free space on harbor.example.com)")
    assert (engine.pushes, waits, notes.notes) == (1, [], [])
