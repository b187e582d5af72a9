"""The release policy: which tags an image earns from how it was verified (pure).

"Vetted" means verified where it will run. A CUDA image is GPU-verified only
when its verification ran with at least one GPU and every GPU check passed;
only then may floating tags (``latest``, ``v2.14-base``...) point at it. A CUDA
image verified without a GPU (CPU mode: no GPU on the host, an engine without
the NVIDIA runtime, ``--gpus none``) gets at most its immutable tag, marked
``-not-gpu-verified`` so that the registry's tag listing says it, and only when
the user passes ``--allow-cpu-verification``. A CPU-only image is vetted on a
CPU and is released as it always was.

The verify report (:class:`~imagesmith.model.verifyreport.VerifyReport`) says how it ran: the payload's ``mode`` block (mode, GPUs,
reason, GPUs as asked, how the GPU checks ended); reports written before it
existed are read from their environment (GPUs seen) and the ``gpu.devices`` check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from imagesmith.model.verifyreport import Emulation, Mode, Platform, Sharing, VerifyReport
from imagesmith.resources import payload_module

NOT_GPU_VERIFIED = "not GPU-verified"
CPU_VERIFIED_SUFFIX = "-not-gpu-verified"
ALLOW_FLAG = "--allow-cpu-verification"
GOOD = ("pass", "warn")
SHARED = "the GPU was not exclusive to the run"
UNWATCHED = "GPU exclusivity not measured"
WATCH_FIX = ("verify it where imagesmith runs beside the engine (a local engine, NVML on the host), so that the host "
             "watches the GPU for the whole run")


@dataclass(frozen=True)
class Evidence:
    """What a verify report says about GPUs."""

    ok: bool  # every required check passed
    mode: str  # gpu | cpu
    gpus: int
    reason: str
    devices: str | None  # GPUs as asked? (the mode's status = gpu.devices')
    gpu_checks: Mapping[str, int]  # status -> count of checks that need a GPU
    exclusive: bool | None = None  # the report's sharing.exclusive: None where not measured (older reports too)
    shared_with: str = ""  # 'GPU 0 shared with PID 4242 python3, 1.6 GiB' when not exclusive
    sharing_reason: str = ""  # why exclusive is what it is (the report's sharing.reason)
    emulated: str = ""  # 'linux/arm64 on a linux/amd64 host (qemu)' when the image ran under emulation
    emulated_platform: str = ""  # the image's platform then ('linux/arm64')
    platform: str = ""  # the image's platform as the verifier's engine read it ("": the report does not say)
    host: str = ""  # the engine's platform ("": the report does not say)

    @property
    def gpu_verified(self) -> bool:
        """Never under emulation: qemu runs no GPU kernels, so nothing it ran speaks for a GPU. Only on a GPU
        somebody watched for the whole run and found the run's alone (``exclusive`` true): not measured is no pass."""
        ran = self.gpu_checks.get("pass", 0) + self.gpu_checks.get("warn", 0) if self.gpu_checks else 1
        return (self.ok and self.mode == "gpu" and not self.emulated and self.gpus >= 1 and self.devices in GOOD
                and not self.gpu_checks.get("fail", 0) and ran >= 1 and self.exclusive is True)

    @property
    def unwatched(self) -> bool:
        """A GPU run whose checks all held but whose GPU nobody could watch for the whole run."""
        ran = self.gpu_checks.get("pass", 0) + self.gpu_checks.get("warn", 0) if self.gpu_checks else 1
        return self.mode == "gpu" and self.exclusive is None and not self.gpu_checks.get("fail", 0) and ran >= 1

    def describe(self) -> str:
        """One line: 'GPU-verified on 2 GPUs' or 'not GPU-verified: <why>'."""
        if self.gpu_verified:
            return f"GPU-verified on {self.gpus} GPU{'s' if self.gpus != 1 else ''}"
        return f"{NOT_GPU_VERIFIED}: {self._why()}"

    def short(self) -> str:
        """For table cells: 'GPU-verified on 1 GPU', 'not GPU-verified (CPU mode)', ..."""
        if self.gpu_verified:
            return self.describe()
        failed = self.gpu_checks.get("fail", 0)
        if self.exclusive is False and self.mode == "gpu" and not failed:
            return f"{NOT_GPU_VERIFIED} ({SHARED})"
        if self.unwatched and not self.emulated:
            return f"{NOT_GPU_VERIFIED} ({UNWATCHED})"
        if self.emulated:
            return f"{NOT_GPU_VERIFIED} (emulated {self.emulated_platform}, CPU mode)"
        return f"{NOT_GPU_VERIFIED} ({self._why() if self.mode == 'gpu' and failed else self.mode.upper() + ' mode'})"

    def _why(self) -> str:
        if self.emulated:
            return f"emulated: {self.emulated}, in CPU mode"
        failed = self.gpu_checks.get("fail", 0)
        if self.exclusive is False and self.mode == "gpu" and not failed:
            return f"{SHARED}: {self.shared_with}"
        if self.unwatched:
            return f"{UNWATCHED}" + (f": {self.sharing_reason}" if self.sharing_reason else "")
        if self.mode == "gpu" and failed:
            return f"{failed} GPU check{'s' if failed != 1 else ''} failed"
        reason = self.reason.removesuffix(f": {NOT_GPU_VERIFIED}")
        return reason or f"ran in {self.mode.upper()} mode"


STATUSES = ("pass", "warn", "fail", "skip", "inconclusive")  # inconclusive: a throughput check that measured a tenant's share


@dataclass(frozen=True)
class Verdict:
    """A verify report judged again from its checks (never from its own ``summary.ok``)."""

    ok: bool
    why: str  # "" when ok; else one line: which checks failed, or why the report cannot be judged


def verdict(report: VerifyReport, declared: Mapping[str, bool]) -> Verdict:
    """Judge ``report`` from its checks under the shipped policy: ``declared`` is the shipped check
    registry (check id -> optional, :func:`imagesmith.stages.verify.verify.declared_checks`); a check it does not
    declare optional is required, whatever the report's own ``optional`` flag or ``summary`` says.
    A report without checks is not a pass."""
    if not report.checks:
        return Verdict(False, "the report lists no checks")
    return _failed_verdict([c.id for c in report.checks if fails_target(c.status, declared.get(c.id, False))])


def predicate_verdict(predicate: Mapping[str, Any], declared: Mapping[str, bool]) -> Verdict:
    """:func:`verdict` of a verification predicate (the attestation's brief of a report, read from a registry: its
    ``checks`` are checked here, one by one)."""
    checks = predicate.get("checks")
    if not isinstance(checks, list) or not checks:
        return Verdict(False, "the report lists no checks")
    failed = []
    for i, c in enumerate(checks):
        cid = c.get("id") if isinstance(c, Mapping) else None
        if not isinstance(cid, str) or not cid:
            return Verdict(False, f"checks[{i}] is not a check (no id)")
        if c.get("status") not in STATUSES:
            return Verdict(False, f"checks[{i}] ({cid}): status {c.get('status')!r} is not one of {', '.join(STATUSES)}")
        if fails_target(str(c["status"]), declared.get(cid, False)):
            failed.append(cid)
    return _failed_verdict(failed)


def _failed_verdict(failed: list[str]) -> Verdict:
    if failed:
        return Verdict(False, f"required check{'s' if len(failed) != 1 else ''} failed: {', '.join(failed)}")
    return Verdict(True, "")


def fails_target(status: str, optional: bool) -> bool:
    """The one rule: a failed check fails its image unless it is optional."""
    return status == "fail" and not optional


def failed_required(report: VerifyReport) -> list[str]:
    """The ids of a verify report's required checks that failed (by its own optional flags), in run order."""
    return [c.id for c in report.checks if fails_target(c.status, c.optional)]


def predicate_failed(predicate: Mapping[str, Any]) -> list[str]:
    """:func:`failed_required` of a verification predicate (its checks read one by one)."""
    checks = [c for c in predicate.get("checks") or () if isinstance(c, Mapping)]
    return [str(c.get("id")) for c in checks if fails_target(str(c.get("status")), bool(c.get("optional")))]


def evidence(report: VerifyReport, declared: Mapping[str, bool] | None = None) -> Evidence:
    """How ``report`` says it ran; ``ok`` is :func:`verdict` under ``declared`` (the shipped check registry;
    None: the report's own optional flags), never the report's ``summary.ok``."""
    mode, seen = report.mode or Mode(), len(report.environment.gpus)
    devices = report.check("gpu.devices")
    sharing = report.sharing or Sharing(None)
    emulated = emulation_text(report.emulation)
    image, host = where_it_ran(report)
    return Evidence(
        ok=verdict(report, declared if declared is not None else _own_flags(report)).ok,
        mode=mode.mode or ("gpu" if seen else "cpu"),
        gpus=count(seen if mode.gpus is None else mode.gpus),
        reason=mode.reason or "",
        devices=mode.status or (devices.status if devices else None) or ("pass" if seen else None),
        gpu_checks={k: count(v) for k, v in mode.gpu_checks.items()},
        exclusive=sharing.exclusive,
        shared_with=describe_foreign([t.entry() for t in sharing.foreign]),
        sharing_reason=(sharing.reason or "")[:300],
        emulated=emulated, emulated_platform=str(report.emulation.image) if emulated and report.emulation else "",
        platform=image, host=host,
    )


def where_it_ran(report: VerifyReport) -> tuple[str, str]:
    """(the image's platform, the engine's) as a verify report says them: its ``platform`` block, else its
    ``emulation`` block (reports written before the first); ``""`` where it says nothing."""
    said, emu = report.platform or Platform(), report.emulation or Emulation()
    image, host = said.image or emu.image, said.host or emu.host
    return ((image or "")[:256], (host or "")[:256])


MAX_COUNT = 1 << 20  # no count a report holds (GPUs, checks) comes near


def count(value: Any) -> int:
    """A count from an untrusted report: a whole number from 0 to :data:`MAX_COUNT`; anything else (a string,
    NaN, a negative or fractional number, ``true``) is 0, so a report that misstates it earns nothing."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        return 0
    return value


def emulation_text(emu: Emulation | None) -> str:
    """A report's ``emulation`` block (verify sets it when the image's platform is not the host's) in words."""
    if emu is None or not emu.image or emu.host is None:
        return ""
    return f"{emu.image} on a {emu.host} host" + (f" ({emu.by})" if emu.by else "")


def describe_foreign(foreign: Any, limit: int = 3) -> str:
    """'GPU 0 shared with PID 4242 python3, 1.6 GiB; ...' from a report's sharing.foreign (untrusted: the payload's
    one wording, which checks every value's type)."""
    text: str = payload_module("sharing").describe(foreign, limit)
    return text


def sharing_line(report: VerifyReport) -> str:
    """One line for tables and the CLI: exclusive, not measured, or with whom the GPU was shared."""
    sharing = report.sharing
    if sharing is None:
        return ""
    if sharing.exclusive is True:
        return "GPUs exclusive to this run"
    if sharing.exclusive is not False:
        return UNWATCHED + (f" ({sharing.reason[:300]})" if sharing.reason else "")
    how = ("--allow-shared-gpu: throughput measured this tenant's share" if sharing.allowed
           else "throughput checks inconclusive")
    return f"not exclusive: {describe_foreign([t.entry() for t in sharing.foreign])} ({how}; not verified: no floating tag)"


def _own_flags(report: VerifyReport) -> dict[str, bool]:
    return {c.id: c.optional for c in report.checks}


@dataclass(frozen=True)
class Grant:
    """What a verified target may get in the registry."""

    release: bool  # tag and push at all
    floating: bool  # may floating tags point at it
    suffix: str  # appended to the immutable tag
    note: str  # plain words for release.json / release.md / tables ("" when nothing to say)


def grant(cuda_image: bool, ev: Evidence, allow_cpu: bool) -> Grant:
    """The policy table: image kind x how it was verified x --allow-cpu-verification."""
    if not ev.ok:
        return Grant(False, False, "", "verification failed")
    if cuda_image and ev.exclusive is False:
        return Grant(False, False, "", f"{ev.describe()}; not tagged: verify it again with the GPU to itself")
    if not cuda_image or ev.gpu_verified:
        return Grant(True, True, "", "")
    what = ev.describe()
    if allow_cpu:
        return Grant(True, False, CPU_VERIFIED_SUFFIX,
                     f"{what}; immutable tag only, marked {CPU_VERIFIED_SUFFIX}, no floating tags ({ALLOW_FLAG})")
    where = WATCH_FIX if ev.unwatched else "verify it on a GPU host"
    return Grant(False, False, "", f"{what}; not tagged: {where}, or pass {ALLOW_FLAG} to push "
                                   f"its immutable tag marked {CPU_VERIFIED_SUFFIX} (no floating tags)")


def how_verified(report: VerifyReport) -> str:
    """A table cell: 'GPU x2', 'CPU' (a CPU-only torch) or 'CPU: not GPU-verified' (a CUDA build)."""
    ev = evidence(report)
    cuda = report.environment.cuda
    if ev.emulated:
        return f"CPU, emulated {ev.emulated_platform}" + (f": {NOT_GPU_VERIFIED}" if cuda else "")
    if ev.mode == "gpu":
        return f"GPU x{ev.gpus}" + ("" if ev.gpu_verified or not ev.ok or not cuda else f": {NOT_GPU_VERIFIED}")
    return f"CPU: {NOT_GPU_VERIFIED}" if cuda else "CPU"


def marked_unverified(tag: str) -> bool:
    """A tag in the registry that was pushed for a CUDA image verified without a GPU."""
    return tag.endswith(CPU_VERIFIED_SUFFIX)
