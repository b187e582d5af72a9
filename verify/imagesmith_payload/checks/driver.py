"""The host's NVIDIA driver against what the image's CUDA needs.

The image's CUDA runtime is measured (the nvidia-cuda-runtime wheel's version,
e.g. 12.8.90), mapped to the toolkit release that ships it (12.8 Update 1) and
judged against that release's driver from the knowledge base (570.124.06):
pass at or above it, warn under minor-version compatibility, fail below that.
Without the release table (a bare payload run) the toolkit driver of the CUDA
minor, or else the driver's CUDA version against torch's, is used.
"""

from __future__ import annotations

from typing import Optional

from ..context import Context
from ..judge import judge_driver, judge_driver_cuda, judge_driver_for_runtime
from ..libs import cuda_runtime_version, torch_build
from ..nvml import driver_version, open_nvml
from ..registry import check
from ..results import Result, outcome, skipped


@check("driver", "NVIDIA driver new enough for the image's CUDA", needs="nothing")
def driver(ctx: Context) -> Result:
    actual = driver_version()
    if actual is None:
        return skipped("no NVIDIA driver visible (no libnvidia-ml.so.1, no /proc/driver/nvidia)")
    cfg = ctx.config
    runtime = cuda_runtime_version() if cfg.cuda_releases else None
    verdict = runtime and judge_driver_for_runtime(actual, runtime[0], runtime[1], cfg.cuda_releases)
    if verdict:
        return outcome(verdict[0], verdict[1], actual)
    if cfg.toolkit_driver:
        status, detail = judge_driver(actual, cfg.toolkit_driver, cfg.min_driver)
        why = (f"CUDA runtime {runtime[0]} not in the knowledge base" if runtime
               else "CUDA runtime version not measured")
        return outcome(status, f"{why}; against the newest toolkit of the image's CUDA: {detail}", actual)
    return _against_torch_cuda(actual)


def _against_torch_cuda(actual: str) -> Result:
    """No knowledge-base figures given: compare the driver's CUDA with torch's."""
    toolkit = torch_build().cuda
    driver_cuda = _driver_cuda()
    if not toolkit or not driver_cuda:
        return skipped(f"driver {actual}; no toolkit driver given and no CUDA version to compare",
                       actual)
    status, detail = judge_driver_cuda(driver_cuda, toolkit)
    return outcome(status, f"driver {actual}: {detail}", actual)


def _driver_cuda() -> Optional[str]:
    nvml = open_nvml()
    try:
        return nvml.cuda_driver_version() if nvml else None
    except OSError:
        return None
