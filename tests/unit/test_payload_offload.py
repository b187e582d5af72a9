"""Checks in worker processes (verify/imagesmith_payload/offload.py): real child processes, no torch needed."""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, Dict, List

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "verify"))

from imagesmith_payload import checks  # noqa: F401  (registers every check)
from imagesmith_payload.config import Config
from imagesmith_payload.context import Context
from imagesmith_payload.offload import Offload, worker_argv
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
