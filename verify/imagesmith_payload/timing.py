"""Timing on GPUs with CUDA events: warm up, repeat, take the median."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence

from .stats import median


def event_times_ms(torch: Any, device: Any, fn: Callable[[int], Any], warmup: int,
                   repeats: int) -> List[float]:
    """Milliseconds of each of `repeats` calls fn(i) on `device`, after `warmup` calls."""
    with torch.cuda.device(device):
        for i in range(warmup):
            fn(i)
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                 for _ in range(repeats)]
        for i, (start, end) in enumerate(pairs):
            start.record()
            fn(warmup + i)
            end.record()
        torch.cuda.synchronize(device)
    return [start.elapsed_time(end) for start, end in pairs]


def concurrent_event_times_ms(torch: Any, devices: Sequence[Any],
                              make_fn: Callable[[Any], Callable[[int], Any]],
                              warmup: int, repeats: int) -> Dict[int, List[float]]:
    """The same timing on every device at once (launches interleaved, queues independent)."""
    fns = {d.index: make_fn(d) for d in devices}
    pairs = {d.index: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                       for _ in range(repeats)] for d in devices}
    for i in range(warmup + repeats):
        for d in devices:
            with torch.cuda.device(d):
                _timed_call(fns[d.index], pairs[d.index], i, warmup)
    for d in devices:
        torch.cuda.synchronize(d)
    return {idx: [s.elapsed_time(e) for s, e in ps] for idx, ps in pairs.items()}


def _timed_call(fn: Callable[[int], Any], pairs: List[Any], i: int, warmup: int) -> None:
    if i < warmup:
        fn(i)
        return
    start, end = pairs[i - warmup]
    start.record()
    fn(i)
    end.record()


def median_ms(times: Sequence[float]) -> float:
    return median(list(times))
