"""Verification beside the build (``build --verify/--push``): the first image that builds is verified at once; once
its report shows that the engine gives no GPU, each later image as soon as it is built; with a GPU, nothing more starts
early and the first is verified again after the build, with no build beside it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Iterator

import pytest

from imagesmith import runstate
from imagesmith.model import gpupath, verifyreport
from imagesmith.model.buildreport import TargetResult
from imagesmith.pipeline.verify_built import EarlyVerify, verify_results
from imagesmith.progress import QuietDisplay
from imagesmith.stages.verify import judge, verify
from tests.doubles import EngineBase


def outcome(target: str, path: str) -> verify.VerifyOutcome:
    doc = judge.failed_report("payload.start", target, "quick") | {"state": runstate.COMPLETE,
                                                                     "gpu_path": gpupath.GpuPath(path, "").record()}
    return verify.VerifyOutcome(verifyreport.parse(doc, "<test>", "report"))


class Verifier:
    """Verifies as the test lets it: each target waits for its own go."""

    def __init__(self, path: str) -> None:
        self.path, self.started, self.go = path, list[str](), {t: threading.Event() for t in "abcd"}
        self.lock = threading.Lock()
        self.began = threading.Condition(self.lock)

    def __call__(self, r: TargetResult) -> verify.VerifyOutcome:
        with self.began:
            self.started.append(r.target)
            self.began.notify_all()
        assert self.go[r.target].wait(60), f"{r.target}: never let go"
        return outcome(r.target, self.path)

    def wait_started(self, n: int) -> list[str]:
        with self.began:
            assert self.began.wait_for(lambda: len(self.started) >= n, timeout=60)
            return list(self.started)


def built(target: str) -> TargetResult:
    return TargetResult(target, "built", image_id=f"sha256:{target}")


@pytest.fixture()
def released() -> Iterator[list[EarlyVerify]]:
    made: list[EarlyVerify] = []
    yield made
    for early in made:
        early.close()


def test_no_gpu_given_each_image_is_verified_as_soon_as_it_is_built(released: list[EarlyVerify]) -> None:
    check = Verifier(gpupath.NONE)
    early = EarlyVerify(check)
    released.append(early)
    early.built(built("a"))
    early.built(built("b"))  # queued: the first has not said yet whether the engine gives a GPU
    assert check.wait_started(1) == ["a"]
    early.built(TargetResult("x", "failed"))  # no image: nothing to verify
    check.go["a"].set()
    assert check.wait_started(2) == ["a", "b"]
    check.go["b"].set()
    early.built(built("c"))
    assert check.wait_started(3) == ["a", "b", "c"]
    check.go["c"].set()
    early.built(built("d"))  # built last: maybe started, maybe left to the verification after the build
    check.go["d"].set()
    done = early.outcomes()
    assert set(done) in ({"a", "b", "c"}, {"a", "b", "c", "d"})
    assert all(o.report.gpu_path == gpupath.NONE for o in done.values())


def test_a_gpu_given_stops_early_verification_and_drops_the_first(released: list[EarlyVerify]) -> None:
    check = Verifier(gpupath.NVIDIA)
    early = EarlyVerify(check)
    released.append(early)
    early.built(built("a"))
    early.built(built("b"))
    assert check.wait_started(1) == ["a"]
    check.go["a"].set()
    early.built(built("c"))
    assert early.outcomes() == {}  # a's verdict ran beside builds: verified again after them
    assert check.started == ["a"]


class Unasked(EngineBase):
    pass


def test_the_verification_after_the_build_takes_the_early_outcomes_as_they_are(tmp_path: Path) -> None:
    results = (built("a"), built("b"))
    early = {"a": outcome("a", gpupath.NONE), "b": outcome("b", gpupath.NONE)}
    options = verify.VerifyOptions(tier="quick", sample_gpus=False)
    assert verify_results(Unasked(), results, options, tmp_path, QuietDisplay(), early=early, jobs=2) == early  # no engine asked
