"""Every check module; importing this package registers them, in run order."""
# ruff: noqa: I001  (the import order is the checks' run order)

from . import (  # noqa: F401
    versions,
    libs,
    driver,
    devices,
    topo,
    matmul,
    amp,
    sdpa,
    nccl,
    layers,
    security,
    gemm,
    bandwidth,
    ddp,
    compile,
    leak,
    contention,
    burn,
)
