"""What the report says about where it ran (each fact guarded; none may raise)."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any, Callable, Dict, List, Optional

from .context import Context
from .judge import cudnn_version_string, nccl_version_string
from .libs import cuda_runtime_version
from .nvml import driver_version
from .parsers import os_tag, parse_os_release

DEFAULT_PACKAGES = ("torch", "torchvision", "torchaudio", "triton", "numpy", "transformers",
                    "tokenizers", "opencv-python-headless", "opencv-python")


def _guard(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:
        return None


def os_name() -> Optional[str]:
    try:
        with open("/etc/os-release", encoding="utf-8") as fh:
            return os_tag(parse_os_release(fh.read()))
    except OSError:
        return None


def user() -> Dict[str, Any]:
    uid = os.getuid()
    try:
        import pwd
        name: Optional[str] = pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        name = None
    return {"uid": uid, "name": name}


def package_version(name: str) -> Optional[str]:
    try:
        from importlib import metadata
        return metadata.version(name)
    except Exception:
        return None


def torch_cudnn(ctx: Context) -> Optional[str]:
    if not ctx.try_torch() or not ctx.torch.backends.cudnn.is_available():
        return None
    code = ctx.torch.backends.cudnn.version()
    return cudnn_version_string(int(code)) if code else None


def torch_nccl(ctx: Context) -> Optional[str]:
    if not ctx.try_torch() or not ctx.torch.version.cuda:
        return None
    return nccl_version_string(ctx.torch.cuda.nccl.version())


def gpus(ctx: Context) -> List[Dict[str, Any]]:
    out = []
    for i in range(ctx.gpu_count):
        props = ctx.torch.cuda.get_device_properties(i)
        out.append({"index": i, "name": props.name, "capability": f"{props.major}.{props.minor}",
                    "memory_gib": round(props.total_memory / 2**30, 1),
                    "multiprocessors": props.multi_processor_count, "uuid": nvml_uuid(props)})
    return out


def nvml_uuid(props: Any) -> Optional[str]:
    """The GPU's UUID as NVML and the DCGM exporter write it ('GPU-...'): it names the card whatever the numbering."""
    uuid = getattr(props, "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def collect(ctx: Context) -> Dict[str, Any]:
    torch_ok = ctx.try_torch()
    names = dict.fromkeys(list(DEFAULT_PACKAGES) + list(ctx.config.expected.packages))
    packages = {n: package_version(n) for n in names}
    return {
        "python": platform.python_version(),
        "python_executable": sys.executable,  # which python3 ran: the one the PATH (or an ENTRYPOINT) chose
        "machine": platform.machine(),  # x86_64, aarch64 (under qemu-user too: the host's report says emulated)
        "os": _guard(os_name),
        "torch": ctx.torch.__version__ if torch_ok else None,
        "torch_error": None if torch_ok else ctx.torch_error,
        "torch_warnings": list(ctx.torch_warnings),
        "cuda": _guard(lambda: ctx.torch.version.cuda) if torch_ok else None,
        "cuda_runtime": _guard(lambda: (cuda_runtime_version() or (None,))[0]),
        "cudnn": _guard(lambda: torch_cudnn(ctx)),
        "nccl": _guard(lambda: torch_nccl(ctx)),
        "driver": _guard(driver_version),
        "user": _guard(user),
        "gpus": _guard(lambda: gpus(ctx)) or [],
        "packages": {n: v for n, v in packages.items() if v is not None},
        "hostname": platform.node(),
    }
