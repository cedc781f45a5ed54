"""Speed choices made by measurement on the machine at hand, robust to a busy moment, and remembered.

A kernel trick that wins on one CPU can lose on another (the few-row route of :mod:`.linear` reads
weights ~1.5x faster than ``F.linear`` on an AMD Zen 3, and at half the speed on an Intel Xeon with
AMX). So such a choice is never assumed: the first time a case is met, both ways are timed, and the
special way is taken only when it is clearly faster; in doubt, the plain way stays. A timing taken
while other programs compete for the cores can say anything (issue 27: a cache written on a busy
machine had the route off for 3 of 4 decoding shapes, 1.26x Hugging Face instead of 1.5x idle), so:

- **rounds with a margin**: ``ROUNDS`` independent rounds, each the median of ``PAIRS`` interleaved
  (plain, special) ratios; the special way wins only if *every* round has it at most ``MARGIN`` of
  the plain way's time, the plain way only if every round has it above; rounds that disagree are
  **no decision**: the plain way, measured again by the next process;
- **the load is measured** before and after (other programs' runnable threads,
  :func:`glassformer.runtime.threads.others_running`): a choice taken while torch's threads and
  the other programs' wanted more CPUs than there are is used as the plain way in this process and
  kept as *provisional*: the next process measures it again;
- **choices age**: one older than ``MAX_AGE_DAYS`` is measured again.

Choices are kept per machine (CPU model, torch version, threads) in a small JSON file under
``$GLASSFORMER_CACHE_DIR`` (default ``~/.cache/glassformer``), each with when and how it was measured
(its rounds' ratios, the load); ``glassformer bench --kernel_choices`` lists them. ``choices()`` gives
the effective answers, ``records()`` the details, ``reset_choices()`` forgets them (memory and file).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..fileio import atomic_write
from .threads import others_running, spare_cpus

MARGIN = 0.9  # the special way must take at most 90% of the plain way's time, in every round, to be chosen
PAIRS = 7  # interleaved (plain, special) timings per round
GRAD_PAIRS = 3  # ... for a training step (long: 3 rounds x 3 pairs cost about 20 steps)
ROUNDS = 3  # rounds per measurement: they must agree
MIN_SAMPLE_S = 2e-4  # each timing repeats the call until it lasts at least this long
MAX_AGE_DAYS = 30  # a choice older than this is measured again

Record = dict[str, Any]  # {"special": True/False/None, "final": bool, "measured": ISO time, "ratios": [...], ...}
_choices: dict[str, Record | bool] | None = None  # loaded lazily from the file (a bool: a choice set by hand)
_session: set[str] = set()  # cases measured by this process (a provisional one is not measured twice)
last_ratios: list[float] = []  # each round's median ratio (special / plain time) of the last faster() call
last_others: float | None = None  # the load that faster() saw: other programs' threads wanting a CPU


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


def _valid(record: object) -> bool:
    """Whether a stored entry is a full record (a bare bool is the old format: measured again)."""
    return (isinstance(record, dict) and record.get("special") in (True, False, None)
            and isinstance(record.get("final"), bool) and isinstance(record.get("measured"), str))


def _load() -> dict[str, Record | bool]:
    """This machine's choices from the file ({} when missing or unreadable: they are re-measured)."""
    try:
        data = json.loads(cache_file().read_text(encoding="utf-8"))
        mine = data.get(machine(), {}) if isinstance(data, dict) else {}
        return {k: v for k, v in mine.items() if _valid(v)} if isinstance(mine, dict) else {}
    except (OSError, ValueError):
        return {}


def _save(choices: dict[str, Record | bool]) -> None:
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


def faster(plain: Callable[[], object], special: Callable[[], object], pairs: int = PAIRS,
           rounds: int = ROUNDS) -> bool | None:
    """True when ``special`` takes at most MARGIN of ``plain``'s time in every one of ``rounds`` rounds
    (each the median of ``pairs`` paired ratios), False when it takes more in every round, None (no
    decision) when the rounds disagree. Each round's median is left in :data:`last_ratios`, and the
    most other programs' threads seen wanting a CPU before and after (:func:`load_now`) in
    :data:`last_others`."""
    global last_others
    before = load_now()
    plain(), special()  # warm up both
    medians = []
    for _ in range(rounds):
        ratios = []
        for i in range(pairs):  # alternate the order so a drift in machine speed hits both alike
            first, second = (plain, special) if i % 2 == 0 else (special, plain)
            t_first, t_second = _seconds_per_call(first), _seconds_per_call(second)
            t_plain, t_special = (t_first, t_second) if i % 2 == 0 else (t_second, t_first)
            ratios.append(t_special / t_plain)
        medians.append(statistics.median(ratios))
    after = load_now()
    last_ratios[:] = medians
    seen = [x for x in (before, after) if x is not None]
    last_others = max(seen) if seen else None
    votes = {ratio <= MARGIN for ratio in medians}
    return votes.pop() if len(votes) == 1 else None


def load_now() -> float | None:
    """Other programs' threads that want a CPU now (None where that cannot be read)."""
    return others_running(samples=3, gap_s=0.001)


def _busy(others: float | None) -> bool:
    """Whether ``others`` competing threads leave fewer CPUs spare than torch runs threads."""
    return others is not None and spare_cpus(others) < torch.get_num_threads() - 0.5


def _now() -> datetime.datetime:
    """The current time in UTC (a function, so tests can move the clock)."""
    return datetime.datetime.now(datetime.timezone.utc)


def _age_days(record: Record) -> float:
    """How many days ago ``record`` was measured (infinite when its time does not parse)."""
    try:
        measured = datetime.datetime.fromisoformat(record["measured"])
    except (ValueError, TypeError, KeyError):
        return float("inf")
    if measured.tzinfo is None:
        measured = measured.replace(tzinfo=datetime.timezone.utc)
    return (_now() - measured).total_seconds() / 86400


def _as_record(entry: Record | bool) -> Record:
    """A stored entry as a record (a bool set by hand counts as a final choice)."""
    if isinstance(entry, bool):
        return {"special": entry, "final": True, "measured": "", "how": "set by hand"}
    return entry


def effective(entry: Record | bool) -> bool:
    """Whether a record's special way is taken: decided, and measured on a machine with CPUs free."""
    record = _as_record(entry)
    return record["special"] is True and record["final"]


def _settled(case: str, entry: Record | bool | None) -> bool:
    """Whether ``entry`` answers ``case`` without measuring: final and young, or measured by this process."""
    if entry is None:
        return False
    record = _as_record(entry)
    if case in _session or record.get("how") == "set by hand":
        return True
    return record["final"] and _age_days(record) <= MAX_AGE_DAYS


def choose(case: str, ways: Callable[[], tuple[Callable[[], object], Callable[[], object]]],
           grad: bool = False) -> bool:
    """Whether to take the special way for ``case`` (a string naming the kernel and shape class).

    ``ways()`` gives the (plain, special) callables to time; it is called only when ``case`` has no
    settled answer on this machine (a settled case costs one dict lookup): never measured, measured
    under load by another process, no decision, or older than MAX_AGE_DAYS. The measurement
    (:func:`faster`, with the load read before and after) is then remembered, in this process and in
    :func:`cache_file`. Never measures while ``torch.compile`` traces: an unknown case then takes the
    plain way. The ways run under ``torch.inference_mode`` unless ``grad`` (a training step's backward
    needs autograd); those, being long, are timed in fewer pairs.
    """
    global _choices, last_others
    if _choices is None:
        _choices = _load()
    entry = _choices.get(case)
    if _settled(case, entry):
        return effective(entry)
    if torch.compiler.is_compiling():
        return False
    pairs = GRAD_PAIRS if grad else PAIRS
    last_ratios.clear()
    last_others = None
    with contextlib.nullcontext() if grad else torch.inference_mode():
        verdict = faster(*ways(), pairs=pairs)
    record = _choices[case] = {
        "special": verdict, "final": verdict is not None and not _busy(last_others),
        "measured": _now().isoformat(timespec="seconds"),
        "how": f"{ROUNDS} rounds x {pairs} pairs, margin {MARGIN}", "ratios": [round(r, 4) for r in last_ratios],
        "others_running": last_others, "threads": torch.get_num_threads()}
    _session.add(case)
    _save(_choices)
    return effective(record)


def choices() -> dict[str, bool]:
    """This machine's choices so far: {case: special way taken} (False for no decision or provisional)."""
    global _choices
    if _choices is None:
        _choices = _load()
    return {case: effective(entry) for case, entry in _choices.items()}


def records() -> dict[str, Record]:
    """This machine's choices with how they were made: {case: record} (see :func:`describe`)."""
    global _choices
    if _choices is None:
        _choices = _load()
    return {case: _as_record(entry) for case, entry in _choices.items()}


def describe(record: Record) -> str:
    """When and how a choice was measured, in words: ``measured 2026-12-04T15:30:00+00:00, 3 rounds x 7
    pairs, margin 0.9, special/plain time 0.62 0.64 0.61; 0 other busy threads``."""
    if record.get("how") == "set by hand":
        return "set by hand"
    ratios = " ".join(f"{r:.2f}" for r in record.get("ratios") or []) or "-"
    others = record.get("others_running")
    load = "load unknown" if others is None else f"{others:g} other busy thread{'s' * (others != 1)}"
    busy = not record["final"] and record["special"] is not None
    why = "; rounds disagree: no decision" if record["special"] is None else "; taken under load" if busy else ""
    later = "" if record["final"] else " (plain way until measured again by the next process)"
    return f"measured {record['measured']}, {record.get('how', '?')}, special/plain time {ratios}; {load}{why}{later}"


def reset_choices() -> None:
    """Forget every choice of this machine (in memory and in the file): they are measured again."""
    global _choices
    _choices = {}
    _session.clear()
    _save(_choices)
