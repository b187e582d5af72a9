"""What a verification asks: its options, the request the payload's report must answer (the checks, a fresh
nonce) and the payload's config; the outcome, judged again under the shipped check registry. The run itself is
:mod:`imagesmith.stages.verify.incontainer` (inside an image) or :mod:`imagesmith.stages.verify.onhost` (``--local``).

Expected versions come from the image's labels unless ``--expect`` says
otherwise; driver requirements from the knowledge base.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

from imagesmith import runstate
from imagesmith.errors import UsageError
from imagesmith.model import compat, policy, schemas
from imagesmith.model.verifyreport import VerifyReport
from imagesmith.resources import payload_module
from imagesmith.stages.verify import entrypoint as entrypoints
from imagesmith.stages.verify.payload import HOST_CHECKS as HOST_CHECKS  # re-exported: verify.HOST_CHECKS, verify.check_entry, ...
from imagesmith.stages.verify.payload import IN_CONTAINER as IN_CONTAINER
from imagesmith.stages.verify.payload import check_entry as check_entry
from imagesmith.stages.verify.payload import payload_files as payload_files

REPORT_SCHEMA, CONFIG_SCHEMA = schemas.VERIFY_REPORT, schemas.VERIFY_CONFIG
MARKER = "@@IMAGESMITH-REPORT@@ "
LAYER_CHECKS = ("cv", "nlp")
LABEL = "io.imagesmith."
CORE = ("torch", "cuda", "cudnn", "nccl", "python", "os", "cuda_libs")  # cuda_libs: label io.imagesmith.cuda.libs
# Over the image's own ENV: output unbuffered and in UTF-8 whatever the image sets.
PAYLOAD_ENV = {"PYTHONUNBUFFERED": "1", "PYTHONIOENCODING": "utf-8", "NCCL_NVLS_ENABLE": "0"}


@dataclass(frozen=True)
class VerifyOptions:
    tier: str = "quick"
    gpus: str = "all"
    expect: Mapping[str, str] = field(default_factory=dict)
    require_gpu: bool | None = False  # None: as the matrix's default, a GPU for CUDA images (by their labels)
    allow_cpu: bool | None = False  # --allow-cpu-verification; None: wherever a GPU is not required
    shm_size: str | None = "8g"
    memory: str | None = None
    cpus: float | None = None
    timeout_s: float = 900.0
    thresholds: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    soak_minutes: float | None = None
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    sample_gpus: bool = True
    require_non_root: bool = False  # root fails for any image (imagesmith's own images always)
    allow_shared_gpu: bool = False  # judge throughput on a GPU another process uses (the tenant's share)
    # the payload through the image's ENTRYPOINT (True: --through-entrypoint), in its place (False: --bypass-entrypoint),
    # or (None) through it where its start (entrypoint.start) showed it runs the command it is given
    through_entrypoint: bool | None = None
    login_shell: bool = False  # the payload under the image's login shell (bash -l, else sh -l): /etc/profile.d counts
    entry_bound_s: float = entrypoints.BOUND_S  # entrypoint.start: how long the ENTRYPOINT may take to run a no-op
    probe_s: float = 60.0  # security.service: how long the image's own command may take to start its services
    gpu_runtime: str = "auto"  # how GPUs reach the container: auto | nvidia (--gpus) | cdi (model.gpupath)


@dataclass
class VerifyOutcome:
    report: VerifyReport

    @property
    def ok(self) -> bool:
        """Every required check passed, in a run that completed: judged again from the checks under the
        shipped check registry (:func:`declared_checks`), never from the report's own ``summary.ok``."""
        return runstate.is_complete(self.report.to_json()) and policy.verdict(self.report, declared_checks()).ok


def declared_checks() -> dict[str, bool]:
    """The shipped check registry: every check id (the payload's and the host's) -> optional. The verdict
    of any report is recomputed under these flags (a check a report calls optional is not, unless this says so)."""
    payload_module("checks")  # registers every check
    declared = {cid: spec.optional for cid, spec in payload_module("registry").REGISTRY.items()}
    return declared | {cid: False for cid in HOST_CHECKS}


@dataclass(frozen=True)
class Request:
    """What one run asks of the payload; its report must answer exactly this."""

    nonce: str
    tier: str
    checks: Mapping[str, bool]  # the payload's check ids -> optional, in run order
    host_checks: tuple[str, ...] = ()  # HOST_CHECKS the host runs beside it


class Sampler(Protocol):
    def start(self) -> None: ...
    def stop(self) -> dict[str, Any]: ...


def parse_expect(text: str) -> dict[str, str]:
    """``torch=2.9.1,cuda=12.8,pip:einops=0.8`` -> mapping (the payload's grammar:
    known names with did-you-mean, a version or ``cpu``); a bad item is a UsageError (exit 2)."""
    try:
        return dict(payload_module("parsers").parse_expect(text))
    except ValueError as exc:
        raise UsageError(f"--expect: {exc}") from None


def expected_from(labels: Mapping[str, str], expect: Mapping[str, str]) -> dict[str, Any]:
    """What the image declares (labels), overridden by ``--expect``; both mean the
    same (cuda=cpu: a CPU-only torch; cuDNN compared on the three parts torch reports;
    cuda_libs: the folder torch's CUDA libraries must load from, the shared CUDA layer)."""
    declared: dict[str, Any] = {k: labels.get(LABEL + k.replace("_", ".")) or None for k in CORE}
    pins = [s.partition("==") for s in labels.get(LABEL + "packages", "").split()]
    packages = {name: version for name, _, version in pins if version}
    for key, value in expect.items():
        if key in CORE:
            declared[key] = value
        else:
            packages[key] = value
    if declared.get("cuda"):
        declared["cuda"] = str(declared["cuda"]).lower()
    if declared.get("cudnn"):  # the wheel says 9.24.0.43; torch reports three parts (9.24.0)
        declared["cudnn"] = ".".join(str(declared["cudnn"]).split(".")[:3])
    return {k: v for k, v in declared.items() if v} | {"packages": packages}


def request_for(options: VerifyOptions, nonce: str | None = None) -> Request:
    """The checks of ``options`` (the payload's registry, tier, --only, --skip) and a
    fresh nonce; a UsageError (exit 2) when nothing is left to run."""
    registry, parsers = payload_module("registry"), payload_module("parsers")
    payload_module("checks")  # registers every check
    specs = registry.select(options.tier, options.only, options.skip)
    level = registry.TIER_ORDER[options.tier]
    host = tuple(c for c, (tier, _) in HOST_CHECKS.items() if registry.TIER_ORDER[tier] <= level
                 and (not options.only or parsers.matches_any(c, options.only)) and not parsers.matches_any(c, options.skip))
    if not specs and not host:
        raise UsageError(f"--only {','.join(options.only) or '-'} --skip {','.join(options.skip) or '-'} leave no "
                         f"{options.tier}-tier check to run; verify/run.py --list names them")
    return Request(nonce or secrets.token_hex(16), options.tier, {s.id: s.optional for s in specs}, host)


def driver_requirement(cuda: str | None, kb: compat.KnowledgeBase) -> dict[str, Any]:
    """Every CUDA release's runtime and driver (the payload maps the runtime it
    measures to its release), and the declared CUDA minor's newest toolkit driver."""
    info = kb.cuda.get(cuda or "")
    declared = {"toolkit_driver": info.toolkit_driver, "min_driver": info.min_driver} if info else {}
    return declared | {"releases": kb.cuda_releases()}


def gpu_policy(labels: Mapping[str, str], options: VerifyOptions) -> tuple[bool, bool]:
    """(require_gpu, allow_cpu) for the payload. --allow-cpu-verification wins; the
    matrix's default (require_gpu None) requires a GPU of a CUDA image (its io.imagesmith.cuda
    label), and allows CPU mode wherever a GPU is not required."""
    if options.allow_cpu:
        return False, True
    cuda_image = labels.get(LABEL + "cuda") not in (None, "", "cpu")
    require = cuda_image if options.require_gpu is None else options.require_gpu
    return require, (not require) if options.allow_cpu is None else False


def payload_config(labels: Mapping[str, str], options: VerifyOptions, kb: compat.KnowledgeBase,
                   request: Request | None = None, image: Any = None) -> dict[str, Any]:
    """The payload's config: what to expect, which checks (``request``, with its nonce),
    and the image's own configuration (``image``: engine.ImageConfig) for security.config."""
    expected = expected_from(labels, options.expect)
    lineage = (labels.get(LABEL + "lineage") or labels.get(LABEL + "layer") or "").split()
    require_gpu, allow_cpu = gpu_policy(labels, options)
    config: dict[str, Any] = {
        "schema": CONFIG_SCHEMA, "tier": options.tier, "require_gpu": require_gpu,
        "gpus": options.gpus, "allow_cpu": allow_cpu, "allow_shared_gpu": options.allow_shared_gpu,
        "expected": expected, "layers": [layer for layer in lineage if layer in LAYER_CHECKS],
        "thresholds": {k: dict(v) for k, v in options.thresholds.items()},
    }
    driver = driver_requirement(expected.get("cuda"), kb)
    if driver:
        config["driver"] = driver
    if options.require_non_root or labels.get(LABEL + "layer"):  # images imagesmith built promise a non-root user
        config["security"] = {"expect_non_root": True}
    if options.soak_minutes is not None:
        config["soak_minutes"] = options.soak_minutes
    if request is not None:
        config |= {"nonce": request.nonce, "checks": list(request.checks)}
    if image is not None:
        config["image"] = {"user": image.user, "entrypoint": list(image.entrypoint), "cmd": list(image.cmd),
                           "env": image.env_map(), "exposed_ports": list(image.exposed_ports)}
    return config


def payload_args(options: VerifyOptions, config_path: str) -> list[str]:
    """The payload's arguments (which checks run is in the config: the request)."""
    return ["--config", config_path, "--emit-marker"]


def payload_command(options: VerifyOptions) -> list[str]:
    """What runs the payload in a container: python3 run.py, under the image's login shell with --login-shell."""
    run = ["python3", f"{IN_CONTAINER}/run.py", *payload_args(options, f"{IN_CONTAINER}/config.json")]
    return ["/bin/sh", f"{IN_CONTAINER}/login.sh", *run] if options.login_shell else run
