"""Verify reports as Prometheus metrics (imagesmith.report.prom, imagesmith.stages.metrics): exact series
from the real H200 reports, the sharing block, and every refusal of untrusted input with its message."""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from imagesmith.cli import cli
from imagesmith.errors import UserError
from imagesmith.model.fleetreport import CellResult, FleetReport
from imagesmith.report import parse
from imagesmith.report.model import STATUSES
from imagesmith.report.prom import MAX_CHECKS, Subject, VerifyMetrics, image_digest
from imagesmith.stages import metrics

REPORTS = Path(__file__).resolve().parents[2] / "fixtures" / "reports"
DIGEST = "sha256:" + "ab" * 32
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def raw(name: str) -> dict[str, Any]:
    return dict(json.loads((REPORTS / name).read_text()))


def samples(doc: dict[str, Any], host: str = "gpu1") -> Samples:
    """Every sample of the exposition text of one report, keyed by (name, labels)."""
    text = metrics.exposition(metrics.run_metrics(parse(doc, "r.json"), host).registry)
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


def gpu_labels(gpu: str, uuid: str, **extra: str) -> dict[str, str]:
    return {"Hostname": "gpu1", "digest": DIGEST, "gpu": gpu, "UUID": uuid, "modelName": "NVIDIA H200", **extra}


BASE = {"Hostname": "gpu1", "digest": DIGEST}


@pytest.mark.parametrize(("name", "labels", "value"), [
    ("imagesmith_verify_info", {**BASE, "image": "harbor.example.com/ml/pytorch-cuda:2.14.1-cuda13.0-py3.11-debian12-base-20261130",
                                "target": "2.14.1-cu130-py3.11-debian12-base", "tier": "standard", "torch": "2.14.1", "cuda": "13.0",
                                "cudnn": "9.24.0", "nccl": "2.30.7", "python": "3.11.2", "os": "debian12", "driver": "580.159.04"}, 1.0),
    ("imagesmith_verify_ok", BASE, 0.0),
    ("imagesmith_verify_last_run_timestamp_seconds", BASE, 1796004000.0 + 31.7),  # 2026-11-30T02:00:00+00:00 + duration_s
    ("imagesmith_verify_duration_seconds", BASE, 31.7),
    ("imagesmith_verify_checks", {**BASE, "outcome": "pass"}, 5.0),
    ("imagesmith_verify_checks", {**BASE, "outcome": "fail"}, 3.0),
    ("imagesmith_verify_check_status", {**BASE, "check": "gemm.fp32", "outcome": "fail"}, 1.0),
    ("imagesmith_verify_check_status", {**BASE, "check": "gemm.fp32", "outcome": "pass"}, 0.0),
    ("imagesmith_verify_check_status", {**BASE, "check": "nccl.smoke", "outcome": "skip"}, 1.0),
    ("imagesmith_verify_check_duration_seconds", {**BASE, "check": "leak.cuda"}, 6.2),
    ("imagesmith_verify_baseline_ratio", {**BASE, "check": "gemm.fp16"}, 0.862),
    ("imagesmith_verify_throughput_flops_per_second", {**BASE, "check": "gemm.bf16"}, 771.2e12),
    ("imagesmith_verify_gpu_throughput_flops_per_second", {**gpu_labels("1", "GPU-1"), "check": "gemm.bf16"}, 779.5e12),
    ("imagesmith_verify_leak_slope_bytes_per_step", {**BASE, "check": "leak.cuda"}, 1048576.0),
])
def test_verify_gpu_report_series(name: str, labels: dict[str, str], value: float) -> None:
    assert samples(raw("verify-gpu.json"))[key(name, **labels)] == value


def test_every_check_has_one_outcome_set_to_one() -> None:
    got = samples(raw("h200x2-standard.json"), "vm")
    status = {dict(labels)["check"]: dict(labels)["outcome"] for (name, labels), v in got.items()
              if name == "imagesmith_verify_check_status" and v == 1.0}
    assert len(status) == 51 and list(status.values()).count("pass") == 44 and list(status.values()).count("skip") == 7
    assert sum(name == "imagesmith_verify_check_status" for name, _ in got) == 51 * len(STATUSES)  # one series per outcome, inconclusive included


@pytest.mark.parametrize(("name", "labels", "value"), [
    ("imagesmith_verify_bandwidth_bytes_per_second", {"check": "nccl.allreduce"}, 330.27e9),
    ("imagesmith_verify_bandwidth_bytes_per_second", {"check": "bandwidth.d2d"}, 4266.5e9),
    ("imagesmith_verify_gpu_bandwidth_bytes_per_second", {"check": "bandwidth.d2d", "gpu": "0", "UUID": "", "modelName": "NVIDIA H200"}, 4282.4e9),
    ("imagesmith_verify_baseline_ratio", {"check": "sdpa.perf"}, 1.288),
    ("imagesmith_verify_shared_gpu_solo_ratio", {"check": "contention.shared_gpu"}, 0.92),
    ("imagesmith_verify_leak_slope_bytes_per_step", {"check": "leak.device"}, 0.0),
    ("imagesmith_verify_ok", {}, 1.0),
])
def test_h200x2_report_series(name: str, labels: dict[str, str], value: float) -> None:
    """This report has no image block (a --local run): digest is '' and no UUID is known."""
    assert samples(raw("h200x2-standard.json"), "vm")[key(name, Hostname="vm", digest="", **labels)] == value


def test_checks_without_a_unit_we_know_export_status_only() -> None:
    got = samples(raw("h200x2-standard.json"), "vm")
    assert not [n for n, labels in got if ("check", "layers.cv.decode") in labels and n != "imagesmith_verify_check_status"
                and n != "imagesmith_verify_check_duration_seconds"]


SHARING = {"exclusive": False, "allowed": False, "foreign": [
    {"gpu": 1, "uuid": "GPU-1", "pid": 4242, "name": "python3", "used_bytes": 1 << 30, "seen": "both"},
    {"gpu": 1, "uuid": "GPU-1", "pid": 4243, "name": None, "used_bytes": None, "seen": "end"},
]}


@pytest.mark.parametrize(("sharing", "expected"), [
    (SHARING, {("imagesmith_verify_gpu_exclusive", ()): 0.0, ("imagesmith_verify_gpu_sharing_allowed", ()): 0.0,
               ("imagesmith_verify_foreign_processes", (("gpu", "0"), ("UUID", "GPU-0"))): 0.0,
               ("imagesmith_verify_foreign_processes", (("gpu", "1"), ("UUID", "GPU-1"))): 2.0}),
    ({"exclusive": True, "allowed": False, "foreign": []},
     {("imagesmith_verify_gpu_exclusive", ()): 1.0, ("imagesmith_verify_gpu_sharing_allowed", ()): 0.0,
      ("imagesmith_verify_foreign_processes", (("gpu", "0"), ("UUID", "GPU-0"))): 0.0,
      ("imagesmith_verify_foreign_processes", (("gpu", "1"), ("UUID", "GPU-1"))): 0.0}),
    # the payload could not tell (exclusive null): no gpu_exclusive, and no 0 for GPUs it may not have seen
    ({"exclusive": None, "allowed": True, "foreign": [{"gpu": 7, "uuid": "GPU-7", "pid": 1, "name": "x", "used_bytes": 1, "seen": "start"}]},
     {("imagesmith_verify_gpu_sharing_allowed", ()): 1.0,
      ("imagesmith_verify_foreign_processes", (("gpu", "7"), ("UUID", "GPU-7"))): 1.0}),
    # the NVML sampler did not run (no UUIDs from it): the UUID the sharing block names is used
    ({"exclusive": False, "allowed": False, "foreign": [{"gpu": 0, "uuid": "GPU-0", "pid": 1, "name": None, "used_bytes": None, "seen": "end"}]},
     {("imagesmith_verify_gpu_exclusive", ()): 0.0, ("imagesmith_verify_gpu_sharing_allowed", ()): 0.0,
      ("imagesmith_verify_foreign_processes", (("gpu", "0"), ("UUID", "GPU-0"))): 1.0,
      ("imagesmith_verify_foreign_processes", (("gpu", "1"), ("UUID", ""))): 0.0}),
    (None, {}),
])
def test_sharing(sharing: Any, expected: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> None:
    doc = raw("verify-gpu.json")
    if sharing is not None:
        doc["sharing"] = sharing
    if sharing and sharing["foreign"] and sharing["foreign"][0]["gpu"] == 0:
        del doc["nvml"]
    got = {(name, tuple((k, v) for k, v in sorted(labels, key=lambda kv: ("gpu", "UUID").index(kv[0]) if kv[0] in ("gpu", "UUID") else 9)
                        if k in ("gpu", "UUID"))): value
           for (name, labels), value in samples(doc).items()
           if name.startswith(("imagesmith_verify_gpu_exclusive", "imagesmith_verify_gpu_sharing", "imagesmith_verify_foreign"))}
    assert got == expected


def test_a_subset_of_gpus_is_labelled_with_the_hosts_index_and_each_cards_uuid() -> None:
    """--gpus 2,3: the payload's GPUs 0 and 1 are the host's 2 and 3; a join on UUID with the DCGM exporter lands right."""
    doc = raw("verify-gpu.json")
    doc["environment"]["gpus"] = [dict(g, uuid=f"GPU-card{2 + g['index']}", host_index=2 + g["index"]) for g in doc["environment"]["gpus"]]
    doc["nvml"]["gpus"] = [dict(g, index=2 + g["index"], uuid=f"GPU-card{2 + g['index']}") for g in doc["nvml"]["gpus"]]
    got = samples(doc)
    assert got[key("imagesmith_verify_gpu_throughput_flops_per_second", **gpu_labels("3", "GPU-card3"), check="gemm.bf16")] == 779.5e12
    assert not [k for k in got if dict(k[1]).get("gpu") in ("0", "1")]  # no series under the payload's own numbering


def test_foreign_processes_carry_the_dcgm_labels() -> None:
    doc = raw("verify-gpu.json") | {"sharing": SHARING}
    assert samples(doc)[key("imagesmith_verify_foreign_processes", **gpu_labels("1", "GPU-1"))] == 2.0


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return edit


@pytest.mark.parametrize(("edit", "message"), [
    (_set("checks/4/id", "x" * 129),
     "r.json: checks[4].id: 129 characters, more than a label value may have (128); is this the report imagesmith verify wrote?"),
    (_set("checks/4/id", "gemm.\ud800"), "r.json: checks[4].id: not valid Unicode text; is this the report imagesmith verify wrote?"),
    (_set("environment/torch", "2" * 200),
     "r.json: environment.torch: 200 characters, more than a label value may have (128); is this the report imagesmith verify wrote?"),
    (_set("checks/4/value", float("inf")), "r.json: checks[4].value: expected a finite number, got inf; is this the report imagesmith verify wrote?"),
    (_set("checks/4/value", [1]), "r.json: checks[4].value: expected a finite number, got [1]; is this the report imagesmith verify wrote?"),
    (_set("checks/4/data/per_gpu_tflops", {"zero": 1.0}),
     "r.json: checks[4].data.per_gpu_tflops key 'zero': expected a GPU index (0 to 1023), got 'zero'; is this the report imagesmith verify wrote?"),
    (_set("checks/4/data/per_gpu_tflops", {str(i): 1.0 for i in range(65)}),
     "r.json: checks[4].data.per_gpu_tflops: expected an object of at most 64 GPU index: figure pairs; is this the report imagesmith verify wrote?"),
    (_set("nvml/gpus/0/index", -1), "r.json: nvml.gpus[0].index: expected a GPU index (0 to 1023), got -1; is this the report imagesmith verify wrote?"),
    (_set("environment/gpus", [{"index": i, "name": "NVIDIA H200"} for i in range(65)]),
     "r.json: environment.gpus: 65 GPUs, more than 64 on one host: refusing the cardinality; is this the report imagesmith verify wrote?"),
    (_set("started_at", "yesterday"), "r.json: started_at: 'yesterday' is not an ISO 8601 time; is this the report imagesmith verify wrote?"),
    (_set("sharing", ["exclusive"]), "r.json: report.sharing: expected an object, got a list; is this the report imagesmith verify wrote?"),
    (_set("sharing", {"exclusive": "no"}), "r.json: report.sharing.exclusive: expected true, false or null, got 'no'; is this the report imagesmith verify wrote?"),
    (_set("sharing", {"exclusive": True, "allowed": 1}), "r.json: report.sharing.allowed: expected true or false, got 1; is this the report imagesmith verify wrote?"),
    (_set("sharing", {"exclusive": False, "allowed": False, "foreign": {"gpu": 0}}),
     "r.json: report.sharing.foreign: expected a list, got an object; is this the report imagesmith verify wrote?"),
    (_set("sharing", {"exclusive": False, "allowed": False, "foreign": [{"gpu": 0, "uuid": "GPU-0", "pid": 1, "name": None, "used_bytes": None, "seen": "both"}] * 4097}),
     "r.json: sharing.foreign: expected a list of at most 4096 processes; is this the report imagesmith verify wrote?"),
    (_set("sharing", {"exclusive": False, "allowed": False, "foreign": [{"gpu": True, "uuid": "GPU-0"}]}),
     "r.json: report.sharing.foreign[0].gpu: expected a whole number or null, got bool; is this the report imagesmith verify wrote?"),
    (_set("sharing", {"exclusive": False, "allowed": False, "foreign": ["GPU-0"]}),
     "r.json: report.sharing.foreign[0]: expected an object, got text; is this the report imagesmith verify wrote?"),
    (_set("sharing", {"exclusive": False, "allowed": False, "foreign": [{"gpu": 0, "uuid": "G" * 300, "pid": 1, "name": None, "used_bytes": None, "seen": "both"}]}),
     "r.json: sharing.foreign[0].uuid: 300 characters, more than a label value may have (128); is this the report imagesmith verify wrote?"),
    (_set("image/labels/io.imagesmith.target", "t" * 129),
     "r.json: image (target): 129 characters, more than a label value may have (128); is this the report imagesmith verify wrote?"),
])
def test_untrusted_values_are_refused_with_where_and_why(edit: Callable[[dict[str, Any]], None], message: str) -> None:
    doc = copy.deepcopy(raw("verify-gpu.json"))
    edit(doc)
    with pytest.raises(UserError) as exc:
        samples(doc)
    assert str(exc.value) == message


FIGURE = "r.json: the figure {}; nothing was exported: is this the report imagesmith verify wrote?"


@pytest.mark.parametrize(("edit", "message"), [
    # finite in the report, +Inf in base units: never exported (it would fire ImagesmithGpuMemoryLeak on a passing report)
    (_set("checks/7/value", 1e304), FIGURE.format("leak_slope_bytes_per_step{check='leak.cuda'} = inf is not a finite number")),
    (_set("checks/4/value", 1e300), FIGURE.format("throughput_flops_per_second{check='gemm.bf16'} = inf is not a finite number")),
    (_set("checks/4/data/per_gpu_tflops", {"0": 1e300}),
     FIGURE.format("gpu_throughput_flops_per_second{check='gemm.bf16', gpu='0', UUID='GPU-0', modelName='NVIDIA H200'} = inf is not a finite number")),
    (_set("checks/4/duration_s", -3.0), FIGURE.format("check_duration_seconds{check='gemm.bf16'} = -3.0 is negative, which this "
                                                      "figure cannot be")),
    (_set("duration_s", -1.0), FIGURE.format("duration_seconds{} = -1.0 is negative, which this figure cannot be")),
    (_set("checks/4/value", -771.2), FIGURE.format("throughput_flops_per_second{check='gemm.bf16'} = -771200000000000.0 is "
                                                   "negative, which this figure cannot be")),
    (_set("checks/5/percent_of_baseline", -5.0), FIGURE.format("baseline_ratio{check='gemm.fp16'} = -0.05 is negative, which this "
                                                               "figure cannot be")),
])
def test_a_figure_that_is_not_finite_or_is_negative_is_never_exported(edit: Callable[[dict[str, Any]], None], message: str) -> None:
    doc = copy.deepcopy(raw("verify-gpu.json"))
    edit(doc)
    with pytest.raises(UserError) as exc:
        samples(doc)
    assert str(exc.value) == message


def test_a_leak_slope_may_be_negative() -> None:
    doc = copy.deepcopy(raw("verify-gpu.json"))
    _set("checks/7/value", -0.5)(doc)
    assert samples(doc)[key("imagesmith_verify_leak_slope_bytes_per_step", **BASE, check="leak.cuda")] == -0.5 * 2**20


def test_two_local_runs_on_one_host_never_export_the_same_series(tmp_path: Path) -> None:
    from imagesmith.pipeline.verify import local_series

    doc = copy.deepcopy(raw("verify-gpu.json"))
    doc["image"] = None  # verify --local: no image, no digest
    run = parse(doc, "r.json")
    files = [tmp_path / "textfile" / "torch29.prom", tmp_path / "textfile" / "torch210.prom"]
    for path in files:
        metrics.export_run(run, path, None, "gpu1", local=local_series(path, "/opt/venv/bin/python"))
    series = [{line.split(" ")[0] for line in path.read_text().splitlines() if not line.startswith("#")} for path in files]
    assert series[0] and not series[0] & series[1]
    assert 'digest="local:torch29.prom"' in files[0].read_text() and 'digest="local:torch210.prom"' in files[1].read_text()
    assert local_series(None, "/opt/venv/bin/python") == "local:/opt/venv/bin/python"


def test_too_many_checks_are_refused() -> None:
    doc = raw("verify-gpu.json")
    doc["checks"] = [{"id": f"c{i}", "status": "pass"} for i in range(MAX_CHECKS + 1)]
    with pytest.raises(UserError, match=r"^r\.json: checks: 513 checks, more than 512: refusing the cardinality; "):
        samples(doc)


def test_too_many_series_from_one_report_are_refused() -> None:
    """Within every other bound (500 checks, 64 GPUs), one report may still not make 500 x 69 series."""
    doc = raw("verify-gpu.json")
    doc["checks"] = [{"id": f"c{i}", "status": "pass", "data": {"per_gpu_tflops": {str(g): 1.0 for g in range(64)}}} for i in range(500)]
    with pytest.raises(UserError) as exc:
        samples(doc)
    assert str(exc.value) == "r.json: more than 10000 metric series from one report: refusing the cardinality"


def test_many_reports_make_one_registry() -> None:
    run = parse(raw("h200x2-standard.json"), "r.json")
    assert run.targets[0].verify is not None
    out = VerifyMetrics()
    for i in range(40):  # 40 x 349 series: more than one report may make, fine from 40
        out.add(run.targets[0].verify, Subject("h", f"sha256:{i}"), "r.json")
    text = metrics.exposition(out.registry)
    assert sum(len(f.samples) for f in text_string_to_metric_families(text)) == 40 * 349  # 349 series a report (51 checks x 5 outcomes among them)


@pytest.mark.parametrize(("image", "digest"), [
    ({"ref": "r@sha256:" + "cd" * 32, "digest": "sha256:" + "cd" * 32, "id": DIGEST, "digests": []}, "sha256:" + "cd" * 32),
    ({"ref": "r:tag", "id": DIGEST, "digests": ["harbor.example.com/ml/x@sha256:" + "ef" * 32]}, "sha256:" + "ef" * 32),
    ({"ref": "r:tag", "id": DIGEST, "digests": []}, DIGEST),
    (None, ""),
])
def test_image_digest_prefers_the_registry_digest(image: Any, digest: str) -> None:
    doc = raw("verify-gpu.json") | {"image": image}
    verify = parse(doc, "r.json").targets[0].verify
    assert verify is not None and image_digest(verify) == digest


@pytest.mark.parametrize(("path", "message"), [
    ("m.txt", "--metrics m.txt: the file name must end in .prom (node_exporter's textfile collector reads only *.prom files); "
              "e.g. --metrics /var/lib/node_exporter/textfile/imagesmith.prom"),
    ("m.prom.tmp", "--metrics m.prom.tmp: the file name must end in .prom (node_exporter's textfile collector reads only *.prom files); "
                   "e.g. --metrics /var/lib/node_exporter/textfile/imagesmith.prom"),
])
def test_textfile_names_end_in_prom(path: str, message: str) -> None:
    with pytest.raises(UserError) as exc:
        metrics.check_textfile(Path(path))
    assert str(exc.value) == message


@pytest.mark.parametrize("url", ["pushgateway:9091", "ftp://pg:9091", "http://", "http://pg:9091/?x=1", "http://pg:9091/#a"])
def test_gateway_urls_are_http(url: str) -> None:
    with pytest.raises(UserError) as exc:
        metrics.check_gateway(url)
    assert str(exc.value) == f"--pushgateway {url!r}: give the Pushgateway's base URL, e.g. http://pushgateway.example.com:9091"


def test_textfile_is_written_whole_with_a_readable_mode(tmp_path: Path) -> None:
    run = parse(raw("verify-gpu.json"), "r.json")
    path = tmp_path / "textfile" / "imagesmith.prom"
    metrics.export_run(run, path, None, "gpu1")
    assert path.read_text() == metrics.exposition(metrics.run_metrics(run, "gpu1").registry)
    assert oct(path.stat().st_mode & 0o777) == "0o644" and [p.name for p in path.parent.iterdir()] == ["imagesmith.prom"]


@pytest.mark.parametrize("where, message", [
    ("file/m.prom", "--metrics {tmp}/file/m.prom: {tmp}/file is a file, not a folder; give a file in node_exporter's textfile folder"),
    ("file/deeper/m.prom", "--metrics {tmp}/file/deeper/m.prom: {tmp}/file is a file, not a folder; give a file in "
                           "node_exporter's textfile folder"),
    ("/proc/x.prom", "--metrics /proc/x.prom: /proc is a kernel file system, not a folder node_exporter reads; give a file in its "
                     "--collector.textfile.directory"),
    ("/sys/x.prom", "--metrics /sys/x.prom: /sys is a kernel file system, not a folder node_exporter reads; give a file in its "
                    "--collector.textfile.directory"),
    ("/proc/self/x.prom", "--metrics /proc/self/x.prom: /proc/{pid} is a kernel file system, not a folder node_exporter reads; "
                          "give a file in its --collector.textfile.directory"),
    ("folder.prom", "--metrics {tmp}/folder.prom: is a folder; give a file name ending in .prom"),
    ("read-only/m.prom", "--metrics {tmp}/read-only/m.prom: cannot write in {tmp}/read-only (Permission denied); is the folder "
                         "writable?"),
])
def test_an_unwritable_textfile_is_refused_before_anything_runs(tmp_path: Path, where: str, message: str) -> None:
    import os

    (tmp_path / "file").write_text("")
    (tmp_path / "folder.prom").mkdir()
    (tmp_path / "read-only").mkdir(mode=0o555)
    if where.startswith("read-only") and os.access(tmp_path / "read-only", os.W_OK):
        pytest.skip("root writes in a 0555 folder")
    path = tmp_path / where if not where.startswith("/") else Path(where)
    with pytest.raises(UserError) as err:
        metrics.check_textfile(path)
    assert str(err.value) == message.format(tmp=tmp_path, pid=os.getpid())
    with pytest.raises(UserError):  # and the export checks again
        metrics.export_run(parse(raw("verify-gpu.json"), "r.json"), path, None, "gpu1")


def test_fleet_cells_carry_class_and_node(tmp_path: Path) -> None:
    cell_dir = tmp_path / "cells" / "h200"
    cell_dir.mkdir(parents=True)
    (cell_dir / "verify.json").write_text((REPORTS / "verify-gpu.json").read_text())
    ref = "harbor.example.com/ml/x@sha256:" + "cd" * 32
    cells = (CellResult(ref, "h200", "slurm", "fail", "gemm.fp32", node="gpu-node-7", queued_s=3.0, ran_s=40.5,
                        report="cells/h200/verify.json"),
             CellResult(ref, "a100", "kubernetes", "cancelled", "interrupted"))
    fleet = FleetReport("fleet.yaml", "run1", "standard", "2026-12-01T00:00:00+00:00", ("h200",), cells)
    metrics.export_fleet(fleet, tmp_path, tmp_path / "fleet.prom", None)
    got = {(s.name, frozenset(s.labels.items())): s.value
           for f in text_string_to_metric_families((tmp_path / "fleet.prom").read_text()) for s in f.samples}
    cell = {"Hostname": "gpu-node-7", "digest": "sha256:" + "cd" * 32, "class": "h200"}
    assert got[key("imagesmith_fleet_cell_status", **cell, outcome="fail")] == 1.0
    assert got[key("imagesmith_fleet_cell_status", Hostname="", digest="sha256:" + "cd" * 32, **{"class": "a100"}, outcome="cancelled")] == 1.0
    assert got[key("imagesmith_fleet_cell_queued_seconds", **cell)] == 3.0
    assert got[key("imagesmith_fleet_cell_run_seconds", **cell)] == 40.5
    assert got[key("imagesmith_verify_gpu_throughput_flops_per_second", **cell, gpu="0", UUID="GPU-0", modelName="NVIDIA H200",
                   check="gemm.bf16")] == 771.2e12
    assert sum(name == "imagesmith_verify_ok" for name, _ in got) == 1  # the cancelled cell wrote no report


def test_a_fleet_cell_report_outside_the_folder_is_refused(tmp_path: Path) -> None:
    ref = "harbor.example.com/ml/x@sha256:" + "cd" * 32
    fleet = FleetReport("fleet.yaml", "run1", "standard", "", (), (CellResult(ref, "h200", "slurm", "pass", "", report="../../etc/passwd"),))
    with pytest.raises(UserError) as exc:
        metrics.export_fleet(fleet, tmp_path, tmp_path / "fleet.prom", None)
    assert str(exc.value) == (f"{tmp_path}/fleet-report.json: cell h200 sha256:{'cd' * 32}: report '../../etc/passwd' is outside "
                              f"{tmp_path}; give the fleet report fleet verify wrote")


def test_report_format_prom_prints_the_exposition(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["report", str(REPORTS / "verify-gpu.json"), "--format", "prom", "--hostname", "gpu1"])
    assert result.exit_code == 0, result.output
    assert result.output == metrics.exposition(metrics.run_metrics(parse(raw("verify-gpu.json"), str(REPORTS / "verify-gpu.json")),
                                                                   "gpu1").registry)


def test_report_format_prom_of_a_build_report_has_no_series() -> None:
    result = CliRunner().invoke(cli, ["report", str(REPORTS / "build-failed.json"), "--format", "prom"])
    assert result.exit_code == 0 and [f.name for f in text_string_to_metric_families(result.output) if f.samples] == []


def test_hostname_is_node_name_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-node-3")
    assert metrics.hostname() == "gpu-node-3"
    monkeypatch.delenv("NODE_NAME")
    assert metrics.hostname() == socket.gethostname()


def test_a_run_report_names_each_target_in_its_info() -> None:
    got = samples(raw("run-report.json"), "h")
    info = [dict(labels) for name, labels in got if name == "imagesmith_verify_info"]
    assert [(i["target"], i["digest"]) for i in info] == [("2.14.1-cu130-py3.11-debian12-base", "sha256:" + "2b" * 32)]


@pytest.mark.parametrize(("args", "message"), [
    (["verify", "img:1", "--metrics", "m.txt"],
     "error: --metrics m.txt: the file name must end in .prom (node_exporter's textfile collector reads only *.prom files); "
     "e.g. --metrics /var/lib/node_exporter/textfile/imagesmith.prom\n"),
    (["verify", "--local", "--pushgateway", "pushgateway:9091"],
     "error: --pushgateway 'pushgateway:9091': give the Pushgateway's base URL, e.g. http://pushgateway.example.com:9091\n"),
    (["fleet", "verify", "--fleet", "examples/fleet-local.yaml", "harbor.example.com/ml/x@sha256:" + "ab" * 32, "--metrics", "m"],
     "error: --metrics m: the file name must end in .prom (node_exporter's textfile collector reads only *.prom files); "
     "e.g. --metrics /var/lib/node_exporter/textfile/imagesmith.prom\n"),
    (["fleet", "verify", "--fleet", "examples/fleet-local.yaml", "harbor.example.com/ml/x@sha256:" + "ab" * 32, "--pushgateway", "ftp://x"],
     "error: --pushgateway 'ftp://x': give the Pushgateway's base URL, e.g. http://pushgateway.example.com:9091\n"),
    (["report", str(REPORTS / "verify-gpu.json"), "--format", "prom", "--hostname", "h" * 129],
     f"error: {REPORTS / 'verify-gpu.json'}: the Hostname label {'h' * 40!r}: more than 128 characters or not printable text\n"),
    (["verify", "--local", "--metrics", "/proc/x.prom"],
     "error: --metrics /proc/x.prom: /proc is a kernel file system, not a folder node_exporter reads; give a file in its "
     "--collector.textfile.directory\n"),
    (["verify", "--local", "--metrics", "/etc/passwd/x.prom"],
     "error: --metrics /etc/passwd/x.prom: /etc/passwd is a file, not a folder; give a file in node_exporter's textfile folder\n"),
    (["fleet", "verify", "--fleet", "examples/fleet-local.yaml", "harbor.example.com/ml/x@sha256:" + "ab" * 32, "--metrics", "/sys/x.prom"],
     "error: --metrics /sys/x.prom: /sys is a kernel file system, not a folder node_exporter reads; give a file in its "
     "--collector.textfile.directory\n"),
    (["verify", "--local", "--python", "/nonexistent/python"],
     "error: --python '/nonexistent/python': no such file; give the Python to verify, e.g. --python /opt/venv/bin/python\n"),
    (["verify", "--local", "--python", "/etc/passwd"],
     "error: --python '/etc/passwd': not an executable file; give the Python to verify, e.g. --python /opt/venv/bin/python\n"),
    (["verify", "--local", "--python", "no-such-python3.99"],
     "error: --python 'no-such-python3.99': not found on PATH; give the Python to verify, e.g. --python /opt/venv/bin/python\n"),
    (["report", str(REPORTS / "verify-gpu.json"), "--format", "prom", "--hostname", "gpu\n1"],
     f"error: {REPORTS / 'verify-gpu.json'}: the Hostname label 'gpu\\n1': more than 128 characters or not printable text\n"),
])
def test_bad_metrics_options_exit_1_before_anything_runs(args: list[str], message: str) -> None:
    """Nothing runs: no container, no payload, no job submitted (the fleet file names Slurm, absent here)."""
    done = subprocess.run([sys.executable, "-m", "imagesmith.cli", *args], capture_output=True, text=True, cwd=REPORTS.parents[2])
    assert (done.returncode, done.stdout, done.stderr) == (1, "", message)


def test_the_typed_report_exports_what_its_file_does(tmp_path: Path) -> None:
    """verify --metrics hands the export the report it holds (no JSON written and read back): the same series as
    the report's file gives, named by the --json file."""
    from imagesmith.model import verifyreport
    from imagesmith.pipeline.verify import metrics_export

    typed, by_file = tmp_path / "typed" / "m.prom", tmp_path / "file" / "m.prom"
    typed.parent.mkdir()
    by_file.parent.mkdir()
    said: list[str] = []
    metrics_export(typed, None, said.append)(verifyreport.parse(raw("verify-gpu.json")), "out/verify.json")
    metrics.export_run(parse(raw("verify-gpu.json"), "out/verify.json"), by_file, None)
    assert typed.read_text() == by_file.read_text() and "imagesmith_verify_checks" in typed.read_text()
    assert said == [f"metrics: {typed}"]
