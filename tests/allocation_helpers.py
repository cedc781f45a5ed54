"""Counting what a call allocates, for tests that say "refused before anything is allocated".

Time is no measure of that (a busy machine makes any call slow, issue 34): these tests count bytes
instead. :func:`allocations` records every tensor a torch call returns while it is active (a torch
function mode sees ``torch.empty`` in ``nn.Linear``, ``torch.zeros`` of a KV cache, every op's output)
and the peak of Python's own memory (tracemalloc: lists, strings, bytes read from a file).
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode


@dataclass
class Allocated:
    """What a block allocated: ``tensor_bytes`` summed over every tensor torch calls returned (views
    included), the largest single one (``largest``), and ``python_peak`` bytes of Python memory."""

    tensor_bytes: int = 0
    largest: int = 0
    python_peak: int = 0

    def total(self) -> int:
        """Tensor bytes plus Python's peak: the bound a refusal must stay under."""
        return self.tensor_bytes + self.python_peak


class _TensorBytes(TorchFunctionMode):
    """Adds the size of each tensor a torch function returns to ``counted``."""

    def __init__(self, counted: Allocated) -> None:
        super().__init__()
        self.counted = counted

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for value in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(value, torch.Tensor):
                size = value.numel() * value.element_size()
                self.counted.tensor_bytes += size
                self.counted.largest = max(self.counted.largest, size)
        return result


@contextmanager
def allocations() -> Iterator[Allocated]:
    """``with allocations() as seen: ...`` then ``seen.total()``: the bytes the block allocated."""
    counted = Allocated()
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    try:
        with _TensorBytes(counted):
            yield counted
    finally:
        counted.python_peak = max(0, tracemalloc.get_traced_memory()[1] - base)
        if started:
            tracemalloc.stop()
