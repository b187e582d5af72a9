"""Pushes side by side (imagesmith.stages.release.pushqueue): which images may push at once, and the threads that
run them. Shapes are the local release's: a CPU cell and two CUDA cells on one CUDA layer, layers above them."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from imagesmith.stages.release import publish, pushqueue

HANG_GUARD = 60.0  # seconds: only a hang ever waits this long

LAYERS = {
    "cpu": frozenset({"os12", "cpu-venv"}),
    "cuda12": frozenset({"os12", "cuda", "venv12"}),
    "cuda13": frozenset({"os13", "cuda", "venv13"}),
    "cpu-nlp": frozenset({"os12", "cpu-venv", "nlp"}),
    "cv": frozenset({"os12", "cuda", "venv12", "cv"}),
    "nlp": frozenset({"os12", "cuda", "venv12", "nlp12"}),
}
ORDER = list(LAYERS)


@pytest.mark.parametrize("waiting, running, sent, room, start", [
    (ORDER, [], [], 2, ["cpu", "cuda13"]),  # cuda12 shares the Debian 12 base with cpu: the next disjoint one goes ahead
    (ORDER, [], [], 1, ["cpu"]),
    (ORDER[2:], ["cpu"], [], 1, ["cuda13"]),
    (["cuda12", "cpu-nlp", "cv", "nlp"], ["cuda13"], LAYERS["cpu"], 1, ["cpu-nlp"]),  # cuda12 waits for the CUDA layer
    (["cv", "nlp"], [], LAYERS["cuda12"], 2, ["cv", "nlp"]),  # siblings above a sent parent: their own layers differ
    (["cv", "nlp"], ["cuda12"], [], 2, []),  # a child never beside its parent's push
    (["cpu-nlp"], ["cpu"], LAYERS["cpu"], 1, ["cpu-nlp"]),  # what is sent is shared freely
])
def test_images_push_at_once_only_when_their_unsent_layers_are_disjoint(
        waiting: list[str], running: list[str], sent: frozenset[str] | list[str], room: int, start: list[str]) -> None:
    assert pushqueue.startable(waiting, LAYERS, running, sent, room) == start


class Recorder:
    """A push that records what runs beside what; ``meet`` makes named pushes wait for each other."""

    def __init__(self, meet: tuple[str, ...] = (), fail: str = "") -> None:
        self.lock, self.running, self.sent = threading.Lock(), set[str](), set[str]()
        self.pushed: list[str] = []
        self.overlaps: list[tuple[str, str]] = []
        self.meet, self.barrier = meet, threading.Barrier(max(1, len(meet)), timeout=HANG_GUARD)
        self.fail = fail

    def __call__(self, key: str) -> bool:
        with self.lock:
            mine = LAYERS[key] - self.sent
            self.overlaps += [(key, other) for other in self.running if mine & (LAYERS[other] - self.sent)]
            self.running.add(key)
        if key in self.meet:
            self.barrier.wait()  # broken (an error) unless every one of them runs at the same time
        with self.lock:
            self.running.discard(key)
            if key == self.fail:
                raise RuntimeError(f"{key}: the registry went away")
            self.sent |= LAYERS[key]
            self.pushed.append(key)
        return True


def test_the_release_pushes_everything_two_at_once_and_never_one_layer_twice() -> None:
    push = Recorder(meet=("cpu", "cuda13"))
    pushqueue.push_all(ORDER, LAYERS, 2, push)
    assert sorted(push.pushed) == sorted(ORDER)
    assert push.overlaps == []
    assert push.pushed.index("cuda12") > push.pushed.index("cuda13")
    assert min(push.pushed.index("cv"), push.pushed.index("nlp")) > push.pushed.index("cuda12")


def test_the_first_failure_stops_the_queue_and_is_raised() -> None:
    push = Recorder(fail="cpu")
    with pytest.raises(RuntimeError, match="cpu: the registry went away"):
        pushqueue.push_all(ORDER, LAYERS, 1, push)
    assert push.pushed == []  # nothing started after it


def test_a_failed_push_leaves_its_layers_unsent_for_the_ones_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    layers = {"a": frozenset({"x"}), "b": frozenset({"x", "y"})}
    seen: list[tuple[list[str], set[str]]] = []
    startable = pushqueue.startable

    def recorded(waiting: Any, layers: Any, running: Any, sent: Any, room: int) -> list[str]:
        seen.append((list(waiting), set(sent)))
        return startable(waiting, layers, running, sent, room)
    monkeypatch.setattr(pushqueue, "startable", recorded)
    pushqueue.push_all(["a", "b"], layers, 2, lambda key: key != "a")  # "a" did not land (its tag held another image)
    assert seen == [(["a", "b"], set()), (["b"], set())]


def release_items() -> list[publish.Item]:
    facts = {"torch": "2.14.1+cu130", "cuda": "13.0", "cudnn": "9.13.0", "nccl": "2.28.3", "python": "3.11.2",
             "os": "debian12", "packages": {"torch": "2.14.1+cu130"}}
    out = []
    for name in ("cpu", "cuda13"):
        image_id = f"sha256:{name:0>64}"
        out.append(publish.Item(name, "base", name, image_id, dict(facts, os="debian13" if name == "cuda13" else "debian12"),
                                True, True, {"ok": True}))
    return out


def test_the_publisher_pushes_two_images_with_disjoint_layers_side_by_side(tmp_path: Path) -> None:
    """The engine names each image's layers; two that share none meet inside their pushes (a barrier that breaks
    unless both run at once) and both land."""
    from imagesmith.model.matrix.records import ImageSpec
    from imagesmith.model.tags import TagPolicy
    from tests.unit.stages.release.test_publish import FakeEngine, FakeRegistry

    layers = {"sha256:" + "cpu".rjust(64, "0"): ("os12", "cpu-venv"), "sha256:" + "cuda13".rjust(64, "0"): ("os13", "cuda")}
    meet = threading.Barrier(2, timeout=HANG_GUARD)

    class LayeredEngine(FakeEngine):
        def image(self, ref: str) -> Any:
            if ref in layers:
                return SimpleNamespace(id=ref, layers=layers[ref])
            return super().image(ref)

        def push(self, repository: str, tag: str, auth: Any, on_line: Any) -> str:
            meet.wait()
            return super().push(repository, tag, auth, on_line)

    reg = FakeRegistry()
    engine = LayeredEngine(reg)
    report = publish.Publisher(engine, reg, ImageSpec(repository="ml/pytorch", registry="reg.test:5000"),
                               TagPolicy(immutable="{torch}-{os}-{date}"), "20261203", tmp_path,
                               allow_cpu_verification=True).run(release_items())
    assert [t.status for t in report.targets] == ["pushed", "pushed"]
    assert sorted(engine.pushes) == ["2.14.1-debian12-20261203-not-gpu-verified", "2.14.1-debian13-20261203-not-gpu-verified"]
