"""Verification in a container: the payload started inside the image (beside or through its ENTRYPOINT, by the
GPU path the plan chooses, under emulation for a foreign platform), watched by the host, its answer judged, and the
image it ran named by digest; ``run_facts`` measures an image the same way."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from imagesmith.edges.protocols import EngineProtocol, RegistryProtocol
from imagesmith.errors import (
    BuildError,
    CommandNotFound,
    ContainerRefused,
    GpuRequestDropped,
    GpuRuntimeMissing,
    ImagesmithError,
    UserError,
)
from imagesmith.model import compat, gpupath, loader, policy, verifyreport
from imagesmith.model import platform as platforms
from imagesmith.model.ref import ImageRef
from imagesmith.model.verifyreport import Emulation
from imagesmith.stages.verify import entrypoint as entrypoints
from imagesmith.stages.verify import gpus as gpu_paths
from imagesmith.stages.verify import gpuwatch
from imagesmith.stages.verify.judge import (
    failed_report,
    finish,
    judge_output,
    no_python,
    now,
    why_no_report,
    with_checks,
    with_notes,
)
from imagesmith.stages.verify.payload import HOST_CHECKS, IN_CONTAINER, STARTED, check_entry, payload_files
from imagesmith.stages.verify.sampling import (
    claim,
    in_container_owner,
    judged,
    remote_engine,
    run_with_sampler,
    sampler_for,
    watch_of,
)
from imagesmith.stages.verify.served import index_pick, pinned, served_digests
from imagesmith.stages.verify.verify import (
    PAYLOAD_ENV,
    Request,
    Sampler,
    VerifyOptions,
    VerifyOutcome,
    payload_command,
    payload_config,
    request_for,
)


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
    the container by the path :func:`imagesmith.stages.verify.gpus.plan` chooses (``gpu_host``: where it looks for CDI
    specs; the report's ``gpu_path`` says which ran)."""
    from imagesmith.stages.verify import probe

    kb, started, t0 = kb or compat.load(), now(), time.monotonic()
    parsed, request = ImageRef.parse(ref), request_for(options)  # the engine's text, parsed once: the served digests read it
    info = engine.image(ref) or (engine.pull(ref, auth) if pull else None)
    if info is None:
        raise UserError(f"image {ref} is not in the engine (and --no-pull was given)")
    facts = engine.info()  # one docker info: the engine's platform and its GPU paths
    emulated = emulation(ref, getattr(info, "platform", ""), platform_of(facts), options)
    if emulated is not None:
        options = replace(options, gpus="none")  # qemu runs no GPU kernels: CPU mode, said so everywhere
    host = gpu_host or gpu_paths.GpuHost()
    gpu = GpuRun(gpu_paths.plan(facts, options.gpu_runtime, options.gpus, host), info.config.env_map(), host.soname)
    remote = remote_engine()
    sampler = None if remote else sampler_for(options, sampler_factory)  # NVML here says nothing of a remote engine's GPUs
    entry, launch = entry_start(engine, info, options, request)  # before the GPUs are watched: it uses none
    spec = payload_spec(info, options, kb, request, gpuwatch.live(progress, lambda: watch_of(sampler)), launch)
    spec = replace(spec, on_created=lambda cid: claim(sampler, in_container_owner(cid)))
    report, nvml = run_with_sampler(lambda: _gpu_report(engine, spec, options, request, launch, gpu), sampler)
    report = judged(report, nvml, options, remote)
    first = [entry_check(entry, info.config.entrypoint)] if entrypoints.CHECK in request.host_checks else []
    after = [probe.service_check(engine, info, options.probe_s, c) for c in request.host_checks if c != entrypoints.CHECK]
    report = with_notes(with_checks(report, after, first), launch, options, info.labels, lambda: engine.history(info.id))
    report["launch"] = launch.record(entry, payload_command(options))
    kind = engine.kind()  # Docker or Podman, as the engine says (asked once)
    try:
        digests, said = served_digests(registry, parsed, info, kind)
    except (ImagesmithError, OSError) as exc:  # the run stands; which digest it was is unknown, so none is named
        digests, said = [], f"could not read {ref} back from its registry ({exc}): no digest recorded"
    report = report | ({"notes": [*(report.get("notes") or []), said]} if said else {})
    image = {"ref": ref, "id": info.id, "digests": digests, "labels": dict(info.labels)} | pinned(parsed)
    try:
        picked = index_pick(registry, parsed, info) if registry is not None and not parsed.pinned else None
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
        done["mode"] = (dict(mode) if isinstance(mode, dict) else {}) | {"reason": f"CPU mode: emulated, {policy.emulation_text(Emulation(emulated.get('image'), emulated.get('host'), emulated.get('by')))}; GPU checks skipped"}
    return VerifyOutcome(verifyreport.parse(done))


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
        why = problem or why_no_report(result.exit_code, result.stdout, result.stderr, launch)
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


def _why_no_start(refused: ContainerRefused, launch: entrypoints.Launch | None = None) -> str:
    if isinstance(refused, GpuRuntimeMissing):
        return refused.fix
    if isinstance(refused, CommandNotFound) and refused.command == "python3":
        return no_python(launch or entrypoints.Launch())
    return f"the container did not start: {refused}"


def _why_timed_out(timeout_s: float, stderr: str, launch: entrypoints.Launch) -> str:
    killed = f"killed after {timeout_s:.0f} s (verify.timeout / --timeout)"
    if launch.through and STARTED not in stderr:
        return (f"{killed}: the payload never started: the image's ENTRYPOINT {entrypoints.shown(launch.entrypoint)} "
                f"was still running (it does not run the command it is given); {entrypoints.BYPASS} runs python3 in its place")
    return killed


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
