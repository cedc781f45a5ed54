"""Timing helpers: paired interleaved runs (a slow minute on a shared machine slows both sides of a pair
alike), medians and ratios, peak memory."""

import contextlib
import ctypes
import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from ..io.checks import check_int
from ..runtime.kernel_choice import SPEED_FLAGS, cpu_features, cpu_name

T = TypeVar("T")


def cpu_line() -> str:
    """The CPU as published figures name it, model name and speed flags: ``Intel(R) Xeon(R) Processor (avx2,
    avx512f, avx512_bf16, amx_bf16, amx_tile)``."""
    return f"{cpu_name()} ({', '.join(cpu_features()) or 'none of ' + ', '.join(SPEED_FLAGS)})"


def sync(device: torch.device | str) -> None:
    """Wait for queued GPU work (a no-op on CPU), so a timer sees the work it started."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def time_call(fn: Callable[[], object], device: torch.device | str = "cpu") -> float:
    """Wall seconds of one call of ``fn``, queued GPU work included."""
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def with_setting(setter: Callable[[Any], Any], value: Any, fn: Callable[[], T]) -> Callable[[], T]:
    """``fn`` run with ``setter(value)`` in force; ``setter`` returns the previous value, restored after."""

    def run() -> T:
        previous = setter(value)
        try:
            return fn()
        finally:
            setter(previous)

    return run


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
    """Time no-argument functions (name -> one unit of work) in alternation, the order reversed every other
    round, after ``warmup`` untimed calls of each; a round's value is the median of ``calls`` calls.
    Returns name -> :class:`Timing`."""
    for name, value, low in (("rounds", rounds, 1), ("calls", calls, 1), ("warmup", warmup, 0)):
        check_int(name, value, low)
    names = list(contenders)
    for name in names:
        for _ in range(warmup):
            contenders[name]()
    sync(device)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            seconds[name].append(statistics.median(time_call(contenders[name], device) for _ in range(calls)))
    return {name: Timing(name, s) for name, s in seconds.items()}


def paired_ratio(numerator: Timing, denominator: Timing) -> float:
    """Median over rounds of numerator/denominator seconds (> 1: the denominator is faster)."""
    return statistics.median(n / d for n, d in zip(numerator.rounds, denominator.rounds))


def compile_gain(runs: dict[str, Callable[[], object]], units: int, *, rounds: int, calls: int,
                 device: torch.device | str = "cpu", **facts: Any) -> dict[str, Any]:
    """``runs["eager"]`` against ``runs["compiled"]`` (``units`` tokens a call): ``facts`` with first_call_s (the
    first compiled call, compiling included), tokens_per_s of each, gain (eager / compiled seconds, paired) and
    seconds (each round's)."""
    first_call = time_call(runs["compiled"], device)
    timings = paired(runs, rounds=rounds, calls=calls, device=device)
    return {**facts, "first_call_s": first_call, "tokens_per_s": {n: units / t.median for n, t in timings.items()},
            "gain": paired_ratio(timings["eager"], timings["compiled"]),
            "seconds": {n: t.rounds for n, t in timings.items()}}


def peak_memory(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """Peak bytes of tensor memory allocated *during* ``fn()`` above what was live before it (CUDA: the
    allocator's high-water mark; CPU: the profiler's memory events replayed, its C output discarded)."""
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
    return max(itertools.accumulate((nbytes for _, nbytes in events), initial=0))


@contextlib.contextmanager
def quiet_c_output() -> Iterator[None]:
    """Send what C code writes to file descriptors 1 and 2 inside the block to the null device (buffers
    flushed on the way in and out, so nothing leaks across)."""
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
    sys.stdout.flush()
    sys.stderr.flush()
    with contextlib.suppress(OSError, AttributeError, TypeError):  # no C library reachable so (Windows)
        ctypes.CDLL(None).fflush(None)

