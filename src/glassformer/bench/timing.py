"""Timing helpers: paired interleaved runs, medians and ratios, peak memory.

On a shared machine absolute times drift with the load, so every comparison runs its contenders in
alternation (A B A B ..., the order flipped every round) and reports each one's median and the
median of the per-round ratios: a slow minute slows both sides of a pair alike.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from ..errors import check_int

CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")  # the flags that decide kernel speed


def cpu_line() -> str:
    """The CPU as every published figure names it: ``lscpu``'s model name and its speed flags
    (``Intel(R) Xeon(R) Processor (avx2, avx512f, avx512_bf16, amx_bf16, amx_tile)``; /proc/cpuinfo)."""
    model, flags = platform.processor() or platform.machine(), []
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            lines = info.read().splitlines()
        model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), model)
        flags = next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), [])
    except OSError:
        pass
    return f"{model} ({', '.join(f for f in CPU_FLAGS if f in flags) or 'none of ' + ', '.join(CPU_FLAGS)})"


def sync(device: torch.device | str) -> None:
    """Wait for queued GPU work (a no-op on CPU), so a timer sees the work it started."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


@dataclass
class Timing:
    """Seconds per call of one contender: one median per round, in round order."""

    name: str
    rounds: list[float]

    @property
    def median(self) -> float:
        """The median of the rounds' seconds per call."""
        return statistics.median(self.rounds)

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median (0.1 = the middle half lies within 10%)."""
        if len(self.rounds) < 4:
            return (max(self.rounds) - min(self.rounds)) / self.median
        q1, _, q3 = statistics.quantiles(self.rounds, n=4)
        return (q3 - q1) / self.median


def paired(contenders: dict[str, Callable[[], object]], *, rounds: int = 5, calls: int = 3, warmup: int = 1,
           device: torch.device | str = "cpu") -> dict[str, Timing]:
    """Time several no-argument functions in alternation.

    Args:
        contenders: name -> function doing one unit of work (a training step, a generation...).
        rounds: how many times each contender is timed; the order is reversed every other round.
        calls: calls per timing (their median is the round's value).
        warmup: untimed calls of each contender first (allocator, caches, lazy init).
        device: synchronised around each call when it is a GPU.
    Returns:
        name -> :class:`Timing` (seconds per call, one value per round).
    """
    check_int("rounds", rounds, 1)
    check_int("calls", calls, 1)
    check_int("warmup", warmup, 0)
    names = list(contenders)
    for name in names:
        for _ in range(warmup):
            contenders[name]()
    sync(device)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            per_call = []
            for _ in range(calls):
                start = time.perf_counter()
                contenders[name]()
                sync(device)
                per_call.append(time.perf_counter() - start)
            seconds[name].append(statistics.median(per_call))
    return {name: Timing(name, s) for name, s in seconds.items()}


def paired_ratio(numerator: Timing, denominator: Timing) -> float:
    """Median over rounds of numerator/denominator seconds (> 1: the denominator is faster)."""
    return statistics.median(n / d for n, d in zip(numerator.rounds, denominator.rounds))


def peak_memory(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """Peak bytes of tensor memory allocated *during* ``fn()`` above what was live before it.

    On CUDA this is the allocator's high-water mark; on CPU it replays the profiler's allocation
    and free events in time order. Memory held before the call (weights, optimiser state) is not
    included: add it yourself. What the profiler's C code prints meanwhile (on some Intel CPUs a
    dozen ``USDT ... profiler_start`` lines) is discarded (:func:`quiet_c_output`).
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    from torch.profiler import ProfilerActivity, profile

    with quiet_c_output():
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn()
        events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


@contextlib.contextmanager
def quiet_c_output() -> Iterator[None]:
    """Send whatever is written to file descriptors 1 and 2 inside the block to the null device.

    Python's ``print`` can be redirected from Python; C and C++ code (the profiler's tracing hooks)
    writes to the descriptors themselves, so those are pointed at ``os.devnull`` and restored after.
    Python's and C's buffers are flushed on the way in (what came before still shows) and on the way
    out (nothing written inside comes out later).
    """
    _flush_streams()
    saved = os.dup(1), os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        _flush_streams()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


def _flush_streams() -> None:
    """Write out what Python's ``sys.stdout``/``sys.stderr`` and the C library's streams hold buffered
    (C's by ``fflush(NULL)``, where the C library can be reached)."""
    sys.stdout.flush()
    sys.stderr.flush()
    with contextlib.suppress(OSError, AttributeError, TypeError):  # no C library reachable so (Windows)
        ctypes.CDLL(None).fflush(None)


def tensor_bytes(tensors: object) -> int:
    """Total bytes of the tensors in a (nested) list/tuple/dict, e.g. parameters plus optimiser state."""
    if isinstance(tensors, torch.Tensor):
        return tensors.numel() * tensors.element_size()
    if isinstance(tensors, dict):
        return sum(tensor_bytes(v) for v in tensors.values())
    if isinstance(tensors, (list, tuple)):
        return sum(tensor_bytes(v) for v in tensors)
    return 0
