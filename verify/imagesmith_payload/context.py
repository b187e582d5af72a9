"""What every check receives: the config, baselines, torch (lazily) and GPUs."""

from __future__ import annotations

import importlib
import warnings
from typing import Any, Dict, List, Optional

from .baselines import Baselines, load_baselines, threshold_for
from .config import Config
from .judge import Threshold


def import_warnings(caught: List[warnings.WarningMessage]) -> List[str]:
    """One line per distinct warning (category: first line of the message)."""
    lines = [f"{w.category.__name__}: {str(w.message).strip().splitlines()[0] if str(w.message).strip() else ''}"
             for w in caught]
    return list(dict.fromkeys(line[:300] for line in lines))


class TorchUnavailable(RuntimeError):
    """torch could not be imported; versions.torch says why."""


class Context:
    def __init__(self, config: Config, baselines: Optional[Baselines] = None) -> None:
        self.config = config
        self.baselines = load_baselines() if baselines is None else baselines
        self.cache: Dict[str, Any] = {}
        self._torch: Any = None
        self.torch_error: Optional[str] = None
        self.torch_warnings: List[str] = []  # what `import torch` warned about (e.g. no NumPy)
        self._gpu_count: Optional[int] = None

    # ----------------------------------------------------------------- torch
    def try_torch(self) -> bool:
        """Import torch once; remember why not."""
        if self._torch is None and self.torch_error is None:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    self._torch = importlib.import_module("torch")
                except Exception as exc:  # ImportError, OSError from a missing .so, ...
                    self.torch_error = f"{type(exc).__name__}: {exc}"
            self.torch_warnings = import_warnings(caught)
        return self._torch is not None

    @property
    def torch(self) -> Any:
        if not self.try_torch():
            raise TorchUnavailable(self.torch_error or "torch is not importable")
        return self._torch

    # ------------------------------------------------------------------ GPUs
    @property
    def gpu_count(self) -> int:
        if self._gpu_count is None:
            self._gpu_count = self._count_gpus()
        return self._gpu_count

    def _count_gpus(self) -> int:
        if self.config.gpus == "none" or not self.try_torch():  # --gpus none: CPU mode as asked
            return 0
        try:
            return int(self.torch.cuda.device_count()) if self.torch.cuda.is_available() else 0
        except Exception:
            return 0

    def devices(self) -> List[Any]:
        """torch.device for every visible GPU, or [cpu] in CPU mode."""
        torch = self.torch
        if self.gpu_count == 0:
            return [torch.device("cpu")]
        return [torch.device("cuda", i) for i in range(self.gpu_count)]

    @property
    def device(self) -> Any:
        return self.devices()[0]

    @property
    def gpu_name(self) -> Optional[str]:
        return self.torch.cuda.get_device_name(0) if self.gpu_count else None

    def threshold(self, check_id: str) -> Optional[Threshold]:
        return threshold_for(self.baselines, self.gpu_name, check_id, self.config.thresholds)

    def synchronize(self) -> None:
        if self.gpu_count:
            for i in range(self.gpu_count):
                self.torch.cuda.synchronize(i)

    def release_memory(self) -> None:
        """Before a check that starts processes on the same GPUs."""
        import gc
        gc.collect()
        if self.gpu_count:
            self.torch.cuda.empty_cache()
