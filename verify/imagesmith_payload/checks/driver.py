"""The host's NVIDIA driver against what the image's CUDA needs."""

from __future__ import annotations

from typing import Optional

from ..context import Context
from ..judge import judge_driver, judge_driver_cuda
from ..libs import torch_build
from ..nvml import driver_version, open_nvml
from ..registry import check
from ..results import Result, outcome, skipped


@check("driver", "NVIDIA driver new enough for the image's CUDA", needs="nothing")
def driver(ctx: Context) -> Result:
    actual = driver_version()
    if actual is None:
        return skipped("no NVIDIA driver visible (no libnvidia-ml.so.1, no /proc/driver/nvidia)")
    cfg = ctx.config
    if cfg.toolkit_driver:
        status, detail = judge_driver(actual, cfg.toolkit_driver, cfg.min_driver)
        return outcome(status, detail, actual)
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
