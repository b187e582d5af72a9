"""Checks in worker processes (verify/imagesmith_payload/offload.py): real child processes, no torch needed."""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, Dict, List

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "verify"))

from imagesmith_payload import checks  # noqa: F401  (registers every check)
from imagesmith_payload.config import Config, Expected
from imagesmith_payload.context import Context
from imagesmith_payload.offload import Offload, worker_argv
from imagesmith_payload.offload import idle as offload_idle
from imagesmith_payload.registry import REGISTRY
from imagesmith_payload.runner import finish, run_checks


@pytest.mark.parametrize("args, kept", [
    (["--tier", "quick", "--out", "r.json", "--emit-marker"], ["--tier", "quick"]),
    (["--out=r.json", "--config", "c.json"], ["--config", "c.json"]),
    ([], []),
])
def test_a_worker_never_gets_the_parents_outputs(args: List[str], kept: List[str]) -> None:
    argv = worker_argv(args, ["amp.bf16", "amp.fp16"], "/tmp/x.json")
    assert argv[2:] == [*kept, "--worker-checks", "amp.bf16,amp.fp16", "--worker-out", "/tmp/x.json"]


def _run(ids: List[str], args: List[str]) -> List[Dict[str, Any]]:
    specs = [dataclasses.replace(REGISTRY[i], worker="w") if i != "versions.python" else REGISTRY[i] for i in ids]
    ctx = Context(Config())
    offload = Offload(specs, ctx, args)
    shown: List[str] = []
    entries: List[Dict[str, Any]] = run_checks(specs, ctx, lambda e, i, n: shown.append(e["id"]), lambda _e: None,
                                               offload)
    assert shown == ["versions.python"] + [i for i in ids if i != "versions.python"]  # local first, workers after
    return entries


def test_worker_entries_come_back_in_the_request_order() -> None:
    entries = _run(["security.sshd", "versions.python", "versions.os"], ["--tier", "quick"])
    assert [e["id"] for e in entries] == ["security.sshd", "versions.python", "versions.os"]
    here = finish(REGISTRY["versions.os"], REGISTRY["versions.os"].func(Context(Config())), 0.0)
    assert (entries[2]["status"], entries[2]["detail"]) == (here["status"], here["detail"])


def test_a_worker_that_reports_nothing_fails_its_checks() -> None:
    entries = _run(["versions.python", "versions.os"], ["--tier", "nonsense"])  # argparse refuses: exit 2
    assert entries[1]["status"] == "fail"
    assert entries[1]["detail"].startswith("not run: its worker process (w) exited 2 without a result: ")
    assert "invalid choice: 'nonsense'" in entries[1]["detail"]


@pytest.mark.parametrize("check_id, config, is_idle", [
    ("amp.bf16", Config(gpus="none"), True),  # CPU mode as asked: a GPU check only skips
    ("amp.bf16", Config(gpus="all"), False),  # GPUs asked for: it may run (or fail gpu.devices' way)
    ("amp.bf16", Config(), False),
    ("amp.bf16", Config(gpus="all", gpu_unavailable="no NVIDIA runtime"), True),  # the host ran it without GPUs
    ("amp.fp16", Config(gpus="all", expected=Expected(cuda="cpu")), True),  # a CPU-only torch expected
    ("amp.fp16", Config(gpus="all", expected=Expected(cuda="13.0")), False),
    ("libs.integrity", Config(gpus="none"), False),  # needs nothing: it hashes whatever is there
    ("layers.nlp.import", Config(layers=("nlp",)), False),  # declared: it must run (and fail if missing)
])
def test_a_worker_check_that_can_only_skip_gets_no_worker(check_id: str, config: Config, is_idle: bool) -> None:
    assert offload_idle(REGISTRY[check_id], config) is is_idle


def test_an_undeclared_layer_is_idle_only_where_its_module_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert offload_idle(REGISTRY["layers.nlp.import"], Config()) is True
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    assert offload_idle(REGISTRY["layers.nlp.import"], Config()) is False


def test_idle_checks_run_in_the_main_process_to_the_same_skip() -> None:
    specs = [REGISTRY["versions.python"], REGISTRY["amp.bf16"], REGISTRY["amp.fp16"]]
    ctx = Context(Config(gpus="none"))
    offload = Offload(specs, ctx, ["--tier", "quick", "--gpus", "none"])
    assert offload.workers == {} and "amp.bf16" not in offload  # no process started
    entries = run_checks(specs, ctx, lambda e, i, n: None, lambda _e: None, offload)
    assert [(e["id"], e["status"]) for e in entries] == [("versions.python", "skip"), ("amp.bf16", "skip"), ("amp.fp16", "skip")]
    assert entries[1]["detail"] in ("no CUDA GPU visible (CPU mode)", "torch is not importable (see versions.torch)")
