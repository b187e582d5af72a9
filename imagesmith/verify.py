"""Host side of verification: run the payload from verify/ inside an image
(or on this host with ``--local``), sample the GPUs with NVML meanwhile, and
turn the result into a versioned verify report.

Expected versions come from the image's labels unless ``--expect`` says
otherwise; driver requirements from the knowledge base.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

from imagesmith import compat, schemas
from imagesmith.errors import BuildError, UserError
from imagesmith.resources import payload_dir

REPORT_SCHEMA, CONFIG_SCHEMA = schemas.VERIFY_REPORT, schemas.VERIFY_CONFIG
MARKER = "@@IMAGESMITH-REPORT@@ "
IN_CONTAINER = "/opt/imagesmith/verify"
LAYER_CHECKS = ("cv", "nlp")
LABEL = "io.imagesmith."


@dataclass(frozen=True)
class VerifyOptions:
    tier: str = "quick"
    gpus: str = "all"
    expect: Mapping[str, str] = field(default_factory=dict)
    require_gpu: bool = False
    shm_size: str | None = "8g"
    memory: str | None = None
    cpus: float | None = None
    timeout_s: float = 900.0
    thresholds: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    soak_minutes: float | None = None
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    sample_gpus: bool = True


@dataclass
class VerifyOutcome:
    report: dict[str, Any]

    @property
    def ok(self) -> bool:
        return bool(self.report.get("summary", {}).get("ok"))


class Sampler(Protocol):
    def start(self) -> None: ...
    def stop(self) -> dict[str, Any]: ...


# -- pure: what the payload is asked to check ---------------------------------------------


def parse_expect(text: str) -> dict[str, str]:
    """``torch=2.9.1,cuda=12.8`` -> mapping; a bad item is a UserError."""
    out: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise UserError(f"--expect {item!r}: write NAME=VERSION, e.g. torch=2.9.1,cuda=12.8")
        out[key.strip()] = value.strip()
    return out


def expected_from(labels: Mapping[str, str], expect: Mapping[str, str]) -> dict[str, Any]:
    """What the image declares (labels), overridden by ``--expect``."""
    core = ("torch", "cuda", "cudnn", "nccl", "python", "os")
    declared = {k: labels.get(LABEL + k) or None for k in core}
    if declared.get("cuda") == "cpu":
        declared["cuda"] = None
    if declared.get("cudnn"):  # the wheel says 9.24.0.43; torch reports three parts (9.24.0)
        declared["cudnn"] = ".".join(str(declared["cudnn"]).split(".")[:3])
    pins = [s.partition("==") for s in labels.get(LABEL + "packages", "").split()]
    packages = {name: version for name, _, version in pins if version}
    for key, value in expect.items():
        if key in core:
            declared[key] = value
        else:
            packages[key] = value
    return {k: v for k, v in declared.items() if v} | {"packages": packages}


def driver_requirement(cuda: str | None, kb: compat.KnowledgeBase) -> dict[str, str]:
    info = kb.cuda.get(cuda or "")
    return {"toolkit_driver": info.toolkit_driver, "min_driver": info.min_driver} if info else {}


def payload_config(labels: Mapping[str, str], options: VerifyOptions, kb: compat.KnowledgeBase) -> dict[str, Any]:
    expected = expected_from(labels, options.expect)
    lineage = (labels.get(LABEL + "lineage") or labels.get(LABEL + "layer") or "").split()
    config: dict[str, Any] = {
        "schema": CONFIG_SCHEMA, "tier": options.tier, "require_gpu": options.require_gpu,
        "expected": expected, "layers": [layer for layer in lineage if layer in LAYER_CHECKS],
        "thresholds": {k: dict(v) for k, v in options.thresholds.items()},
    }
    driver = driver_requirement(expected.get("cuda"), kb)
    if driver:
        config["driver"] = driver
    if LABEL + "layer" in labels:  # images imagesmith built promise a non-root user
        config["security"] = {"expect_non_root": True}
    if options.soak_minutes is not None:
        config["soak_minutes"] = options.soak_minutes
    return config


def payload_args(options: VerifyOptions, config_path: str) -> list[str]:
    args = ["--config", config_path, "--emit-marker"]
    if options.only:
        args += ["--only", ",".join(options.only)]
    if options.skip:
        args += ["--skip", ",".join(options.skip)]
    return args


def parse_marker(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            return dict(json.loads(line[len(MARKER):]))
    return None


def failed_report(check_id: str, detail: str, tier: str) -> dict[str, Any]:
    """A report for a payload that never reported: one failed check saying why."""
    check = {"id": check_id, "title": "payload ran and reported", "status": "fail", "value": None,
             "threshold": None, "unit": None, "detail": detail, "optional": False, "duration_s": 0.0}
    return {"schema": REPORT_SCHEMA, "tier": tier, "environment": {}, "checks": [check],
            "summary": {"pass": 0, "warn": 0, "fail": 1, "skip": 0, "ok": False}}


def finish(report: dict[str, Any], image: Mapping[str, Any] | None, nvml: Mapping[str, Any] | None,
           started: str, seconds: float) -> dict[str, Any]:
    """The payload's report with the host's view added (image, NVML, wall time)."""
    out = dict(report)
    out["schema"] = REPORT_SCHEMA
    out["payload_schema"] = report.get("schema")
    out.setdefault("started_at", started)
    out["wall_s"] = round(seconds, 2)
    out["image"] = dict(image) if image else None
    out["nvml"] = dict(nvml) if nvml else None
    return out


def payload_files() -> dict[str, bytes]:
    root = payload_dir()
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".json")}


def run_facts(engine: Any, image_id: str, args: Sequence[str] = (), labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run ``verify/facts.py`` (with ``args``, e.g. ``--inventory``) inside the image; its JSON."""
    from imagesmith.engine import RunSpec

    spec = RunSpec(image=image_id, command=["python3", f"{IN_CONTAINER}/facts.py", *args], files=payload_files(),
                   files_dir=IN_CONTAINER, labels=dict(labels or {"io.imagesmith.run": f"facts-{os.getpid()}"}), timeout_s=300)
    run = engine.run(spec)
    if run.exit_code != 0:
        raise BuildError(f"measuring the image failed (exit {run.exit_code}): {(run.stderr or run.stdout).strip()[-400:]}")
    try:
        return dict(json.loads(run.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError, TypeError):
        raise BuildError(f"measuring the image printed no facts (JSON) but: {run.stdout.strip()[-200:]!r}") from None


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _sampler(options: VerifyOptions, factory: Callable[[], Sampler] | None) -> Sampler | None:
    if not options.sample_gpus or options.gpus == "none":
        return None
    if factory is not None:
        return factory()
    from imagesmith.hostinfo import NvmlSampler

    indices = None if options.gpus == "all" else [int(g) for g in options.gpus.split(",") if g.strip().isdigit()]
    return NvmlSampler(indices=indices)


# -- in a container -----------------------------------------------------------------------------


def verify_image(engine: Any, ref: str, options: VerifyOptions, kb: compat.KnowledgeBase | None = None,
                 sampler_factory: Callable[[], Sampler] | None = None, pull: bool = True,
                 progress: Callable[[str], None] | None = None,
                 auth: Mapping[str, str] | None = None) -> VerifyOutcome:
    """Start ``ref`` with the payload inside; never leaves a container behind.
    An image that is not local is pulled (with ``auth``) unless ``pull`` is off."""
    from imagesmith.engine import RunSpec

    kb, started, t0 = kb or compat.load(), _now(), time.monotonic()
    info = engine.image(ref) or (engine.pull(ref, auth) if pull else None)
    if info is None:
        raise UserError(f"image {ref} is not in the engine (and --no-pull was given)")
    config = payload_config(info.labels, options, kb)
    files = payload_files() | {"config.json": json.dumps(config, indent=2).encode()}
    command = ["python3", f"{IN_CONTAINER}/run.py", *payload_args(options, f"{IN_CONTAINER}/config.json")]
    spec = RunSpec(image=info.id, command=command, gpus=options.gpus, files=files, files_dir=IN_CONTAINER,
                   shm_size=options.shm_size, mem_limit=options.memory,
                   nano_cpus=int(options.cpus * 1e9) if options.cpus else None,
                   network_disabled=True, timeout_s=options.timeout_s,
                   labels={"io.imagesmith.run": f"verify-{os.getpid()}"},
                   environment={"PYTHONUNBUFFERED": "1", "NCCL_NVLS_ENABLE": "0"}, on_stderr=progress)
    sampler = None if _remote_engine() else _sampler(options, sampler_factory)  # NVML here says nothing of a remote engine's GPUs
    report, nvml = _run_with_sampler(lambda: _container_report(engine, spec, options), sampler)
    image = {"ref": ref, "id": info.id, "digests": list(info.repo_digests), "labels": dict(info.labels)} | pinned(ref)
    return VerifyOutcome(finish(report, image, nvml, started, time.monotonic() - t0))


def pinned(ref: str) -> dict[str, str]:
    """``host/repo@sha256:…``: the digest verified, recorded as such (the engine resolved exactly that manifest)."""
    name, sep, digest = ref.partition("@")
    return {"digest": digest, "repository": name} if sep and digest.startswith("sha256:") else {}


def _remote_engine() -> bool:
    host = os.environ.get("DOCKER_HOST", "")
    return bool(host) and not host.startswith("unix://")


def _run_with_sampler(run: Callable[[], dict[str, Any]], sampler: Sampler | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    if sampler is not None:
        sampler.start()
    try:
        report = run()
    finally:
        nvml = sampler.stop() if sampler is not None else None
    return report, nvml


NO_GPU_RUNTIME = "could not select device driver"
GPU_RUNTIME_FIX = ("the Docker engine has no NVIDIA container runtime: install nvidia-container-toolkit, then "
                   "nvidia-ctk runtime configure --runtime=docker && systemctl restart docker")


def _container_report(engine: Any, spec: Any, options: VerifyOptions) -> dict[str, Any]:
    try:
        result = engine.run(spec)
    except UserError:
        raise
    except Exception as exc:  # the engine refused to create or start it
        if NO_GPU_RUNTIME in str(exc) and not options.require_gpu:
            return _without_gpus(engine, spec, options)
        return failed_report("payload.start", _why_no_start(str(exc)), options.tier)
    if result.timed_out:
        return failed_report("payload.timeout", f"killed after {options.timeout_s:.0f} s (verify.timeout / --timeout)", options.tier)
    report = parse_marker(result.stdout)
    if report is None:
        return failed_report("payload.report", _why_no_report(result.exit_code, result.stderr or result.stdout), options.tier)
    report["payload_log"] = result.stderr[-20000:]
    return report


def _without_gpus(engine: Any, spec: Any, options: VerifyOptions) -> dict[str, Any]:
    """No GPU runtime on this engine: verify in CPU mode and say so."""
    from dataclasses import replace

    report = _container_report(engine, replace(spec, gpus="none"), options)
    report.setdefault("notes", []).append(f"ran in CPU mode: {GPU_RUNTIME_FIX}")
    return report


NO_PYTHON = "the image has no python3 on its PATH, so nothing in it can be verified"


def _why_no_start(error: str) -> str:
    if NO_GPU_RUNTIME in error:
        return GPU_RUNTIME_FIX
    if "executable file not found" in error and "python3" in error:
        return NO_PYTHON
    return f"the container did not start: {error}"


def _why_no_report(code: int, output: str) -> str:
    last = output.strip().splitlines()[-3:] if output.strip() else []
    if "python3" in output and ("not found" in output or "No such file" in output):
        return NO_PYTHON
    return f"the payload exited {code} without a report: " + " | ".join(last)


# -- on this host -------------------------------------------------------------------------------


def run_local(options: VerifyOptions, python: str | None = None, kb: compat.KnowledgeBase | None = None,
              sampler_factory: Callable[[], Sampler] | None = None) -> VerifyOutcome:
    """The payload on this host's Python (a GPU host without Docker)."""
    kb, started, t0 = kb or compat.load(), _now(), time.monotonic()
    config = payload_config({}, options, kb)
    with tempfile.TemporaryDirectory(prefix="imagesmith-verify-") as tmp:
        config_path = Path(tmp, "config.json")
        config_path.write_text(json.dumps(config))
        cmd = [python or sys.executable, str(payload_dir() / "run.py"), *payload_args(options, str(config_path))]
        sampler = _sampler(options, sampler_factory)
        report, nvml = _run_with_sampler(lambda: _local_report(cmd, options), sampler)
    return VerifyOutcome(finish(report, None, nvml, started, time.monotonic() - t0))


def _local_report(cmd: list[str], options: VerifyOptions) -> dict[str, Any]:
    env = os.environ | {"PYTHONUNBUFFERED": "1", "NCCL_NVLS_ENABLE": "0"}
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None, text=True, env=env, timeout=options.timeout_s)
    except subprocess.TimeoutExpired:
        return failed_report("payload.timeout", f"killed after {options.timeout_s:.0f} s", options.tier)
    report = parse_marker(proc.stdout)
    return report if report is not None else failed_report("payload.report", _why_no_report(proc.returncode, proc.stdout), options.tier)
