"""The host's watch over the GPUs while the payload runs: the NVML sampler (none for a remote engine), which
processes count as the run's own, and the payload's report joined with what the host saw (stages.verify.gpuwatch)."""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping

from imagesmith.stages.verify import gpuwatch
from imagesmith.stages.verify.verify import Sampler, VerifyOptions


def sampler_for(options: VerifyOptions, factory: Callable[[], Sampler] | None) -> Sampler | None:
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


def watch_of(sampler: Sampler | None) -> Any:
    """The sampler's live process watch (edges.gpuwatch.ProcessWatch), when it has one."""
    return getattr(sampler, "watch", None)


def judged(report: dict[str, Any], nvml: Mapping[str, Any] | None, options: VerifyOptions, remote: bool) -> dict[str, Any]:
    """The payload's report with the host's view of the GPUs joined in (imagesmith.stages.verify.gpuwatch)."""
    watch = nvml.get("watch") if isinstance(nvml, Mapping) else None
    if watch is None and isinstance(nvml, Mapping) and nvml.get("error"):
        watch = {"error": nvml["error"], "samples": 0}
    joined = gpuwatch.join(report, watch if isinstance(watch, Mapping) else None, _unwatched(options, remote), options.allow_shared_gpu)
    return gpuwatch.host_indexes(joined, nvml)


def in_container_owner(container_id: str) -> Callable[[int], bool]:
    from imagesmith.edges.gpuwatch import in_container

    return in_container(container_id)


def claim(sampler: Sampler | None, owner: Callable[[int], bool]) -> None:
    """From now on the host's watch counts ``owner``'s processes as the run's own."""
    watch = watch_of(sampler)
    if watch is not None:
        watch.claim(owner)


def remote_engine() -> bool:
    host = os.environ.get("DOCKER_HOST", "")
    return bool(host) and not host.startswith("unix://")


def run_with_sampler(run: Callable[[], dict[str, Any]], sampler: Sampler | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    if sampler is not None:
        sampler.start()
    try:
        report = run()
    finally:
        nvml = sampler.stop() if sampler is not None else None
    return report, nvml
