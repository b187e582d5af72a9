"""The CPU leak meter (checks/leak.py live_tensor_bytes) against stand-in tensors: no torch needed."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "verify"))

from imagesmith_payload.checks.leak import live_tensor_bytes


class Storage:
    def __init__(self, ptr: int, nbytes: int) -> None:
        self.ptr, self.size = ptr, nbytes

    def data_ptr(self) -> int:
        return self.ptr

    def nbytes(self) -> int:
        return self.size


class Tensor:
    device = SimpleNamespace(type="cpu")

    def __init__(self, storage: Storage | None, device: str = "cpu") -> None:
        self.storage, self.device = storage, SimpleNamespace(type=device)

    def untyped_storage(self) -> Storage:
        if self.storage is None:
            raise RuntimeError("Cannot access data pointer of Tensor (e.g. FakeTensor, FunctionalTensor)")
        return self.storage


class FakeTensor(Tensor):
    pass


def test_distinct_storages_are_counted_once_and_fake_or_device_tensors_not_at_all() -> None:
    shared = Storage(0x1000, 4096)
    kept: list[Any] = [Tensor(shared), Tensor(shared), Tensor(Storage(0x2000, 100)),  # a view shares its storage
                       FakeTensor(None),  # what a failed torch.compile leaves in the heap: no data pointer
                       Tensor(Storage(0x3000, 7), device="cuda")]
    torch = SimpleNamespace(Tensor=Tensor)
    assert live_tensor_bytes(torch) == 4096 + 100
    kept.append(Tensor(Storage(0x4000, 1 << 20)))
    assert live_tensor_bytes(torch) == 4096 + 100 + (1 << 20)
