"""Verification metrics against Prometheus's own tools (Debian's prometheus-node-exporter,
prometheus-pushgateway and promtool): what imagesmith writes and pushes is scraped over HTTP
and parsed with prometheus_client's parser; the example rules pass promtool.

node_exporter runs with only its textfile collector, the Pushgateway with a persistence file in
tmp, both on a free loopback port; the fixtures always stop them. A run takes seconds."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.parser import text_string_to_metric_families

from imagesmith.errors import UserError
from imagesmith.report import parse
from imagesmith.report.model import Run
from imagesmith.stages import metrics
from tests.loopback import unused_port

pytestmark = [pytest.mark.integration, pytest.mark.prometheus]

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "tests" / "fixtures" / "reports"
RULES = ROOT / "examples" / "prometheus" / "imagesmith-rules.yml"
IMAGESMITH = Path(sys.executable).parent / "imagesmith"
DIGEST = "sha256:" + "ab" * 32
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _free_port() -> int:
    return unused_port()


@dataclass(frozen=True)
class Server:
    url: str
    folder: Path  # node_exporter: the textfile directory; pushgateway: its persistence folder

    def scrape(self) -> Samples:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as response:
            text = response.read().decode()
        return {(s.name, frozenset(s.labels.items())): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}


def _serve(argv: list[str], port: int, folder: Path) -> Iterator[Server]:
    """Start a Prometheus daemon on 127.0.0.1:port, wait until /metrics answers, always stop it."""
    log = folder / "daemon.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120  # a hang guard: a loaded host starts a daemon slowly
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"{argv[0]} exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{url}/metrics", timeout=2).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail(f"{argv[0]} did not answer on {url} in 120 s: {log.read_text()[-2000:]}")
        yield Server(url, folder)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _need(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        pytest.skip(f"{tool} is not installed (make host installs Debian's prometheus, prometheus-node-exporter, prometheus-pushgateway)")
    return found


@pytest.fixture()
def node_exporter(tmp_path: Path) -> Iterator[Server]:
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    port = _free_port()
    yield from _serve([_need("prometheus-node-exporter"), f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                       "--collector.textfile", f"--collector.textfile.directory={textfiles}"], port, textfiles)


@pytest.fixture()
def pushgateway(tmp_path: Path) -> Iterator[Server]:
    folder = tmp_path / "pushgateway"
    folder.mkdir()
    port = _free_port()
    yield from _serve([_need("prometheus-pushgateway"), f"--web.listen-address=127.0.0.1:{port}",
                       f"--persistence.file={folder / 'metrics.db'}"], port, folder)


def key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


def imagesmith_series(scraped: Samples) -> Samples:
    return {k: v for k, v in scraped.items() if k[0].startswith("imagesmith_")}


def report(name: str) -> Run:
    return parse(json.loads((REPORTS / name).read_text()), str(REPORTS / name))


def test_node_exporter_serves_the_textfile_of_two_reports(node_exporter: Server) -> None:
    metrics.export_run(report("verify-gpu.json"), node_exporter.folder / "gpu.prom", None, "gpu1")
    metrics.export_run(report("h200x2-standard.json"), node_exporter.folder / "local.prom", None, "gpu1")
    got = node_exporter.scrape()
    assert got[key("node_textfile_scrape_error")] == 0.0
    gpu = {"Hostname": "gpu1", "digest": DIGEST}
    local = {"Hostname": "gpu1", "digest": ""}
    assert got[key("imagesmith_verify_ok", **gpu)] == 0.0 and got[key("imagesmith_verify_ok", **local)] == 1.0
    assert got[key("imagesmith_verify_check_status", **gpu, check="gemm.fp32", outcome="fail")] == 1.0
    assert got[key("imagesmith_verify_baseline_ratio", **gpu, check="gemm.fp16")] == 0.862
    assert got[key("imagesmith_verify_gpu_throughput_flops_per_second", **gpu, check="gemm.bf16", gpu="1", UUID="GPU-1",
                   modelName="NVIDIA H200")] == 779.5e12
    assert got[key("imagesmith_verify_leak_slope_bytes_per_step", **gpu, check="leak.cuda")] == 1048576.0
    assert got[key("imagesmith_verify_bandwidth_bytes_per_second", **local, check="nccl.allreduce")] == 330.27e9
    assert got[key("imagesmith_verify_last_run_timestamp_seconds", **gpu)] == 1796004000.0 + 31.7
    # exactly what the files hold, series for series (node_exporter adds only its own node_* families)
    written = {}
    for name in ("gpu.prom", "local.prom"):
        written.update({(s.name, frozenset(s.labels.items())): s.value
                        for f in text_string_to_metric_families((node_exporter.folder / name).read_text()) for s in f.samples})
    # verify-gpu.json: 4 per run + 4 counts + 11 checks x (4 outcomes + duration) + 3 ratios + 3 + 6 throughputs + 1 leak = 76;
    # h200x2-standard.json: 4 + 4 + 51 x 5 + 7 ratios + 6 + 8 throughputs + 4 + 6 bandwidths + 2 leaks + 1 solo ratio = 297
    assert imagesmith_series(got) == written and len(written) == 88 + 349  # every check has one series per outcome, inconclusive included


def test_verify_local_writes_the_textfile_and_pushes(node_exporter: Server, pushgateway: Server, tmp_path: Path) -> None:
    """The command itself: a quick CPU-mode run of the payload on this host that fails (versions.torch: torch
    1.13.1 expected, which no host here has, with or without the lock's CPU torch) still exports what it measured."""
    textfile = node_exporter.folder / "imagesmith.prom"
    run = subprocess.run([str(IMAGESMITH), "verify", "--local", "--gpus", "none", "--allow-cpu-verification", "--only", "versions",
                          "--expect", "torch=1.13.1",
                          "--json", str(tmp_path / "r.json"), "--metrics", str(textfile), "--pushgateway", pushgateway.url],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and run.stderr.splitlines()[-1] == "error: verification failed: versions.torch", run.stderr
    host = metrics.hostname()
    assert f"metrics: {textfile}" in run.stderr
    assert f"metrics pushed to {pushgateway.url}: job=imagesmith instance={host} digest=local:imagesmith.prom" in run.stderr
    scraped, pushed = imagesmith_series(node_exporter.scrape()), imagesmith_series(pushgateway.scrape())
    mine = {"Hostname": host, "digest": "local:imagesmith.prom"}
    assert scraped[key("imagesmith_verify_check_status", **mine, check="versions.torch", outcome="fail")] == 1.0
    assert scraped[key("imagesmith_verify_checks", **mine, outcome="fail")] == 1.0
    assert scraped[key("imagesmith_verify_ok", **mine)] == 0.0
    # the Pushgateway adds the grouping key (job, instance) to every series, and push_time_seconds
    group = {"job": "imagesmith", "instance": host}
    assert {(n, labels - frozenset(group.items())): v for (n, labels), v in pushed.items() if n.startswith("imagesmith_verify")} == scraped


def test_two_local_jobs_on_one_host_never_collide_in_the_textfile_folder(node_exporter: Server, tmp_path: Path) -> None:
    """Two verify --local runs (two CI jobs of one GPU host), each with its own file in the collector's folder: node_exporter
    serves both, with no scrape error (two files exporting one series would be dropped by it)."""
    for name in ("job-a.prom", "job-b.prom"):
        run = subprocess.run([str(IMAGESMITH), "verify", "--local", "--gpus", "none", "--allow-cpu-verification", "--only",
                              "versions", "--metrics", str(node_exporter.folder / name)], capture_output=True, text=True, timeout=120)
        assert run.returncode in (0, 1) and "Traceback" not in run.stderr, run.stderr
    got = node_exporter.scrape()
    assert got[key("node_textfile_scrape_error")] == 0.0
    host = metrics.hostname()
    assert {k[1] for k in got if k[0] == "imagesmith_verify_ok"} == {
        frozenset({"Hostname": host, "digest": f"local:{name}"}.items()) for name in ("job-a.prom", "job-b.prom")}


def test_pushgateway_keeps_one_group_per_image_and_host(pushgateway: Server) -> None:
    metrics.export_run(report("verify-gpu.json"), None, pushgateway.url, "gpu1")
    metrics.export_run(report("verify-gpu.json"), None, pushgateway.url, "gpu2")
    again = json.loads((REPORTS / "verify-gpu.json").read_text())
    again["checks"][6]["status"] = "pass"  # gemm.fp32 passes on the second run on gpu1: the group is replaced
    metrics.export_run(parse(again, "again.json"), None, pushgateway.url, "gpu1")
    got = pushgateway.scrape()

    def status(host: str, outcome: str) -> float:
        return got[key("imagesmith_verify_check_status", job="imagesmith", instance=host, Hostname=host, digest=DIGEST,
                       check="gemm.fp32", outcome=outcome)]

    assert (status("gpu1", "pass"), status("gpu1", "fail"), status("gpu2", "fail")) == (1.0, 0.0, 1.0)
    groups = {dict(labels)["instance"] for (name, labels) in got if name == "push_time_seconds"}
    assert groups == {"gpu1", "gpu2"}


def test_pushgateway_errors_are_user_errors(pushgateway: Server) -> None:
    """A push the gateway rejects (a family it holds as a gauge, pushed as a histogram) and a gateway that is not there."""
    clash = CollectorRegistry()
    Histogram("imagesmith_verify_ok", "another meaning", registry=clash).observe(1)
    metrics.export_run(report("verify-gpu.json"), None, pushgateway.url, "gpu1")
    with pytest.raises(UserError, match=r"^--pushgateway http://127\.0\.0\.1:\d+: HTTP 400 \(pushed metrics are invalid or "
                                        r"inconsistent with existing metrics: collected metric \"imagesmith_verify_ok\" .*\); "
                                        r"the metrics were not pushed$"):
        metrics.push(clash, pushgateway.url, {"instance": "other"})
    nobody = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(UserError) as exc:
        metrics.push(clash, nobody, {"instance": "other"})
    assert str(exc.value) == f"--pushgateway {nobody}: cannot reach it ([Errno 111] Connection refused); is the Pushgateway running there?"


def test_fleet_metrics_push_per_class(pushgateway: Server, tmp_path: Path) -> None:
    from imagesmith.model.fleetreport import CellResult, FleetReport

    (tmp_path / "h200").mkdir()
    shutil.copy(REPORTS / "verify-gpu.json", tmp_path / "h200" / "verify.json")
    ref = "harbor.example.com/ml/x@" + DIGEST
    cells = (CellResult(ref, "h200", "slurm", "fail", "gemm.fp32", node="node-7", report="h200/verify.json"),
             CellResult(ref, "l40s", "kubernetes", "pass", "", node="node-9"))
    metrics.export_fleet(FleetReport("fleet.yaml", "r1", "standard", "", ("h200",), cells), tmp_path, None, pushgateway.url)
    got = pushgateway.scrape()
    # the group is job, class, digest; the Pushgateway adds instance="" to a group without one
    h200 = {"job": "imagesmith", "instance": "", "class": "h200", "digest": DIGEST, "Hostname": "node-7"}
    assert got[key("imagesmith_fleet_cell_status", **h200, outcome="fail")] == 1.0
    assert got[key("imagesmith_fleet_cell_status", job="imagesmith", instance="", digest=DIGEST, Hostname="node-9", outcome="pass",
                   **{"class": "l40s"})] == 1.0
    assert {dict(labels)["class"] for (name, labels) in got if name == "push_time_seconds"} == {"h200", "l40s"}
    assert got[key("imagesmith_verify_throughput_flops_per_second", **h200, check="gemm.bf16")] == 771.2e12


def test_promtool_accepts_the_example_rules_and_their_unit_tests() -> None:
    promtool = _need("promtool")
    check = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and "SUCCESS: 5 rules found" in check.stdout, check.stdout + check.stderr
    test = subprocess.run([promtool, "test", "rules", str(RULES.with_name("imagesmith-rules.test.yml"))],
                          capture_output=True, text=True, timeout=60)
    assert test.returncode == 0 and "SUCCESS" in test.stdout, test.stdout + test.stderr


def test_promtool_lints_only_the_dcgm_label_name() -> None:
    """promtool check metrics (Prometheus's naming lint) finds nothing but modelName, which is
    camelCase on purpose: it is the DCGM exporter's label, kept for joins."""
    text = metrics.exposition(metrics.run_metrics(report("h200x2-standard.json"), "gpu1").registry)
    lint = subprocess.run([_need("promtool"), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    problems = set(lint.stderr.splitlines())
    assert problems == {f"imagesmith_verify_gpu_{m} label names should be written in 'snake_case' not 'camelCase'"
                        for m in ("bandwidth_bytes_per_second", "throughput_flops_per_second")}, lint.stderr
