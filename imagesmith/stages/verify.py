"""Host side of verification: run the payload from verify/ inside an image
(or on this host with ``--local``), sample the GPUs with NVML meanwhile, and
turn the result into a versioned verify report.

Expected versions come from the image's labels unless ``--expect`` says
otherwise; driver requirements from the knowledge base.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

from imagesmith import runstate
from imagesmith.edges.protocols import EngineProtocol, RegistryProtocol
from imagesmith.errors import (
    BuildError,
    CommandNotFound,
    ContainerRefused,
    GpuRequestDropped,
    GpuRuntimeMissing,
    ImagesmithError,
    UsageError,
    UserError,
)
from imagesmith.model import compat, gpupath, loader, policy, schemas
from imagesmith.model import platform as platforms
from imagesmith.model.engines import EngineKind
from imagesmith.model.located import printable
from imagesmith.model.ref import ImageRef
from imagesmith.resources import payload_dir, payload_module
from imagesmith.stages import entrypoint as entrypoints
from imagesmith.stages import gpus as gpu_paths
from imagesmith.stages import gpuwatch
from imagesmith.stages.artifacts import DIGEST
from imagesmith.stages.payload import HOST_CHECKS as HOST_CHECKS  # re-exported: verify.HOST_CHECKS, verify.check_entry, ...
from imagesmith.stages.payload import IN_CONTAINER as IN_CONTAINER
from imagesmith.stages.payload import STARTED
from imagesmith.stages.payload import check_entry as check_entry
from imagesmith.stages.payload import payload_files as payload_files

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
    report: dict[str, Any]

    @property
    def ok(self) -> bool:
        """Every required check passed, in a run that completed: judged again from the checks under the
        shipped check registry (:func:`declared_checks`), never from the report's own ``summary.ok``."""
        return runstate.is_complete(self.report) and policy.verdict(self.report, declared_checks()).ok


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


# -- pure: what the payload is asked to check ---------------------------------------------


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


def parse_marker(stdout: str) -> dict[str, Any] | None:
    """The one report line in ``stdout``, unjudged; None when there is none or it is unreadable."""
    report, _ = find_marker(stdout)
    return report if isinstance(report, dict) else None


def find_marker(stdout: str) -> tuple[Any, str | None]:
    """(the report, None) from output holding exactly one report line; (None, None) without one; (None, why)
    otherwise. The line is read by the one strict reader (:func:`imagesmith.model.loader.parse_json_line`): the
    image under test wrote it, so ``NaN``, ``Infinity``, a duplicate key or deep nesting end the run as a failed
    check, never in a signed report."""
    lines = [line.rstrip("\r") for line in stdout.split("\n") if line.startswith(MARKER)]
    if not lines:
        return None, None
    if len(lines) > 1:
        return None, (f"{len(lines)} report lines in the output (the payload prints one): something in the "
                      "image prints its own")
    try:
        return loader.parse_json_line(lines[0][len(MARKER):], "the report line"), None
    except loader.LoadError as exc:
        return None, f"the report line is not strict JSON ({exc.why}; {len(lines[0])} characters)"


def judge_output(stdout: str, request: Request) -> tuple[dict[str, Any] | None, str | None]:
    """(the report, None) when ``stdout`` holds exactly one report line that follows the
    schema and answers ``request`` (its nonce, its tier, each check asked for once);
    (None, why) when it holds a report that does not; (None, None) when it holds none.
    Never raises: the output comes from the image."""
    schema = payload_module("report")
    try:
        report, problem = find_marker(stdout)
        if problem or report is None:
            return None, problem
        problems = schema.validate_report(report) if not isinstance(report, dict) else (
            schema.answers_request(report, request.nonce, dict(request.checks), request.tier)
            + schema.validate_report(report))
        if not problems:  # the host's schema of the verify report too: what is signed must be what publish reads
            loader.check_schema(report, REPORT_SCHEMA, "report")
    except loader.LoadError as exc:
        return None, f"the report was rejected: {exc.where}: {exc.why}"
    except Exception as exc:  # noqa: BLE001 - anything in the output must end as a failed check, not exit 3
        return None, f"the report could not be read ({type(exc).__name__})"
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        return None, "the report was rejected: " + "; ".join(problems[:3]) + more
    return dict(report), None


def failed_report(check_id: str, detail: str, tier: str) -> dict[str, Any]:
    """A report for a payload that never reported: one failed check saying why."""
    check = check_entry(check_id, "payload ran and reported", "fail", detail)
    return {"schema": REPORT_SCHEMA, "tier": tier, "environment": {}, "checks": [check],
            "summary": {"pass": 0, "warn": 0, "fail": 1, "skip": 0, "inconclusive": 0, "ok": False},
            "sharing": {"exclusive": None, "allowed": False, "foreign": []}}


def with_checks(report: dict[str, Any], entries: list[dict[str, Any]], first: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """``report`` with the host's own check entries added (``first`` before the payload's: they ran before it)
    and the summary recounted."""
    if not entries and not first:
        return report
    checks = [*first, *(report.get("checks") or []), *entries]
    return report | {"checks": checks, "summary": payload_module("report").summarize(checks)}


def expect_conflicts(labels: Mapping[str, str], expect: Mapping[str, str]) -> list[str]:
    """--expect values that differ from what the image's labels declare (both named: one of them is wrong)."""
    pins = {n: v for n, _, v in (s.partition("==") for s in labels.get(LABEL + "packages", "").split()) if v}
    out = []
    for key, value in expect.items():
        label = LABEL + key.replace("_", ".") if key in CORE else LABEL + "packages"
        declared = labels.get(label) if key in CORE else pins.get(key)
        if declared and str(declared).lower() != str(value).lower():
            out.append(f"--expect {key}={value} overrides the image's label {label} ({key} {declared}): "
                       "the checks compare against the --expect value; one of the two is wrong")
    return out


def with_notes(report: dict[str, Any], launch: entrypoints.Launch, options: VerifyOptions,
               labels: Mapping[str, str], history: Callable[[], Sequence[Mapping[str, Any]]] = list) -> dict[str, Any]:
    """The report with the host's notes: how the payload ran beside the image's ENTRYPOINT, --expect against
    lying labels; a torch that did not import says what to do (``history``: the image's build steps, read only
    when nothing in the image puts the torch found elsewhere on PATH), or names the ENTRYPOINT it bypassed."""
    note = launch.note()
    notes = [*(report.get("notes") or []), *([note] if note else []), *expect_conflicts(labels, options.expect)]
    checks = [_where_torch_is(c, launch, note, history) for c in report.get("checks") or []]
    return report | {"notes": notes, "checks": checks} if notes or checks != report.get("checks") else report


def _where_torch_is(check: Any, launch: entrypoints.Launch, note: str | None,
                    history: Callable[[], Sequence[Mapping[str, Any]]] = list) -> Any:
    """versions.torch, torch not importable: what to do where the payload found torch elsewhere (its
    ``data.elsewhere``), else the ENTRYPOINT it bypassed."""
    if not isinstance(check, dict) or check.get("id") != "versions.torch" or "not importable" not in str(check.get("detail")):
        return check
    data = check.get("data")
    data = data if isinstance(data, dict) else {}
    found = [f for f in data.get("elsewhere") or [] if isinstance(f, dict) and isinstance(f.get("prefix"), str)]
    if found:
        dropped = parent_path(history, str(found[0]["prefix"])) if not found[0].get("on_path") else None
        return check | {"detail": f"{check.get('detail')}; {remedy(found[0], launch, dropped)}"}
    return check | {"detail": f"{check.get('detail')} ({note})"} if note and not launch.through else check


ENV_PATH = re.compile(r"\bENV\s+PATH[= ]\s*(\S+)")


def parent_path(history: Callable[[], Sequence[Mapping[str, Any]]], prefix: str) -> str | None:
    """An earlier build step's ``ENV PATH`` that held ``prefix``/bin (a parent image's, say), which a later ENV PATH
    dropped: the image's history (``docker history``: CreatedBy, newest first). None when none did, or unreadable."""
    try:
        steps = list(history())
    except (ImagesmithError, OSError):
        return None
    bin_dir = prefix.rstrip("/") + "/bin"
    for step in steps:
        found = ENV_PATH.search(str(step.get("CreatedBy") or "")) if isinstance(step, Mapping) else None
        if found and bin_dir in found.group(1).strip("\"'").split(":"):
            return found.group(1).strip("\"'")[:200]
    return None


def remedy(found: Mapping[str, Any], launch: entrypoints.Launch, dropped: str | None = None) -> str:
    """What to do about torch in ``found`` (an environment the payload found, with what puts it on PATH);
    ``dropped``: an earlier ENV PATH that held it (:func:`parent_path`)."""
    scopes = payload_module("envsearch")
    fix = f"set ENV PATH={str(found['prefix'])[:200].rstrip('/')}/bin:$PATH"
    if dropped:
        return f"an earlier build step's ENV PATH={dropped} held it, and a later ENV PATH dropped it: {fix}"
    by = {str(b.get("scope")) for b in found.get("on_path") or [] if isinstance(b, dict)}
    if by & {scopes.LOGIN, scopes.BASH} and not launch.login_shell:
        return f"run with --login-shell or {fix}"
    if scopes.ENTRYPOINT in by and launch.entrypoint and not launch.through:
        return f"run it through the ENTRYPOINT ({entrypoints.THROUGH}) or {fix}"
    if any(scope.startswith("every command") for scope in by):
        return f"put its bin first in ENV PATH ({fix})"
    if scopes.INTERACTIVE in by:
        return f"{fix} (a verify run, like `docker run IMAGE COMMAND`, starts no interactive shell)"
    return fix


def running_report(ref: str | None, tier: str) -> dict[str, Any]:
    """What a verify report says while its run goes on (and, interrupted, after)."""
    return {"schema": REPORT_SCHEMA, "tier": tier, "started_at": _now(), "environment": {}, "checks": [],
            "summary": {"pass": 0, "warn": 0, "fail": 0, "skip": 0, "inconclusive": 0, "ok": False},
            "image": {"ref": ref} if ref else None}


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
    out["state"] = runstate.COMPLETE
    return out


def run_facts(engine: EngineProtocol, image_id: str, args: Sequence[str] = (), labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run ``verify/facts.py`` (with ``args``, e.g. ``--inventory``) inside the image; its JSON."""
    from imagesmith.edges.engine import RunSpec

    spec = RunSpec(image=image_id, command=["python3", f"{IN_CONTAINER}/facts.py", *args], files=payload_files(),
                   files_dir=IN_CONTAINER, labels=dict(labels or {"io.imagesmith.run": f"facts-{os.getpid()}"}), timeout_s=300)
    run = engine.run(spec)
    if run.exit_code != 0:
        raise BuildError(f"measuring the image failed (exit {run.exit_code}): {(run.stderr or run.stdout).strip()[-400:]}")
    lines = run.stdout.strip().splitlines()
    try:
        facts = loader.parse_json_line(lines[-1] if lines else "", "the facts line")
    except loader.LoadError as exc:
        raise BuildError(f"measuring the image printed no facts (strict JSON: {exc.why}) but: {run.stdout.strip()[-200:]!r}") from None
    if not isinstance(facts, dict):
        raise BuildError(f"measuring the image printed no facts (a JSON object) but: {run.stdout.strip()[-200:]!r}")
    return facts


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _sampler(options: VerifyOptions, factory: Callable[[], Sampler] | None) -> Sampler | None:
    if not options.sample_gpus or options.gpus == "none":
        return None
    if factory is not None:
        return factory()
    from imagesmith.edges.hostinfo import NvmlSampler

    wanted = None if options.gpus == "all" else [g.strip() for g in options.gpus.split(",") if g.strip()]
    return NvmlSampler(indices=wanted, watch=True)


def _unwatched(options: VerifyOptions, remote: bool) -> str:
    """Why the host did not watch the run's GPUs (the sharing verdict's reason when nothing else was seen)."""
    if remote:
        return (f"the engine is remote (DOCKER_HOST={os.environ.get('DOCKER_HOST', '')[:80]}): NVML on this host says "
                "nothing of its GPUs, so nobody watched them for the whole run")
    if not options.sample_gpus:
        return "the host's GPU sampling was off"
    return "the host did not watch the GPUs"


def _watch_of(sampler: Sampler | None) -> Any:
    """The sampler's live process watch (edges.gpuwatch.ProcessWatch), when it has one."""
    return getattr(sampler, "watch", None)


def _judged(report: dict[str, Any], nvml: Mapping[str, Any] | None, options: VerifyOptions, remote: bool) -> dict[str, Any]:
    """The payload's report with the host's view of the GPUs joined in (imagesmith.stages.gpuwatch)."""
    watch = nvml.get("watch") if isinstance(nvml, Mapping) else None
    if watch is None and isinstance(nvml, Mapping) and nvml.get("error"):
        watch = {"error": nvml["error"], "samples": 0}
    joined = gpuwatch.join(report, watch if isinstance(watch, Mapping) else None, _unwatched(options, remote), options.allow_shared_gpu)
    return gpuwatch.host_indexes(joined, nvml)


# -- in a container -----------------------------------------------------------------------------


def verify_image(engine: EngineProtocol, ref: str, options: VerifyOptions, kb: compat.KnowledgeBase | None = None,
                 sampler_factory: Callable[[], Sampler] | None = None, pull: bool = True,
                 progress: Callable[[str], None] | None = None,
                 auth: Mapping[str, str] | None = None, registry: RegistryProtocol | None = None,
                 gpu_host: gpu_paths.GpuHost | None = None) -> VerifyOutcome:
    """Start ``ref`` with the payload inside (the image's ENTRYPOINT never runs);
    never leaves a container behind. An image that is not local is pulled (with
    ``auth``) unless ``pull`` is off. The report counts only if it echoes this
    run's nonce and answers every check asked for. With ``registry`` (a client for ``ref``'s host), a tag that
    names an image index records which platform's image of it the engine ran (:func:`index_pick`). GPUs reach
    the container by the path :func:`imagesmith.stages.gpus.plan` chooses (``gpu_host``: where it looks for CDI
    specs; the report's ``gpu_path`` says which ran)."""
    from imagesmith.stages import probe

    kb, started, t0 = kb or compat.load(), _now(), time.monotonic()
    request = request_for(options)
    info = engine.image(ref) or (engine.pull(ref, auth) if pull else None)
    if info is None:
        raise UserError(f"image {ref} is not in the engine (and --no-pull was given)")
    facts = engine.info()  # one docker info: the engine's platform and its GPU paths
    emulated = emulation(ref, getattr(info, "platform", ""), platform_of(facts), options)
    if emulated is not None:
        options = replace(options, gpus="none")  # qemu runs no GPU kernels: CPU mode, said so everywhere
    host = gpu_host or gpu_paths.GpuHost()
    gpu = GpuRun(gpu_paths.plan(facts, options.gpu_runtime, options.gpus, host), info.config.env_map(), host.soname)
    remote = _remote_engine()
    sampler = None if remote else _sampler(options, sampler_factory)  # NVML here says nothing of a remote engine's GPUs
    entry, launch = entry_start(engine, info, options, request)  # before the GPUs are watched: it uses none
    spec = payload_spec(info, options, kb, request, gpuwatch.live(progress, lambda: _watch_of(sampler)), launch)
    spec = replace(spec, on_created=lambda cid: _claim(sampler, in_container_owner(cid)))
    report, nvml = _run_with_sampler(lambda: _gpu_report(engine, spec, options, request, launch, gpu), sampler)
    report = _judged(report, nvml, options, remote)
    first = [entry_check(entry, info.config.entrypoint)] if entrypoints.CHECK in request.host_checks else []
    after = [probe.service_check(engine, info, options.probe_s, c) for c in request.host_checks if c != entrypoints.CHECK]
    report = with_notes(with_checks(report, after, first), launch, options, info.labels, lambda: engine.history(info.id))
    report["launch"] = launch.record(entry, payload_command(options))
    kind = engine.kind()  # Docker or Podman, as the engine says (asked once)
    try:
        digests, said = served_digests(registry, ref, info, kind)
    except (ImagesmithError, OSError) as exc:  # the run stands; which digest it was is unknown, so none is named
        digests, said = [], f"could not read {ref} back from its registry ({exc}): no digest recorded"
    report = report | ({"notes": [*(report.get("notes") or []), said]} if said else {})
    image = {"ref": ref, "id": info.id, "digests": digests, "labels": dict(info.labels)} | pinned(ref)
    try:
        picked = index_pick(registry, ref, info) if registry is not None and not pinned(ref) else None
    except (ImagesmithError, OSError) as exc:  # the run stands; only which entry of an index it was is unknown
        picked = None
        report = report | {"notes": [*(report.get("notes") or []), f"could not read {ref}'s image index back: {exc}"]}
    if picked is not None:
        image |= picked
        report = report | {"notes": [*(report.get("notes") or []), f"{ref} is an image index ({picked['index']}): verified its "
                                     f"{picked['platform']} image {picked['digest']}"]}
    done = finish(report, image, nvml, started, time.monotonic() - t0) | {"engine": kind.record()}
    done["platform"] = {"image": getattr(info, "platform", ""), "host": platform_of(facts)}  # what the attestation states
    if emulated is not None:  # the payload saw --gpus none; why it was none is the host's to say
        done["emulation"] = emulated
        mode = done.get("mode")
        done["mode"] = (dict(mode) if isinstance(mode, dict) else {}) | {"reason": f"CPU mode: emulated, {policy.emulation_text(emulated)}; GPU checks skipped"}
    return VerifyOutcome(done)


EMULATOR = "qemu-user through binfmt_misc"


def entry_start(engine: EngineProtocol, info: Any, options: VerifyOptions,
                request: Request) -> tuple[entrypoints.Start | None, entrypoints.Launch]:
    """The image's ENTRYPOINT started with a no-op command (when it has one, and the check is asked for or the
    default needs its answer), and how the payload runs beside it."""
    entrypoint = list(info.config.entrypoint)
    wanted = entrypoints.CHECK in request.host_checks or options.through_entrypoint is None
    started = entrypoints.start(engine, info.id, entrypoint, options.memory, options.entry_bound_s) if entrypoint and wanted else None
    return started, entrypoints.choose(entrypoint, options.through_entrypoint, started, payload_command(options),
                                       options.login_shell)


def entry_check(started: entrypoints.Start | None, entrypoint: Sequence[str]) -> dict[str, Any]:
    """The ``entrypoint.start`` entry: skipped without an ENTRYPOINT, else its start's verdict."""
    title = HOST_CHECKS[entrypoints.CHECK][1]
    if started is None:
        return check_entry(entrypoints.CHECK, title, "skip", "the image has no ENTRYPOINT: a command runs as given" if not
                           entrypoint else f"--bypass-entrypoint and {entrypoints.CHECK} not asked for")
    status, detail = entrypoints.verdict(started)
    return check_entry(entrypoints.CHECK, title, status, detail, seconds=started.seconds,
                       data={"entrypoint": list(started.entrypoint)[:40]} | started.record())


def engine_platform(engine: EngineProtocol) -> str:
    """The engine's own platform (``linux/amd64``), from ``docker info``."""
    return platform_of(engine.info())


def platform_of(info: Mapping[str, Any]) -> str:
    """``docker info``'s platform (OSType, Architecture in uname words) as Docker writes one: ``linux/amd64``."""
    machine = str(info.get("Architecture") or "")
    arch = platforms.ALIASES.get(machine, machine)  # uname -m words (x86_64, aarch64) -> Docker's
    return f"{info.get('OSType') or 'linux'}/{arch}"


def emulation(ref: str, image_platform: str, host_platform: str, options: VerifyOptions) -> dict[str, str] | None:
    """The report's ``emulation`` block when ``ref`` (of ``image_platform``) is not the engine's platform; a
    GPU required of an emulated run is a UserError (it can never be GPU-verified here)."""
    if not platforms.emulated(image_platform, host_platform):
        return None
    if options.require_gpu:
        arch = image_platform.split("/")[1]
        raise UserError(f"{ref} is a {image_platform} image: on this {host_platform} engine it runs only under emulation, "
                        f"never on a GPU; verify it on a native {arch} GPU runner (a fleet class on {image_platform}), "
                        "or leave out --require-gpu to check it in CPU mode under emulation")
    return {"image": image_platform, "host": host_platform, "by": EMULATOR}


def payload_spec(info: Any, options: VerifyOptions, kb: compat.KnowledgeBase, request: Request,
                 progress: Callable[[str], None] | None, launch: entrypoints.Launch | None = None) -> Any:
    """The payload's container: its files and config copied in, python3 run.py through the image's ENTRYPOINT
    or in its place (``launch``; default: in its place), the image's user, no network, a timeout."""
    from imagesmith.edges.engine import RunSpec

    config = payload_config(info.labels, options, kb, request, info.config)
    files = payload_files() | {"config.json": json.dumps(config, indent=2).encode()}
    entrypoint, command = (launch or entrypoints.Launch()).argv(payload_command(options))
    return RunSpec(image=info.id, command=command, entrypoint=entrypoint, gpus=options.gpus, files=files, files_dir=IN_CONTAINER,
                   shm_size=options.shm_size, mem_limit=options.memory,
                   nano_cpus=int(options.cpus * 1e9) if options.cpus else None,
                   network_disabled=True, timeout_s=options.timeout_s,
                   labels={"io.imagesmith.run": f"verify-{os.getpid()}"},
                   environment=PAYLOAD_ENV, on_stderr=progress)


def served_digests(registry: RegistryProtocol | None, ref: str, info: Any, kind: EngineKind) -> tuple[list[str], str]:
    """The repository digests a report names for the image verified: only ones its registry serves, read back
    (``host/repository@sha256:...``), and a note when the engine's own bookkeeping said otherwise.

    With a client for ``ref``'s registry: the digest the registry serves for ``ref``'s tag when its config is the
    image verified (its ID), else the engine's digests of that repository the registry serves (an image index the
    engine pulled through the tag). Without one (Docker Hub; a local build): Docker's ``RepoDigests``, which Docker
    records only from a push or pull; none of Podman's, which it also makes up for images no registry has seen (a
    ``podman load``, a build)."""
    parsed = ImageRef.parse(ref)
    held = [d for d in info.repo_digests if (p := ImageRef.maybe(d)) is not None and p.pinned]
    if registry is None:
        if kind.podman and held:
            return [], (f"{kind.name} lists {len(held)} repository digest{'s' if len(held) > 1 else ''} for this image, none read "
                        "back from a registry (Podman makes its own for images no registry has seen): no digest recorded")
        return held, ""
    if parsed.pinned:
        return [str(parsed)], ""
    back = registry.manifest(parsed.repository, parsed.tag or "latest")
    if back is not None and back.config_digest == info.id:
        return [f"{parsed.name}@{back.digest}"], ""
    mine = [d for d in held if (p := ImageRef.maybe(d)) is not None and p.name == parsed.name]
    kept = [d for d in mine if registry.manifest(parsed.repository, str(ImageRef.parse(d).digest)) is not None]
    if kept or (back is None and not mine):
        return kept, ""
    served = f"serves {back.digest} (image {back.config_digest})" if back is not None else "serves nothing"
    return kept, (f"{parsed.name} {served} for {parsed.tag or 'latest'}, not this image ({info.id}); the engine's "
                  f"digests {', '.join(mine) or '(none)'} are not recorded")


def index_pick(registry: RegistryProtocol, ref: str, info: Any) -> dict[str, str] | None:
    """``ref`` (a tag) pulled through an image index: the index's digest (the engine's repo digest for ``ref``'s
    repository) and the digest of the entry for the image's own platform, read from the registry by the index's
    digest, which no later push can change (and the client checks that the bytes hash to it). None when ``ref``
    names a plain image manifest, or the index's entry names no sha256 digest."""
    from imagesmith.edges.registry import entries, manifest_document

    parsed = ImageRef.parse(ref)
    for held in info.repo_digests:
        pin = ImageRef.maybe(held)
        if pin is None or pin.name != parsed.name or not pin.pinned:
            continue
        digest, repo = str(pin.digest), parsed.repository
        found = registry.manifest(repo, digest)
        doc = manifest_document(found.raw, f"{parsed.host}/{repo}@{digest}") if found is not None else {}
        for entry in entries(doc, "manifests"):
            raw = entry.get("platform")
            plat: dict[str, Any] = raw if isinstance(raw, dict) else {}
            if "/".join(str(plat.get(k)) for k in ("os", "architecture", "variant") if plat.get(k)) == info.platform:
                entry_digest = str(entry.get("digest"))
                return {"index": digest, "digest": entry_digest, "platform": info.platform} if DIGEST.fullmatch(entry_digest) else None
    return None


def in_container_owner(container_id: str) -> Callable[[int], bool]:
    from imagesmith.edges.gpuwatch import in_container

    return in_container(container_id)


def _claim(sampler: Sampler | None, owner: Callable[[int], bool]) -> None:
    """From now on the host's watch counts ``owner``'s processes as the run's own."""
    watch = _watch_of(sampler)
    if watch is not None:
        watch.claim(owner)


def pinned(ref: str) -> dict[str, str]:
    """``host/repo@sha256:…``: the digest verified, recorded as such (the engine resolved exactly that manifest)."""
    parsed = ImageRef.maybe(ref)
    return {"digest": str(parsed.digest), "repository": parsed.name} if parsed and parsed.pinned else {}


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


GPU_RUNTIME_FIX = GpuRuntimeMissing.fix


@dataclass(frozen=True)
class GpuRun:
    """The GPU path planned for a run, and what applying it needs: the image's ENV, the SONAME reader."""

    planned: gpu_paths.Planned
    image_env: Mapping[str, str]
    soname: Callable[[str], str | None]


def _gpu_report(engine: EngineProtocol, spec: Any, options: VerifyOptions, request: Request, launch: entrypoints.Launch, gpu: GpuRun,
                path: gpupath.GpuPath | None = None) -> dict[str, Any]:
    """The payload's run by ``path`` (default: the planned one), its ``gpu_path`` block and note. Refused GPUs
    (:class:`GpuRuntimeMissing`): ``path.then`` when the plan has one, else without GPUs, saying so."""
    path = path or gpu.planned.path
    applied, notes = gpu_paths.apply(spec, path, gpu.planned.registry, gpu.image_env, gpu.soname)
    try:
        report = _container_report(engine, applied, options, request, launch)
    except GpuRuntimeMissing as exc:
        said = str(exc).replace(f" ({exc.fix})", "")  # the fix is the note's, once
        how = "did not honour" if isinstance(exc, GpuRequestDropped) else "refused"
        refused = f"the engine {how} {'the CDI devices' if path.path == gpupath.CDI_ENGINE else '--gpus'} ({said})"
        if path.then is not None:
            report = _gpu_report(engine, spec, options, request, launch, gpu, path.then)
            return report | {"notes": [*(report.get("notes") or []), f"{refused}: ran by {path.then.path} instead"]}
        fix = _gpu_fix(exc, path)
        report = _without_gpus(engine, applied, options, request, launch, fix)
        return report | {"gpu_path": gpupath.GpuPath(gpupath.NONE, f"{refused}: ran without GPUs").record()}
    note = gpu_paths.note(path)
    return report | {"gpu_path": path.record(notes)} | ({"notes": [*(report.get("notes") or []), note]} if note else {})


def _gpu_fix(exc: GpuRuntimeMissing, path: gpupath.GpuPath) -> str:
    """What gives the containers GPUs: the engine's own fix where the edge named one (Podman's CDI spec, a request
    Docker ignored), else Docker's: CDI on for its CDI names, the NVIDIA runtime for --gpus."""
    if exc.fix != GPU_RUNTIME_FIX:
        return exc.fix
    return gpupath.FIX_CDI_ON if path.path == gpupath.CDI_ENGINE else GPU_RUNTIME_FIX


def _container_report(engine: EngineProtocol, spec: Any, options: VerifyOptions, request: Request,
                      launch: entrypoints.Launch) -> dict[str, Any]:
    """The payload's run in a container as a report; :class:`GpuRuntimeMissing` for GPUs asked of an engine
    that cannot give them leaves to the caller (:func:`_gpu_report`)."""
    try:
        result = engine.run(spec)
    except ContainerRefused as exc:  # the engine would not create or start it (the engine unreachable is no check's failure)
        if isinstance(exc, GpuRuntimeMissing) and (spec.gpus != "none" or spec.cdi_devices):
            raise
        return failed_report("payload.start", _why_no_start(exc, launch), options.tier)
    if result.timed_out:
        return failed_report("payload.timeout", _why_timed_out(options.timeout_s, result.stderr, launch), options.tier)
    report, problem = judge_output(result.stdout, request)
    if report is None:
        why = problem or _why_no_report(result.exit_code, result.stdout, result.stderr, launch)
        return failed_report("payload.report", why + _truncated(result), options.tier)
    return report | {"payload_log": result.stderr[-20000:], "payload_exit_code": result.exit_code}


def _truncated(result: Any) -> str:
    kept = len(result.stdout.encode())
    if result.stdout_bytes <= kept:
        return ""
    return f" (the container printed {result.stdout_bytes / 2**20:.0f} MiB on stdout; the last {kept / 2**20:.0f} MiB were read)"


def _without_gpus(engine: EngineProtocol, spec: Any, options: VerifyOptions, request: Request, launch: entrypoints.Launch,
                  why: str = GPU_RUNTIME_FIX) -> dict[str, Any]:
    """No GPU runtime on this engine: run without GPUs and tell the payload why; it
    judges that against what was asked (CPU mode only where that is allowed)."""
    config = json.loads(spec.files["config.json"]) | {"gpu_unavailable": why}
    files = dict(spec.files) | {"config.json": json.dumps(config, indent=2).encode()}
    report = _container_report(engine, replace(spec, gpus="none", cdi_devices=(), files=files), options, request, launch)
    report.setdefault("notes", []).append(f"ran without GPUs: {why}")
    return report


NO_PYTHON = "the image has no python3 on its PATH, so nothing in it can be verified"


def no_python(launch: entrypoints.Launch) -> str:
    """No python3 where the payload looked for it: the image's PATH, the one its ENTRYPOINT or login shell sets."""
    if launch.login_shell:
        return "the image's login shell (--login-shell) finds no python3 on the PATH it sets, so the payload could not start"
    if launch.through:
        return (f"the image's ENTRYPOINT {entrypoints.shown(launch.entrypoint)} finds no python3 on the PATH it gives the "
                f"command it runs, so the payload could not start through it; {entrypoints.BYPASS} runs the image's own python3")
    return NO_PYTHON


def _why_no_start(refused: ContainerRefused, launch: entrypoints.Launch | None = None) -> str:
    if isinstance(refused, GpuRuntimeMissing):
        return refused.fix
    if isinstance(refused, CommandNotFound) and refused.command == "python3":
        return no_python(launch or entrypoints.Launch())
    return f"the container did not start: {refused}"


def _lines(text: str, n: int = 3) -> str:
    return " | ".join(line[:300] for line in text.strip().splitlines()[-n:]) if text.strip() else ""


def _why_no_report(code: int, stdout: str, stderr: str, launch: entrypoints.Launch | None = None) -> str:
    """Why the run left no report, saying what ran and who exited: the payload (whose first line is on stderr,
    :data:`STARTED`), or what ran before it and never started it (the image's ENTRYPOINT, its login shell, a
    python3 that ignored its arguments)."""
    launch = launch or entrypoints.Launch()
    started, output = STARTED in stderr, stderr + "\n" + stdout
    last = _lines(stderr) or _lines(stdout) or "no output"
    if not started and "python3" in output and ("not found" in output or "No such file" in output):
        return no_python(launch)
    if not started and launch.through:
        return (f"the image's ENTRYPOINT {entrypoints.shown(launch.entrypoint)} exited {code} before the payload started "
                f"(it was given python3 run.py as `docker run IMAGE python3 ...` gives it a command): {last}")
    if not started:
        what = "the image's login shell (--login-shell)" if launch.login_shell else "the image's python3"
        return f"{what} exited {code} without starting the payload ({launch.ran()}; it did not run its arguments): {last}"
    return (f"the payload exited {code} without a report ({launch.ran()}; it crashed, or something in the image "
            f"swallowed its output): {last}")


def _why_timed_out(timeout_s: float, stderr: str, launch: entrypoints.Launch) -> str:
    killed = f"killed after {timeout_s:.0f} s (verify.timeout / --timeout)"
    if launch.through and STARTED not in stderr:
        return (f"{killed}: the payload never started: the image's ENTRYPOINT {entrypoints.shown(launch.entrypoint)} "
                f"was still running (it does not run the command it is given); {entrypoints.BYPASS} runs python3 in its place")
    return killed


# -- on this host -------------------------------------------------------------------------------


def run_local(options: VerifyOptions, python: str | None = None, kb: compat.KnowledgeBase | None = None,
              sampler_factory: Callable[[], Sampler] | None = None,
              progress: Callable[[str], None] | None = None) -> VerifyOutcome:
    """The payload on this host's Python (a GPU host without Docker); its progress lines go to ``progress``
    (None: nowhere), each throughput check's judged against what the host's watch saw during it."""
    kb, started, t0 = kb or compat.load(), _now(), time.monotonic()
    request = request_for(options)
    config = payload_config({}, options, kb, request)
    with tempfile.TemporaryDirectory(prefix="imagesmith-verify-") as tmp:
        config_path = Path(tmp, "config.json")
        config_path.write_text(json.dumps(config))
        cmd = [local_python(python), str(payload_dir() / "run.py"), *payload_args(options, str(config_path))]
        sampler = _sampler(options, sampler_factory)
        lines = gpuwatch.live(progress, lambda: _watch_of(sampler))
        report, nvml = _run_with_sampler(lambda: _local_report(cmd, options, request, sampler, lines), sampler)
    report = _judged(report, nvml, options, remote=False)
    skipped = [check_entry(c, HOST_CHECKS[c][1], "skip", "no image: verify --local runs this host's Python")
               for c in request.host_checks]
    return VerifyOutcome(finish(with_checks(report, skipped), None, nvml, started, time.monotonic() - t0))


def local_python(python: str | None) -> str:
    """The Python ``verify --local`` runs the payload with: ``--python`` (a path, or a name on PATH), else this one.
    A UserError (exit 1) saying which when it is not an executable file."""
    if python is None:
        return sys.executable
    found = shutil.which(python) if os.sep not in python else (python if os.path.isfile(python) and os.access(python, os.X_OK) else None)
    if found is None:
        what = "no such file" if os.sep in python and not os.path.exists(python) else \
            "not an executable file" if os.sep in python else "not found on PATH"
        raise UserError(f"--python {printable(python, 120)}: {what}; give the Python to verify, e.g. --python /opt/venv/bin/python")
    return found


def local_gpu_env(gpus: str, environ: Mapping[str, str]) -> dict[str, str]:
    """--local: --gpus none hides every GPU; a list selects those GPUs (numbered as NVML numbers them: PCI order),
    unless CUDA_VISIBLE_DEVICES already says which (then the payload counts what it sees)."""
    if gpus == "none":
        return {"CUDA_VISIBLE_DEVICES": ""}
    if gpus != "all" and "CUDA_VISIBLE_DEVICES" not in environ:
        return {"CUDA_VISIBLE_DEVICES": gpus, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    return {}


def _local_report(cmd: list[str], options: VerifyOptions, request: Request, sampler: Sampler | None = None,
                  lines: Callable[[str], None] | None = None) -> dict[str, Any]:
    env = os.environ | PAYLOAD_ENV | local_gpu_env(options.gpus, os.environ)
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    except OSError as exc:  # the Python vanished or is no program (an ELF for another machine, a script without #!)
        raise UserError(f"--python {printable(cmd[0], 120)}: cannot be run ({exc.strerror or exc}); give the Python to verify") from None
    from imagesmith.edges.gpuwatch import descendant_of

    _claim(sampler, descendant_of(proc.pid))
    tail: collections.deque[str] = collections.deque(maxlen=20)  # stderr's last lines: who exited, and what it said

    def kept(line: str) -> None:
        tail.append(line)
        if lines is not None:
            lines(line)
    relay = threading.Thread(target=_relay, args=(proc.stderr, kept), daemon=True)
    relay.start()
    out = _Collect(proc.stdout)
    try:
        code = proc.wait(timeout=options.timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return failed_report("payload.timeout", f"killed after {options.timeout_s:.0f} s", options.tier)
    finally:
        relay.join(timeout=5)
    stdout = out.text()
    report, problem = judge_output(stdout, request)
    if report is None:
        return failed_report("payload.report", problem or _why_no_report(code, stdout, "\n".join(tail)), options.tier)
    return report


def _relay(stream: Any, lines: Callable[[str], None] | None) -> None:
    """The payload's stderr, line by line, to ``lines`` (read to the end either way, so it never blocks)."""
    for raw in iter(stream.readline, b""):
        if lines is not None:
            lines(raw.decode(errors="replace").rstrip("\n"))
    stream.close()


class _Collect:
    """A child's stdout read to its end on a thread of its own (stderr is read beside it)."""

    def __init__(self, stream: Any) -> None:
        self._chunks: list[bytes] = []
        self._thread = threading.Thread(target=lambda: self._chunks.append(stream.read()), daemon=True)
        self._thread.start()

    def text(self) -> str:
        self._thread.join(timeout=30)
        return b"".join(self._chunks).decode(errors="replace")
