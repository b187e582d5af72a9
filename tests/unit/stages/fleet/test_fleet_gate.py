"""The publish gate: a floating tag moves only to a digest that passed on every
required class, and a held-back tag names the class. Checked on the
Publisher with the registry double of test_publish (what ends up in the
registry, and in release.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import UserError
from imagesmith.model import fleetreport as report
from imagesmith.model.fleetreport import CellResult, FleetReport
from imagesmith.stages.fleet import gate
from tests.unit.stages.release.test_publish import FakeEngine, FakeRegistry, World, item, manifest_for

REPO = "reg.test:5000/ml/pytorch"


def digest_of(torch: str, layer: str = "base") -> str:
    it = item(torch, layer)
    return manifest_for(it.image_id or "").digest


def cell(digest: str, klass: str, status: str = "pass", reason: str = "every required check passed") -> CellResult:
    return CellResult(f"{REPO}@{digest}", klass, "slurm", status, reason)


@pytest.fixture()
def world(tmp_path: Path) -> World:
    reg = FakeRegistry()
    return World(reg, FakeEngine(reg), tmp_path, [])


D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
GATE_CASES = [
    ([cell(D1, "h200"), cell(D1, "l40s")], D1, None),
    ([cell(D1, "h200"), cell(D1, "l40s", "fail", "failed checks: gemm.bf16")], D1,
     "held back by the fleet: class l40s failed: failed checks: gemm.bf16"),
    ([cell(D1, "h200")], D1,
     "held back by the fleet: class l40s has no fleet result for sha256:111111111111 "
     "(imagesmith fleet verify --fleet fleet.yaml REF@sha256:111111111111...)"),
    ([cell(D1, "h200", "cancelled", "interrupted (Ctrl-C): 12 cancelled"), cell(D1, "l40s")], D1,
     "held back by the fleet: class h200 cancelled: interrupted (Ctrl-C): 12 cancelled"),
    ([cell(D2, "h200"), cell(D2, "l40s")], D1,
     "held back by the fleet: class h200 has no fleet result for sha256:111111111111 (imagesmith fleet verify --fleet fleet.yaml "
     "REF@sha256:111111111111...); class l40s has no fleet result for sha256:111111111111 (imagesmith fleet verify --fleet "
     "fleet.yaml REF@sha256:111111111111...)"),
    # the newest result of a digest x class wins: a re-run that passes lifts the hold
    ([cell(D1, "h200", "fail", "node failed"), cell(D1, "h200"), cell(D1, "l40s")], D1, None),
    ([cell(D1, "h200"), cell(D1, "h200", "fail", "failed checks: nccl.smoke"), cell(D1, "l40s")], D1,
     "held back by the fleet: class h200 failed: failed checks: nccl.smoke"),
    ([cell(D1, "h200"), cell(D1, "l40s")], None, "held back by the fleet: class h200 has no fleet result for  "
     "(imagesmith fleet verify --fleet fleet.yaml REF@...); class l40s has no fleet result for  (imagesmith fleet verify --fleet fleet.yaml REF@...)"),
]


@pytest.mark.parametrize("cells, digest, why", GATE_CASES)
def test_held_back_names_each_class(cells: list[CellResult], digest: str | None, why: str | None) -> None:
    assert gate.FleetGate.of(("h200", "l40s"), tuple(cells)).held_back(digest) == why


def test_floating_tags_move_only_to_digests_every_required_class_passed(world: World) -> None:
    base, cv = digest_of("2.9.1", "base"), digest_of("2.9.1", "cv")
    g = gate.FleetGate.of(("a", "b"), (cell(base, "a"), cell(base, "b"), cell(cv, "a"),
                                    cell(cv, "b", "fail", "failed checks: versions.torch")))
    data = world.release([item("2.9.1", "base"), item("2.9.1", "cv")], floating_gate=g.held_back)
    assert [t["status"] for t in data["targets"]] == ["pushed", "pushed"]  # immutable tags are not gated
    floating = {f["tag"]: f for f in data["floating"]}
    assert {t: f["action"] for t, f in floating.items()} == {"latest": "created", "v2.9-base": "created", "v2.9-cv": "kept"}
    assert floating["v2.9-cv"]["reason"] == (f"2.9.1-cv ({cv[:19]}) held back by the fleet: class b failed: failed checks: versions.torch")
    assert "v2.9-cv" not in world.reg.repo_tags and world.reg.digest_of("v2.9-base") == base
    assert data["ok"] is True and [t["floating"] for t in data["targets"]] == [["latest", "v2.9-base"], []]


def test_a_held_back_newer_image_leaves_the_tag_on_the_verified_one(world: World) -> None:
    old = world.seed("2.9.0", "v2.9-base", "latest")
    g = gate.FleetGate.of(("a",), (cell(old, "a"), cell(digest_of("2.9.1"), "a", "fail", "the node failed while the job ran")))
    data = world.release([item("2.9.1")], floating_gate=g.held_back)
    assert {f["tag"]: (f["action"], f["digest"]) for f in data["floating"]} == {"latest": ("kept", old), "v2.9-base": ("kept", old)}
    assert world.reg.digest_of("latest") == old and world.reg.digest_of("v2.9-base") == old


def test_without_a_gate_nothing_changes(world: World) -> None:
    data = world.release([item("2.9.1", "cv")])
    assert {f["tag"]: f["action"] for f in data["floating"]} == {"v2.9-cv": "created"}


# -- loading the gate -----------------------------------------------------------------------------------------


def write_report(path: Path, cells: list[CellResult], requires: tuple[str, ...] = ("a", "b"), started: str = "2026-11-30T10:00:00+00:00") -> Path:
    report.write(FleetReport("fleet.yaml", "r1", "quick", started, requires, tuple(cells)), path)
    return path


def test_the_rule_comes_from_the_fleet_file_when_given(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("classes:\n  a: {gpus: 0, slurm: {partition: p}}\n  b: {gpus: 0, slurm: {partition: p}}\n"
                     "  c: {gpus: 0, slurm: {partition: p}}\nfloating: {require: [a, c]}\n")
    rep = write_report(tmp_path / "r.json", [cell(D1, "a"), cell(D1, "b")])
    g = gate.load_gate(fleet, [rep])
    assert g is not None and g.requires == ("a", "c")
    assert g.held_back(D1) == (f"held back by the fleet: class c has no fleet result for {D1[:19]} "
                               f"(imagesmith fleet verify --fleet {fleet} REF@{D1[:19]}...)")
    assert gate.load_gate(fleet, []).held_back(D1).startswith("held back by the fleet: class a has no fleet result")  # type: ignore[union-attr]


def test_a_report_never_brings_its_own_rule(tmp_path: Path) -> None:
    rep = write_report(tmp_path / "r.json", [cell(D1, "a"), cell(D1, "b")])  # requires: [a, b], both "pass"
    assert gate.load_gate(None, []) is None
    with pytest.raises(UserError) as err:
        gate.load_gate(None, [rep])
    assert str(err.value) == (f"{rep}: floating tags move on fleet evidence only against a rule the operator gives: --fleet "
                              "fleet.yaml, or a fleet section (require, classes) in the trust policy; a fleet report's own "
                              "requires is not believed")


BAD_REPORTS = [
    ([], "r.json: schema 'list' is not imagesmith.fleet-report/1; give the fleet-report.json that fleet verify wrote"),
    ({"schema": "imagesmith.run-report/1"}, "r.json: schema 'imagesmith.run-report/1' is not imagesmith.fleet-report/1"),
    ({"schema": "imagesmith.fleet-report/1", "cells": {}}, "r.json: report.cells: expected list, got dict"),
    ({"schema": "imagesmith.fleet-report/1", "cells": [{"status": "passed", "ref": f"x@{D1}"}]},
     "r.json: cells[0].status: 'passed' is not one of pass, fail, cancelled"),
    ({"schema": "imagesmith.fleet-report/1", "cells": [{"status": "pass", "ref": "x:latest"}]},
     "r.json: cells[0].ref: 'x:latest' is not pinned by digest"),
    ({"schema": "imagesmith.fleet-report/1", "cells": [{"status": "pass", "ref": f"x@{D1}", "restarts": "1"}]},
     "r.json: cells[0].restarts: expected int, got str"),
    ({"schema": "imagesmith.fleet-report/1", "requires": ["a", 1]}, "r.json: report.requires[1]: expected a string, got int"),
    ({"schema": "imagesmith.fleet-report/1", "cells": [{"status": "pass", "ref": f"x@{D1}", "figures": [{"value": "fast"}]}]},
     "r.json: cells[0].figures[0].value: expected a number, got str"),
]


@pytest.mark.parametrize("doc, message", BAD_REPORTS)
def test_a_bad_fleet_report_names_the_field(doc: Any, message: str) -> None:
    with pytest.raises(UserError) as exc:
        report.parse(doc, "r.json")
    assert str(exc.value).startswith(message)


def test_a_report_round_trips(tmp_path: Path) -> None:
    fig = report.Figure("gemm.bf16", 771.2, "TFLOP/s", 784.0, 98.4, "pass")
    c = CellResult(f"{REPO}@{D1}", "h200", "slurm", "pass", "ok", "standard", "12", "COMPLETED", "n1", 1, 3.0, 42.5,
                   "x/h200/verify.json", {"pass": 40, "fail": 0}, (), ("NVIDIA H200",), (fig,))
    path = write_report(tmp_path / "r.json", [c])
    back = report.load(path)
    assert back.cells == (c,) and back.requires == ("a", "b") and json.loads(path.read_text())["cells"][0]["digest"] == D1
