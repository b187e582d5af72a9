"""Pure judging: statuses, version matching, thresholds and tolerances.

Nothing here imports torch or touches the system, so the host side and the
unit tests can use it anywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence, Tuple

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"
# A throughput check on a GPU another process shared: it measured the share, not the GPU.
INCONCLUSIVE = "inconclusive"
STATUSES = (PASS, WARN, FAIL, SKIP, INCONCLUSIVE)
_SEVERITY = {SKIP: 0, PASS: 1, INCONCLUSIVE: 2, WARN: 3, FAIL: 4}

# Relative Frobenius error ||out - ref|| / ||ref|| against a float64 product
# of the same (already rounded) inputs, K = 1024.  Typical values on an H200:
# fp32 ~3e-7, tf32 ~3e-4, fp16 ~3e-4, bf16 ~2e-3 (see bench/README.md).
MATMUL_TOLERANCE = {"fp32": 1e-5, "tf32": 2e-3, "fp16": 2e-3, "bf16": 1e-2}
# Attention outputs against the math backend in float64.
SDPA_TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3}

DEFAULT_FAIL_FRACTION = 0.75  # like DCGM's diagnostics
DEFAULT_WARN_FRACTION = 0.9

# nvmlClocksEventReasons bits (nvml.h); the 'serious' ones mean the GPU was
# slowed down by heat or by the board, not merely capped by power policy.
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
SERIOUS_THROTTLE = frozenset({"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                              "hw_power_brake_slowdown"})


def worst(statuses: Iterable[str]) -> str:
    """The most severe status of several (skip < pass < warn < fail)."""
    return max(statuses, key=lambda s: _SEVERITY[s], default=SKIP)


# --------------------------------------------------------------------- versions
def version_components(version: str) -> Tuple[str, ...]:
    """'2.14.1+cu130' -> ('2', '14', '1'): local part dropped, '04' == '4'."""
    public = str(version).strip().split("+", 1)[0]
    parts = (p.strip() for p in public.split("."))
    return tuple(str(int(p)) if p.isdigit() else p for p in parts if p)


def version_matches(expected: str, actual: str) -> bool:
    """Prefix match on dotted components: '9' matches '9.24.0', '2.1' not '2.14'."""
    exp, act = version_components(expected), version_components(actual)
    return bool(exp) and act[: len(exp)] == exp


def version_tuple(version: str) -> Tuple[int, ...]:
    """Numeric components for ordering ('580.65.06' -> (580, 65, 6))."""
    out = []
    for part in version_components(version):
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def cudnn_version_string(code: int) -> str:
    """torch.backends.cudnn.version(): 91002 -> '9.10.2', 8907 -> '8.9.7'."""
    if code >= 90000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def nccl_version_string(code: object) -> str:
    """ncclGetVersion / torch.cuda.nccl.version(): (2,27,3) or 22703 -> '2.27.3'."""
    if isinstance(code, (tuple, list)):
        return ".".join(str(int(c)) for c in code)
    value = int(code)  # type: ignore[call-overload]
    if value >= 20900:
        return f"{value // 10000}.{value % 10000 // 100}.{value % 100}"
    return f"{value // 1000}.{value % 1000 // 100}.{value % 100}"


def cuda_version_string(code: int) -> str:
    """cudaRuntimeGetVersion / NVML CUDA driver version: 13000 -> '13.0'."""
    return f"{code // 1000}.{code % 1000 // 10}"


def judge_driver(actual: str, toolkit_driver: str, min_driver: Optional[str]) -> Tuple[str, str]:
    """>= the toolkit's driver passes, >= the minor-compat minimum warns, else fail."""
    have = version_tuple(actual)
    if have >= version_tuple(toolkit_driver):
        return PASS, f"driver {actual} >= {toolkit_driver} (the toolkit's driver)"
    if min_driver and have >= version_tuple(min_driver):
        return WARN, (f"driver {actual} < {toolkit_driver} but >= {min_driver}: runs under "
                      "CUDA minor-version compatibility (no PTX JIT of newer code); "
                      f"upgrade the host driver to >= {toolkit_driver}")
    floor = min_driver or toolkit_driver
    return FAIL, (f"driver {actual} is older than {floor}: CUDA calls will fail with "
                  f"'driver too old'; upgrade the host driver to >= {toolkit_driver}")


@dataclass(frozen=True)
class CudaRelease:
    """A CUDA toolkit release with its runtime (cudart) version and driver (from the host)."""

    release: str  # "12.8.1"
    cudart: str  # "12.8.90"
    driver: str  # "570.124.06"
    min_driver: Optional[str] = None

    @property
    def label(self) -> str:
        """'12.8.1' -> 'CUDA 12.8 Update 1', '12.8.0' -> 'CUDA 12.8 GA'."""
        parts = version_tuple(self.release) + (0, 0, 0)
        return f"CUDA {parts[0]}.{parts[1]} " + (f"Update {parts[2]}" if parts[2] else "GA")


def runtime_release(cudart: str, releases: Sequence[CudaRelease]) -> Tuple[Optional[CudaRelease], bool]:
    """The toolkit release a measured CUDA runtime version belongs to, and whether
    the match is exact.  Exact: the earliest release shipping that cudart (later
    updates may ship it unchanged, and need no newer driver).  Otherwise, within
    the same CUDA minor, the first release of the newest older cudart (a runtime
    the knowledge base does not list needs at least that release's driver)."""
    have = version_tuple(cudart)
    by_release = sorted(releases, key=lambda r: version_tuple(r.release))
    exact = [r for r in by_release if version_tuple(r.cudart) == have]
    if exact:
        return exact[0], True
    minor = [r for r in by_release if version_tuple(r.cudart)[:2] == have[:2]]
    older = [r for r in minor if version_tuple(r.cudart) <= have]
    if not older:
        return (minor[0] if minor else None), False
    newest = max(version_tuple(r.cudart) for r in older)
    return next(r for r in older if version_tuple(r.cudart) == newest), False


def judge_driver_for_runtime(actual: str, cudart: str, source: str,
                             releases: Sequence[CudaRelease]) -> Optional[Tuple[str, str]]:
    """The driver against the release of the image's CUDA runtime; None when unknown."""
    found, exact = runtime_release(cudart, releases)
    if found is None:
        return None
    status, detail = judge_driver(actual, found.driver, found.min_driver)
    how = "is" if exact else f"is not in the knowledge base; judged as {found.cudart} of"
    return status, f"CUDA runtime {cudart} ({source}) {how} {found.label}: {detail}"


def judge_driver_cuda(driver_cuda: str, toolkit_cuda: str) -> Tuple[str, str]:
    """Without a knowledge base: the driver's CUDA version against torch's."""
    have, need = version_tuple(driver_cuda)[:2], version_tuple(toolkit_cuda)[:2]
    if have >= need:
        return PASS, f"driver supports CUDA {driver_cuda} >= torch's CUDA {toolkit_cuda}"
    if have[:1] == need[:1]:
        return WARN, (f"driver supports CUDA {driver_cuda} < torch's CUDA {toolkit_cuda}: "
                      "minor-version compatibility only (no PTX JIT of newer code)")
    return FAIL, (f"driver supports CUDA {driver_cuda} only, torch needs CUDA {toolkit_cuda}: "
                  "upgrade the host driver")


def arch_support(capability: Tuple[int, int], arch_list: Sequence[str]) -> Tuple[str, str]:
    """Is a GPU of this compute capability covered by torch.cuda.get_arch_list()?"""
    major, minor = capability
    sm = f"sm_{major}{minor}"
    listed = f"[{', '.join(arch_list)}]"
    if sm in arch_list or f"{sm}a" in arch_list:
        return PASS, f"{sm} in torch arch list {listed}"
    sass = [a for a in arch_list if _arch_num(a, "sm_") and _same_major_lower(a, major, minor)]
    if sass:
        return PASS, f"{sm} runs {sass[-1]} machine code (same major) from {listed}"
    ptx = [a for a in arch_list if (_arch_num(a, "compute_") or (99, 9)) <= (major, minor)]
    if ptx:
        return WARN, (f"{sm} not in {listed}: only PTX {ptx[-1]} is JIT-compiled at start "
                      "(slow first launch); use a torch build that lists " + sm)
    return FAIL, (f"GPU {sm} not in torch arch list {listed}: \"no kernel image is available "
                  f"for execution on the device\" will occur; use a torch build for this GPU")


def _arch_num(arch: str, prefix: str) -> Optional[Tuple[int, int]]:
    if not arch.startswith(prefix):
        return None
    digits = "".join(ch for ch in arch[len(prefix):] if ch.isdigit())
    if len(digits) < 2:
        return None
    return int(digits[:-1]), int(digits[-1])


def _same_major_lower(arch: str, major: int, minor: int) -> bool:
    num = _arch_num(arch, "sm_")
    return num is not None and not arch.endswith("a") and num[0] == major and num[1] <= minor


# ------------------------------------------------------------------- thresholds
@dataclass(frozen=True)
class Threshold:
    """A measured reference and the fractions of it that warn and fail."""

    baseline: float
    fail_fraction: float = DEFAULT_FAIL_FRACTION
    warn_fraction: float = DEFAULT_WARN_FRACTION
    unit: str = ""
    source: str = ""

    @property
    def fail_below(self) -> float:
        return self.baseline * self.fail_fraction

    @property
    def warn_below(self) -> float:
        return self.baseline * self.warn_fraction


@dataclass(frozen=True)
class Verdict:
    status: str
    threshold: Optional[float]
    baseline: Optional[float]
    percent_of_baseline: Optional[float]
    detail: str


def judge_throughput(value: float, thr: Optional[Threshold], what: str = "") -> Verdict:
    """Higher is better: fail below fail_fraction x baseline, warn below warn_fraction x."""
    if not _finite(value) or value <= 0:
        return Verdict(FAIL, None, None, None, f"{what} measured a non-positive or non-finite rate")
    if thr is None:
        return Verdict(PASS, None, None, None, f"{what}: no baseline for this GPU; recorded only")
    pct = round(100.0 * value / thr.baseline, 1)
    where = f"{pct}% of baseline {thr.baseline:g} {thr.unit}".rstrip()
    if value < thr.fail_below:
        return Verdict(FAIL, thr.fail_below, thr.baseline, pct,
                       f"{what} {where}, below the fail line {thr.fail_fraction:g}x")
    status = WARN if value < thr.warn_below else PASS
    note = f", below the warn line {thr.warn_fraction:g}x" if status == WARN else ""
    return Verdict(status, thr.fail_below, thr.baseline, pct, f"{what} {where}{note}")


def judge_at_most(value: float, limit: float) -> str:
    """Lower is better (errors): pass when finite and <= limit."""
    return PASS if _finite(value) and value <= limit else FAIL


def loss_fell(losses: Sequence[float], factor: float = 0.7, window: int = 3) -> Tuple[bool, str]:
    """All finite, and the mean of the last `window` < factor x the first `window`."""
    if not losses or not all(_finite(x) for x in losses):
        return False, "non-finite loss (NaN/Inf)"
    head = sum(losses[:window]) / len(losses[:window])
    tail = sum(losses[-window:]) / len(losses[-window:])
    ok = tail < factor * head
    return ok, f"loss {head:.4g} -> {tail:.4g} over {len(losses)} steps"


def judge_contention(solo: float, per_process: Sequence[float],
                     aggregate_min: float = 0.85, each_min: float = 0.7) -> Tuple[str, str]:
    """N processes on one GPU: aggregate >= 0.85x solo, each >= 0.7/N x solo."""
    n = len(per_process)
    total = sum(per_process)
    ratio = total / solo if solo > 0 else 0.0
    slowest = min(per_process) / solo if per_process and solo > 0 else 0.0
    detail = (f"{n} processes: aggregate {ratio:.2f}x solo (>= {aggregate_min}), "
              f"slowest {slowest:.3f}x (>= {each_min / max(n, 1):.3f})")
    ok = ratio >= aggregate_min and slowest >= each_min / max(n, 1)
    return (PASS if ok else FAIL), detail


def decode_throttle_reasons(mask: int) -> Tuple[str, ...]:
    """NVML clocks-event bitmask -> names."""
    return tuple(name for bit, name in sorted(THROTTLE_REASONS.items()) if mask & bit)


def relative_error(sq_err: float, sq_ref: float) -> float:
    """||out-ref|| / ||ref|| from the two squared norms."""
    if sq_ref <= 0:
        return math.inf
    return math.sqrt(sq_err / sq_ref)


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
