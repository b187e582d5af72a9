"""The release policy (imagesmith/model/policy.py): image kind x how it was verified x flag -> what it may get."""

from __future__ import annotations

import json
from typing import Any

import pytest

from imagesmith.model import policy
from imagesmith.model.loader import LoadError
from tests.conftest import ROOT
from tests.doubles import verify_report

GPU = policy.Evidence(True, "gpu", 2, "GPU mode: 2 GPUs (--gpus all)", "pass", {"pass": 20, "skip": 1}, exclusive=True)
UNWATCHED = policy.Evidence(True, "gpu", 1, "GPU mode: 1 GPU (--gpus all)", "pass", {"pass": 20}, None,
                            sharing_reason="the engine is remote")
CPU_NO_RUNTIME = policy.Evidence(True, "cpu", 0, "CPU mode: no GPU visible (the Docker engine has no NVIDIA container "
                                 "runtime)", "skip", {"skip": 20})
CPU_ASKED = policy.Evidence(True, "cpu", 0, "CPU mode, as asked (--gpus none): GPU checks skipped", "skip", {"skip": 20})
GPU_CHECK_FAILED = policy.Evidence(True, "gpu", 1, "GPU mode: 1 GPU (--gpus all)", "pass", {"pass": 19, "fail": 1})
NOTHING_RAN = policy.Evidence(True, "gpu", 1, "GPU mode: 1 GPU (--gpus 0)", "pass", {"skip": 20})
FAILED = policy.Evidence(False, "gpu", 1, "GPU mode: 1 GPU (--gpus all)", "pass", {"pass": 19, "fail": 1})
ALLOWED = "; immutable tag only, marked -not-gpu-verified, no floating tags (--allow-cpu-verification)"
SHARED = policy.Evidence(True, "gpu", 1, "GPU mode: 1 GPU (--gpus all)", "pass", {"pass": 20}, False,
                        "GPU 0 shared with PID 4242 python3, 1.6 GiB")
SHARED_NOTE = ("not GPU-verified: the GPU was not exclusive to the run: GPU 0 shared with PID 4242 python3, 1.6 GiB; "
               "not tagged: verify it again with the GPU to itself")
REFUSED = ("; not tagged: verify it on a GPU host, or pass --allow-cpu-verification to push its immutable tag marked "
           "-not-gpu-verified (no floating tags)")
UNWATCHED_NOTE = ("not GPU-verified: GPU exclusivity not measured: the engine is remote; not tagged: verify it where "
                  "imagesmith runs beside the engine (a local engine, NVML on the host), so that the host watches the GPU "
                  "for the whole run, or pass --allow-cpu-verification to push its immutable tag marked -not-gpu-verified "
                  "(no floating tags)")


# CUDA image?, evidence, --allow-cpu-verification -> release?, floating?, suffix, note
@pytest.mark.parametrize("cuda, ev, allow, release, floating, suffix, note", [
    (True, GPU, False, True, True, "", ""),
    (True, GPU, True, True, True, "", ""),
    (True, CPU_NO_RUNTIME, False, False, False, "", f"not GPU-verified: {CPU_NO_RUNTIME.reason}{REFUSED}"),
    (True, CPU_NO_RUNTIME, True, True, False, "-not-gpu-verified", f"not GPU-verified: {CPU_NO_RUNTIME.reason}{ALLOWED}"),
    (True, CPU_ASKED, True, True, False, "-not-gpu-verified", f"not GPU-verified: {CPU_ASKED.reason}{ALLOWED}"),
    (True, GPU_CHECK_FAILED, True, True, False, "-not-gpu-verified", f"not GPU-verified: 1 GPU check failed{ALLOWED}"),
    (True, NOTHING_RAN, False, False, False, "", f"not GPU-verified: {NOTHING_RAN.reason}{REFUSED}"),
    (True, FAILED, True, False, False, "", "verification failed"),
    (True, SHARED, False, False, False, "", SHARED_NOTE),  # a shared GPU: not verified, whatever the flags
    (True, SHARED, True, False, False, "", SHARED_NOTE),
    # every check passed on a GPU nobody could watch for the whole run: not measured is no pass
    (True, UNWATCHED, False, False, False, "", UNWATCHED_NOTE),
    (True, UNWATCHED, True, True, False, "-not-gpu-verified",
     f"not GPU-verified: GPU exclusivity not measured: the engine is remote{ALLOWED}"),
    (False, CPU_ASKED, False, True, True, "", ""),  # a CPU-only image is vetted on a CPU
    (False, GPU, False, True, True, "", ""),
    (False, FAILED, True, False, False, "", "verification failed"),
])
def test_release_policy(cuda: bool, ev: policy.Evidence, allow: bool, release: bool, floating: bool, suffix: str,
                        note: str) -> None:
    assert policy.grant(cuda, ev, allow) == policy.Grant(release, floating, suffix, note)


WATCHED = {"exclusive": True, "allowed": False, "foreign": [], "reason": "the host watched"}


def report(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"summary": {"ok": True}, "environment": {"gpus": []}, "checks": [], "sharing": WATCHED}
    return base | kw


@pytest.mark.parametrize("rep, mode, gpus, verified", [
    (report(mode={"mode": "gpu", "gpus": 1, "reason": "GPU mode: 1 GPU (--gpus all)", "gpu_checks": {"pass": 9}},
            checks=[{"id": "gpu.devices", "status": "pass"}]), "gpu", 1, True),
    (report(mode={"mode": "cpu", "gpus": 0, "reason": "CPU mode, as asked (--gpus none)", "gpu_checks": {"skip": 9}},
            checks=[{"id": "gpu.devices", "status": "skip"}]), "cpu", 0, False),
    (report(mode={"mode": "gpu", "gpus": 1, "gpu_checks": {"pass": 9}}, summary={"ok": True},  # the summary is not believed:
            checks=[{"id": "gpu.devices", "status": "pass"}, {"id": "versions.torch", "status": "fail"}]), "gpu", 1, False),
    (report(mode={"mode": "gpu", "gpus": 2, "gpu_checks": {"pass": 9}},
            checks=[{"id": "gpu.devices", "status": "fail"}]), "gpu", 2, False),  # --gpus 0,1,2 with 2 visible
    # reports written before the mode block: GPUs in the environment and gpu.devices decide
    (report(environment={"gpus": [{"index": 0}, {"index": 1}]}, checks=[{"id": "gpu.devices", "status": "pass"}]),
     "gpu", 2, True),
    # ... and a report without a sharing verdict (written before it, or by a run nobody watched): not GPU-verified
    (report(environment={"gpus": [{"index": 0}]}, checks=[{"id": "gpu.devices", "status": "pass"}], sharing=None),
     "gpu", 1, False),
    (report(checks=[{"id": "gpu.devices", "status": "skip"}]), "cpu", 0, False),
    ({}, "cpu", 0, False),  # a payload that never reported
])
def test_evidence_from_a_verify_report(rep: dict[str, Any], mode: str, gpus: int, verified: bool) -> None:
    ev = policy.evidence(verify_report(rep))
    assert (ev.mode, ev.gpus, ev.gpu_verified) == (mode, gpus, verified)


def test_the_2x_h200_standard_report_without_a_watch_is_not_gpu_verified() -> None:
    rep = json.loads((ROOT / "tests" / "fixtures" / "reports" / "h200x2-standard.json").read_text())
    assert "sharing" not in rep  # written before runs were watched: every check passed, nobody watched the GPUs
    assert policy.evidence(verify_report(rep)).describe() == "not GPU-verified: GPU exclusivity not measured"
    assert policy.evidence(verify_report(rep | {"sharing": WATCHED})).describe() == "GPU-verified on 2 GPUs"


@pytest.mark.parametrize("tag, marked", [("2.14.1-cuda13.0-cudnn9-py3.11-debian12-base-20261130-not-gpu-verified", True),
                                         ("2.14.1-cuda13.0-cudnn9-py3.11-debian12-base-20261130", False),
                                         ("latest", False)])
def test_marked_unverified(tag: str, marked: bool) -> None:
    assert policy.marked_unverified(tag) is marked


@pytest.mark.parametrize("rep, cell", [
    (report(mode={"mode": "gpu", "gpus": 2, "gpu_checks": {"pass": 9}}, environment={"cuda": "13.0"},
            checks=[{"id": "gpu.devices", "status": "pass"}]), "GPU x2"),
    (report(mode={"mode": "gpu", "gpus": 1, "gpu_checks": {"pass": 8, "fail": 1}}, environment={"cuda": "13.0"},
            checks=[{"id": "gpu.devices", "status": "pass"}]), "GPU x1: not GPU-verified"),
    (report(mode={"mode": "cpu", "gpus": 0}, environment={"cuda": "13.0"}), "CPU: not GPU-verified"),
    (report(mode={"mode": "cpu", "gpus": 0}, environment={"cuda": None}), "CPU"),
])
def test_how_verified(rep: dict[str, Any], cell: str) -> None:
    assert policy.how_verified(verify_report(rep)) == cell


@pytest.mark.parametrize("ev, describe, short", [
    (GPU, "GPU-verified on 2 GPUs", "GPU-verified on 2 GPUs"),
    (CPU_ASKED, f"not GPU-verified: {CPU_ASKED.reason}", "not GPU-verified (CPU mode)"),
    (GPU_CHECK_FAILED, "not GPU-verified: 1 GPU check failed", "not GPU-verified (1 GPU check failed)"),
    (UNWATCHED, "not GPU-verified: GPU exclusivity not measured: the engine is remote",
     "not GPU-verified (GPU exclusivity not measured)"),
    (policy.Evidence(True, "cpu", 0, "CPU mode: no GPU visible (x); CPU verification allowed: not GPU-verified", "skip", {}),
     "not GPU-verified: CPU mode: no GPU visible (x); CPU verification allowed", "not GPU-verified (CPU mode)"),
])
def test_describe_and_short(ev: policy.Evidence, describe: str, short: str) -> None:
    assert (ev.describe(), ev.short()) == (describe, short)


FAILED_REQUIRED = [
    ({"checks": [{"id": "a", "status": "fail"}, {"id": "b", "status": "pass"}]}, ["a"]),
    ({"checks": [{"id": "a", "status": "fail", "optional": True}, {"id": "b", "status": "fail", "optional": False}]}, ["b"]),
    ({"checks": [{"id": "a", "status": "warn"}, {"id": "b", "status": "skip"}]}, []),
    ({"checks": None}, []),
    ({}, []),
]


@pytest.mark.parametrize("report, expected", FAILED_REQUIRED)
def test_failed_required(report: dict[str, Any], expected: list[str]) -> None:
    assert policy.failed_required(verify_report(report)) == expected


def test_a_check_that_is_not_one_is_refused_where_the_report_says_it() -> None:
    # the host's parse refuses it, naming the key path; nothing downstream reads around it any more
    with pytest.raises(LoadError, match=r"report\.checks\[0\]: expected an object"):
        verify_report({"checks": ["not a check", {"id": "c", "status": "fail"}]})


FOREIGN = [{"gpu": 0, "uuid": "GPU-1", "pid": 4242, "name": "python3", "used_bytes": 1717986918, "seen": "both"}]


@pytest.mark.parametrize("sharing, exclusive, line", [
    ({"exclusive": False, "allowed": False, "foreign": FOREIGN}, False,
     "not exclusive: GPU 0 shared with PID 4242 python3, 1.6 GiB (throughput checks inconclusive; not verified: "
     "no floating tag)"),
    ({"exclusive": False, "allowed": True, "foreign": FOREIGN}, False,
     "not exclusive: GPU 0 shared with PID 4242 python3, 1.6 GiB (--allow-shared-gpu: throughput measured this "
     "tenant's share; not verified: no floating tag)"),
    ({"exclusive": True, "allowed": False, "foreign": []}, True, "GPUs exclusive to this run"),
    ({"exclusive": None, "allowed": False, "foreign": []}, None, "GPU exclusivity not measured"),
    ({"exclusive": None, "allowed": False, "foreign": [], "reason": "the engine is remote"}, None,
     "GPU exclusivity not measured (the engine is remote)"),
    ({"exclusive": False, "allowed": False, "foreign": [{"gpu": 0, "pid": None, "used_bytes": 1 << 30}]}, False,
     "not exclusive: GPU 0: 1.0 GiB held by processes this run cannot see (throughput checks inconclusive; not "
     "verified: no floating tag)"),
])
def test_sharing_in_the_evidence(sharing: Any, exclusive: Any, line: str) -> None:
    rep = report(mode={"mode": "gpu", "gpus": 1, "gpu_checks": {"pass": 9}}, checks=[{"id": "gpu.devices", "status": "pass"}],
                 sharing=sharing)
    typed = verify_report(rep)
    ev = policy.evidence(typed)
    assert (ev.exclusive, policy.sharing_line(typed), ev.gpu_verified) == (exclusive, line, exclusive is True)


@pytest.mark.parametrize("sharing, where", [
    ("garbage", r"report\.sharing: expected an object"),
    ({"exclusive": False, "allowed": False, "foreign": [{"gpu": "x", "pid": None, "name": 7, "used_bytes": True}]},
     r"report\.sharing\.foreign\[0\]\.gpu: expected a whole number"),
])
def test_a_sharing_block_a_report_misstates_is_refused_where_it_says_it(sharing: Any, where: str) -> None:
    rep = report(mode={"mode": "gpu", "gpus": 1, "gpu_checks": {"pass": 9}}, checks=[{"id": "gpu.devices", "status": "pass"}],
                 sharing=sharing)
    with pytest.raises(LoadError, match=where):
        verify_report(rep)


def gpu_count_report(gpus: Any) -> dict[str, Any]:
    return {"mode": {"mode": "gpu", "gpus": gpus, "status": "pass"}, "checks": [{"id": "gpu.devices", "status": "pass"}],
            "sharing": WATCHED}


@pytest.mark.parametrize("gpus, seen", [(-1, 0), (2**40, 0), (None, 0), (2, 2)])
def test_a_gpu_count_a_report_misstates_counts_as_none(gpus: Any, seen: int) -> None:
    ev = policy.evidence(verify_report(gpu_count_report(gpus)), {"gpu.devices": False})
    assert ev.gpus == seen and ev.gpu_verified is (seen > 0)


@pytest.mark.parametrize("gpus, kind", [
    (float("nan"), "float"), (float("inf"), "float"), ("2", "text"), ([2], "a list"), (True, "bool"), (1.0, "float"),
])
def test_a_gpu_count_that_is_no_whole_number_is_refused_where_the_report_says_it(gpus: Any, kind: str) -> None:
    with pytest.raises(LoadError, match=rf"report\.mode\.gpus: expected a whole number or null, got {kind}"):
        verify_report(gpu_count_report(gpus))
