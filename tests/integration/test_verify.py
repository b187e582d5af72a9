"""imagesmith verify against real images in CPU mode, with planted faults.

Each fault is a small image made FROM a torch 2.13.0+cpu base that imagesmith
built; the verdict and the message must name the fault.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from imagesmith.edges.engine import Engine, RunSpec
from imagesmith.stages.verify import incontainer, judge, payload, verify
from tests.integration.engine_fixtures import BuiltImages, docker_build, left_containers

pytestmark = pytest.mark.integration
OPTIONS = verify.VerifyOptions(tier="quick", gpus="all", timeout_s=300)
CPU_MODE = verify.VerifyOptions(tier="quick", gpus="none", timeout_s=300)


@pytest.fixture()
def planted(engine: Engine, tmp_path: Path) -> Iterator[Callable[[str], str]]:
    made: list[str] = []

    def make(dockerfile: str) -> str:
        tag = docker_build(engine, dockerfile, f"imagesmith-test/fault:{uuid.uuid4().hex[:8]}", tmp_path)
        made.append(tag)
        return tag

    yield make
    for tag in made:
        engine.remove_image(tag)


def checks(outcome: verify.VerifyOutcome) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in outcome.report.to_json()["checks"]}


def test_a_good_image_passes_in_cpu_mode(engine: Engine, built_images: BuiltImages) -> None:
    outcome = incontainer.verify_image(engine, built_images.cpu_base, OPTIONS)
    by_id = checks(outcome)
    assert outcome.ok, [c for c in by_id.values() if c["status"] == "fail"]
    # numpy is pinned in every base layer (the knowledge base's numpy table): import torch is silent, a pass
    assert by_id["versions.torch"]["status"] == "pass" and "warned" not in by_id["versions.torch"]["detail"], by_id["versions.torch"]
    assert by_id["security.user"]["status"] == "pass" and by_id["security.config"]["status"] == "pass"
    assert by_id["matmul.fp32"]["status"] == "pass" and by_id["gpu.devices"]["status"] == "skip"
    assert outcome.report.to_json()["schema"] == "imagesmith.verify-report/1" and outcome.report.to_json()["image"]["id"] == built_images.cpu_base
    assert outcome.report.to_json()["mode"]["mode"] == "cpu"  # a CPU-only torch: nothing to ask a GPU for
    assert outcome.report.to_json()["mode"]["reason"].startswith("CPU mode: torch 2.13.0+cpu is a CPU-only build")
    assert left_containers(engine) == []  # the container is always removed


def test_labels_declaring_another_torch_fail(engine: Engine, built_images: BuiltImages, planted: Any) -> None:
    image = planted(f"FROM {built_images.cpu_base}\nLABEL io.imagesmith.torch=2.9.1\n")
    by_id = checks(incontainer.verify_image(engine, image, OPTIONS))
    assert by_id["versions.torch"]["status"] == "fail"
    assert "2.9.1" in by_id["versions.torch"]["detail"] and "2.13.0" in by_id["versions.torch"]["detail"]


def test_expect_overrides_the_labels(engine: Engine, built_images: BuiltImages) -> None:
    options = verify.VerifyOptions(tier="quick", gpus="none", expect={"torch": "2.12.0"}, timeout_s=300)
    assert checks(incontainer.verify_image(engine, built_images.cpu_base, options))["versions.torch"]["status"] == "fail"


def test_no_torch_at_all_fails_with_a_clear_message(engine: Engine, built_images: BuiltImages, planted: Any) -> None:
    image = planted(f"FROM {built_images.cpu_base}\nUSER 0\nRUN /opt/venv/bin/pip uninstall -y -q torch\nUSER 1000\n")
    outcome = incontainer.verify_image(engine, image, OPTIONS)
    assert not outcome.ok
    detail = checks(outcome)["versions.torch"]["detail"]
    assert "torch" in detail and ("not installed" in detail or "import" in detail), detail


def test_an_image_without_python_fails_with_a_clear_message(engine: Engine, debian_base: str) -> None:
    outcome = incontainer.verify_image(engine, debian_base, OPTIONS)
    start, check = outcome.report.to_json()["checks"]
    assert (start["id"], start["status"]) == ("entrypoint.start", "skip")  # no ENTRYPOINT: nothing to start
    assert check["status"] == "fail" and "no python3" in check["detail"], check


def test_root_user_is_flagged(engine: Engine, built_images: BuiltImages, planted: Any) -> None:
    image = planted(f"FROM {built_images.cpu_base}\nUSER 0\n")
    by_id = checks(incontainer.verify_image(engine, image, OPTIONS))
    assert by_id["security.user"]["status"] == "fail" and "root" in by_id["security.user"]["detail"]


def test_a_timeout_kills_the_container_and_fails(engine: Engine, built_images: BuiltImages) -> None:
    # a one-minute soak of the leak check certainly outlives a 3 s limit (a single
    # standard-tier leak run can finish inside it on a fast machine)
    options = verify.VerifyOptions(tier="soak", soak_minutes=1, gpus="none", timeout_s=3, only=("leak",))
    outcome = incontainer.verify_image(engine, built_images.cpu_base, options)
    assert [c["id"] for c in outcome.report.to_json()["checks"]] == ["payload.timeout"]
    assert left_containers(engine) == []


def run_payload(engine: Engine, image: str, config: dict[str, Any], only: str = "leak") -> dict[str, Any]:
    """The payload's own entry point in a container (as on a bare host)."""
    from imagesmith.edges.engine import RunSpec

    files = verify.payload_files() | {"config.json": json.dumps(config).encode()}
    spec = RunSpec(image=image, command=["python3", "/opt/imagesmith/verify/run.py", "--config",
                                         "/opt/imagesmith/verify/config.json", "--only", only, "--emit-marker"],
                   files=files, files_dir="/opt/imagesmith/verify", timeout_s=600)
    report = judge.parse_marker(engine.run(spec).stdout)
    assert report is not None
    return {c["id"]: c for c in report["checks"]}


@pytest.fixture()
def busy_cores() -> Iterator[int]:
    """Every core kept busy (2 spinning processes per core) while the test runs: CI hosts are loaded."""
    n = 2 * (os.cpu_count() or 1)
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield n
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def test_the_leak_detector_counts_steps_and_judges_right_with_every_core_busy(engine: Engine, built_images: BuiltImages,
                                                                                busy_cores: int) -> None:
    small = run_payload(engine, built_images.cpu_base, {"tier": "standard", "leak_inject_mib": 0.05})
    assert small["leak.device"]["status"] == "fail", small["leak.device"]["detail"]
    leaky = run_payload(engine, built_images.cpu_base, {"tier": "standard", "leak_inject_mib": 1})
    assert leaky["leak.device"]["status"] == "fail", leaky["leak.device"]["detail"]
    assert leaky["leak.device"]["data"]["caught_after_steps"] <= 200, leaky["leak.device"]["data"]
    clean = run_payload(engine, built_images.cpu_base, {"tier": "standard"})
    for check_id in ("leak.device", "leak.host"):
        assert clean[check_id]["status"] == "pass", clean[check_id]["detail"]
        assert clean[check_id]["data"]["loop_steps"] == 1200  # all of them, however long it took


def test_the_quick_leak_probe_catches_one_mib_per_step(engine: Engine, built_images: BuiltImages) -> None:
    leaky = run_payload(engine, built_images.cpu_base, {"tier": "quick", "leak_inject_mib": 1}, only="leak.probe")
    assert leaky["leak.probe"]["status"] == "fail" and leaky["leak.probe"]["detail"].split(": ", 1)[1].startswith("leak: ")
    clean = run_payload(engine, built_images.cpu_base, {"tier": "quick"}, only="leak.probe")
    assert clean["leak.probe"]["status"] == "pass", clean["leak.probe"]["detail"]


def test_cli_verify_writes_a_report_and_sets_the_exit_code(built_images: BuiltImages, tmp_path: Path) -> None:
    out = tmp_path / "v.json"
    ok = subprocess.run([sys.executable, "-m", "imagesmith.cli", "verify", built_images.cpu_base, "--json", str(out), "-q"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(out.read_text())["summary"]["ok"] is True
    bad = subprocess.run([sys.executable, "-m", "imagesmith.cli", "verify", built_images.cpu_base, "--expect", "torch=1.0", "-q"],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.strip() == "error: verification failed: versions.torch"


def test_a_cuda_image_verified_on_this_gpu_less_engine(engine: Engine, cuda_base: str) -> None:
    """No NVIDIA runtime here: --gpus all is not met (said, not silent); CPU mode only when asked or allowed."""
    good = incontainer.verify_image(engine, cuda_base, CPU_MODE)
    by_id = checks(good)
    assert good.ok, [c for c in by_id.values() if c["status"] == "fail"]
    assert by_id["libs.cudnn"]["status"] == "pass" and by_id["versions.cudnn"]["status"] == "pass"
    assert by_id["libs.integrity"]["status"] == "pass", by_id["libs.integrity"]
    assert by_id["gpu.devices"]["detail"] == "CPU mode, as asked (--gpus none): GPU checks skipped"

    asked = incontainer.verify_image(engine, cuda_base, OPTIONS)
    devices = checks(asked)["gpu.devices"]
    assert not asked.ok and devices["status"] == "fail", devices
    assert devices["detail"].startswith("asked for all GPUs (--gpus all), none visible: the Docker engine has no NVIDIA")
    assert asked.report.to_json()["notes"] and asked.report.to_json()["mode"]["mode"] == "cpu"

    one = checks(incontainer.verify_image(engine, cuda_base, verify.VerifyOptions(gpus="0", timeout_s=300, only=("gpu.devices",))))
    assert one["gpu.devices"]["status"] == "fail" and one["gpu.devices"]["detail"].startswith(
        "asked for 1 GPU (--gpus 0), none visible: the Docker engine has no NVIDIA container runtime")

    allowed = incontainer.verify_image(engine, cuda_base, verify.VerifyOptions(gpus="all", allow_cpu=True, timeout_s=300))
    assert allowed.ok and checks(allowed)["gpu.devices"]["status"] == "skip"
    assert allowed.report.to_json()["mode"]["reason"].endswith("CPU verification allowed (--allow-cpu-verification / "
                                                     "verify.require_gpu: false): not GPU-verified")


def test_part_of_cudnn_removed_fails_in_cpu_mode(engine: Engine, cuda_base: str, planted: Any) -> None:
    """torch still imports and reports cuDNN; the wheel's RECORD says what is gone."""
    image = planted(f"FROM {cuda_base}\nUSER 0\nRUN rm /opt/imagesmith/cuda/nvidia/cudnn/lib/libcudnn_cnn*\n"
                    "USER 1000\n")
    outcome = incontainer.verify_image(engine, image, CPU_MODE)
    by_id = checks(outcome)
    torch = by_id["versions.torch"]  # torch still imports and measures its version (a warn: what `import torch` warned about)
    assert not outcome.ok and torch["status"] in ("pass", "warn") and str(torch["value"]).startswith("2.14.1"), torch
    integrity = by_id["libs.integrity"]
    assert integrity["status"] == "fail" and integrity["value"] == 1, integrity
    assert "nvidia-cudnn-cu13 9.24.0.43: 1 broken (libcudnn_cnn.so.9 missing)" in integrity["detail"]
    assert [c for c, e in by_id.items() if e["status"] == "fail"] == ["libs.integrity"]


def test_cudnn_removed_from_a_cuda_image_fails(engine: Engine, cuda_base: str, planted: Any) -> None:
    image = planted(f"FROM {cuda_base}\nUSER 0\nRUN rm -rf /opt/imagesmith/cuda/nvidia/cudnn\nUSER 1000\n")  # the shared CUDA layer
    outcome = incontainer.verify_image(engine, image, CPU_MODE)
    bad = checks(outcome)
    assert not outcome.ok
    assert bad["libs.cudnn"]["status"] == "fail" and "cuDNN" in bad["libs.cudnn"]["detail"], bad["libs.cudnn"]
    assert bad["versions.torch"]["status"] == "fail", bad["versions.torch"]  # torch links cuDNN: it no longer imports


RANKS = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(t)
os.write(1, f"rank {dist.get_rank()} sum {t.item()} master {os.environ['MASTER_ADDR']}\\n".encode())  # one write: whole lines
dist.destroy_process_group()
"""
TORCHRUN = f"""
import subprocess, sys
sys.path.insert(0, "{payload.IN_CONTAINER}")
from imagesmith_payload.procs import torchrun_argv
done = subprocess.run(torchrun_argv("{payload.IN_CONTAINER}/ranks.py", 2, []), capture_output=True, text=True, timeout=90)
print(done.stdout + done.stderr[-2000:], "exit", done.returncode)
"""


def test_torchrun_meets_on_loopback_in_the_container_verify_makes(engine: Engine, built_images: BuiltImages) -> None:
    """The payload's torchrun (ddp.train, nccl.*) inside the container verify makes (Docker's none network: no address
    for the container's own name): two workers meet on 127.0.0.1 and all-reduce. Rendezvous by host name waited for
    that name until the check's timeout (found in a container on an H200)."""
    spec = RunSpec(image=built_images.cpu_base, command=["python3", "-c", TORCHRUN], files=payload.payload_files() | {"ranks.py": RANKS.encode()},
                   files_dir=payload.IN_CONTAINER, network_disabled=True, timeout_s=150,
                   labels={"io.imagesmith.run": f"verify-{os.getpid()}"})
    run = engine.run(spec)
    assert (run.exit_code, run.timed_out) == (0, False), run.stderr[-2000:]
    ranks = sorted(line for line in run.stdout.splitlines() if line.startswith("rank "))
    assert ranks == ["rank 0 sum 3.0 master 127.0.0.1", "rank 1 sum 3.0 master 127.0.0.1"], run.stdout[-2000:]
    assert run.stdout.rstrip().endswith("exit 0")
