"""Speed choices made by measurement on the machine at hand, once, and remembered.

A kernel trick that wins on one CPU can lose on another (the few-row route of :mod:`.linear` reads
weights ~1.5x faster than ``F.linear`` on an AMD Zen 3, and at half the speed on an Intel Xeon with
AMX). So such a choice is never assumed: the first time a case is met, both ways are timed in a
short interleaved measurement, and the faster one is used from then on. A way wins only if it is
clearly faster (``MARGIN``); in doubt, the plain way stays.

Choices are kept per machine (CPU model, torch version, threads) in a small JSON file under
``$GLASSFORMER_CACHE_DIR`` (default ``~/.cache/glassformer``), so a program pays for the
measurement once. ``choices()`` shows them, ``reset_choices()`` forgets them (memory and file).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ..fileio import atomic_write

MARGIN = 0.9  # the special way must take at most 90% of the plain way's time to be chosen
PAIRS = 7  # interleaved (plain, special) timings per measurement
MIN_SAMPLE_S = 2e-4  # each timing repeats the call until it lasts at least this long

_choices: dict[str, bool] | None = None  # loaded lazily from the file


def cache_file() -> Path:
    """Where the choices of this machine are kept: ``$GLASSFORMER_CACHE_DIR/kernel-choices.json``."""
    root = os.environ.get("GLASSFORMER_CACHE_DIR") or Path.home() / ".cache" / "glassformer"
    return Path(root) / "kernel-choices.json"


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux, else what ``platform`` knows)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), cpu)
    except OSError:
        pass
    return cpu


SPEED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")  # what decides CPU kernel speed


def cpu_features() -> list[str]:
    """Which of SPEED_FLAGS the CPU reports (/proc/cpuinfo; [] where that file does not exist)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            flags = next((line.split(":", 1)[1].split() for line in info if line.startswith("flags")), [])
    except OSError:
        return []
    return [flag for flag in SPEED_FLAGS if flag in flags]


def machine() -> str:
    """What a choice depends on besides the case: CPU model, torch version and thread count."""
    return f"{cpu_name()} | torch {torch.__version__} | {torch.get_num_threads()} threads"


def _load() -> dict[str, bool]:
    """This machine's choices from the file ({} when missing or unreadable: they are re-measured)."""
    try:
        data = json.loads(cache_file().read_text(encoding="utf-8"))
        mine = data.get(machine(), {}) if isinstance(data, dict) else {}
        return {k: v for k, v in mine.items() if isinstance(v, bool)} if isinstance(mine, dict) else {}
    except (OSError, ValueError):
        return {}


def _save(choices: dict[str, bool]) -> None:
    """Write this machine's choices next to other machines' (atomically; silently skipped if read-only)."""
    path = cache_file()
    try:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            data = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            data = {}
        data[machine()] = dict(sorted(choices.items()))
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(data, indent=1), what="kernel-choice cache")
    except (OSError, ValueError):  # ValueError: a full disk (GlassformerError), or a folder in the way
        pass  # a read-only home: the choice still holds for this process


def _seconds_per_call(fn: Callable[[], object]) -> float:
    """One timing sample of ``fn``: repeated until it lasts at least MIN_SAMPLE_S."""
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= MIN_SAMPLE_S:
            return elapsed / calls


def faster(plain: Callable[[], object], special: Callable[[], object], pairs: int = PAIRS) -> bool:
    """True when ``special`` takes at most MARGIN of ``plain``'s time (median of ``pairs`` paired ratios)."""
    plain(), special()  # warm up both
    ratios = []
    for i in range(pairs):  # alternate the order so a drift in machine speed hits both alike
        first, second = (plain, special) if i % 2 == 0 else (special, plain)
        t_first, t_second = _seconds_per_call(first), _seconds_per_call(second)
        t_plain, t_special = (t_first, t_second) if i % 2 == 0 else (t_second, t_first)
        ratios.append(t_special / t_plain)
    return statistics.median(ratios) <= MARGIN


def choose(case: str, ways: Callable[[], tuple[Callable[[], object], Callable[[], object]]],
           grad: bool = False) -> bool:
    """Whether to take the special way for ``case`` (a string naming the kernel and shape class).

    ``ways()`` gives the (plain, special) callables to time; it is called only when ``case`` is met for
    the first time on this machine (a known case costs one dict lookup). The measurement
    (:func:`faster`) is then remembered, in this process and in :func:`cache_file`. Never measures
    while ``torch.compile`` traces: an unknown case then takes the plain way. The ways run under
    ``torch.inference_mode`` unless ``grad`` (a training step's backward needs autograd); those,
    being long, are timed in fewer pairs.
    """
    global _choices
    if _choices is None:
        _choices = _load()
    choice = _choices.get(case)
    if choice is None:
        if torch.compiler.is_compiling():
            return False
        with contextlib.nullcontext() if grad else torch.inference_mode():
            choice = _choices[case] = faster(*ways(), pairs=5 if grad else PAIRS)
        _save(_choices)
    return choice


def choices() -> dict[str, bool]:
    """This machine's choices so far: {case: special way chosen}."""
    global _choices
    if _choices is None:
        _choices = _load()
    return dict(_choices)


def reset_choices() -> None:
    """Forget every choice of this machine (in memory and in the file): they are measured again."""
    global _choices
    _choices = {}
    _save(_choices)
