"""Speed choices measured on the machine at hand, robust to a busy moment, and remembered.

A kernel trick that wins on one CPU can lose on another, so the special way is taken only when every
one of ``ROUNDS`` rounds (each the median of ``PAIRS`` interleaved ratios) has it at most ``MARGIN`` of
the plain way's time; rounds that disagree, a measurement under load (:mod:`.threads`; at one torch thread
samples are the thread's CPU time, which a busy machine does not lengthen) and choices older
than ``MAX_AGE_DAYS`` are measured again by the next process. A library call measures in its own process
only; choices are kept in a file only where asked (:func:`glassformer.runtime.tune` with ``kernel_cache``, and
``glassformer bench``; the other commands read that file): per machine (CPU, torch, threads) in
``$GLASSFORMER_CACHE_DIR/kernel-choices.json``, read through the bounded JSON loader (a FIFO, a device, a huge or
deeply nested file, wrong types: a one-line warning, and measured again). ``glassformer bench --kernel_choices``
lists them.
"""

import contextlib
import datetime
import functools
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..errors import BadFileError, MissingFileError
from ..io.fileio import atomic_write
from ..io.loaders import load_json
from .threads import confirmed, others_running, spare_cpus

MARGIN = 0.9  # the special way must take at most 90% of the plain way's time, in every round, to be chosen
PAIRS = 7  # interleaved (plain, special) timings per round
GRAD_PAIRS = 3  # ... for a training step (long: 3 rounds x 3 pairs cost about 20 steps)
ROUNDS = 3  # rounds per measurement: they must agree
MIN_SAMPLE_S = 2e-4  # each timing repeats the call until it lasts at least this long
MAX_AGE_DAYS = 30  # a choice older than this is measured again
MAX_CACHE_BYTES = 1 << 22  # a few hundred bytes per choice: a larger cache file is not one glassformer wrote

Record = dict[str, Any]  # {"special": True/False/None, "final": bool, "measured": ISO time, "ratios": [...], ...}
_choices: dict[str, Record] | None = None  # loaded lazily from the file
_loaded_for: tuple[object, int, dict[str, bool]] = (None, 0, {})  # (the choices dict, torch's thread count when
# it was read, {case: answer} given from it): a case measured here is not measured twice (even when provisional),
# and a decoding step, which asks for each of its products, finds a settled answer without re-reading its record
last_ratios: list[float] = []  # each round's median ratio (special / plain time) of the last faster() call
last_others: float | None = None  # the load that faster() saw: other programs' threads wanting a CPU
_kept_in: Path | bool = False  # the file choices are read from (True: cache_file(); False: this process only)
_writes = False  # whether new choices are written to it
_warned: set[str] = set()  # unusable cache files already reported (once per process)
ignored: list[str] = []  # the cases of this machine the file holds in a form glassformer does not write
SPEED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")  # what decides CPU kernel speed


def cache_file() -> Path:
    """Where the choices of this machine are kept: ``$GLASSFORMER_CACHE_DIR/kernel-choices.json``."""
    root = os.environ.get("GLASSFORMER_CACHE_DIR") or Path.home() / ".cache" / "glassformer"
    return Path(root) / "kernel-choices.json"


def _cpuinfo(key: str) -> str | None:
    """The value of the first ``key`` line of /proc/cpuinfo (None where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            return next((line.split(":", 1)[1].strip() for line in info if line.startswith(key)), None)
    except OSError:
        return None


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux, else what ``platform`` knows)."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_features() -> list[str]:
    """Which of SPEED_FLAGS the CPU reports (/proc/cpuinfo; [] where that file does not exist)."""
    flags = (_cpuinfo("flags") or "").split()
    return [flag for flag in SPEED_FLAGS if flag in flags]


def last_level_cache_bytes(folder: str | Path | None = None) -> int:
    """The largest CPU cache's size in bytes, from Linux's ``folder``/index*/size (32 MiB where none reads);
    ``folder`` None: cpu0's, read once per process (generation asks at each call)."""
    if folder is None:
        return _machine_cache_bytes()
    sizes = []
    for index in Path(folder).glob("index*"):
        try:
            text = (index / "size").read_text(encoding="ascii").strip().upper()
            sizes.append(int(text[:-1]) * {"K": 1 << 10, "M": 1 << 20}[text[-1]] if text[-1] in "KM" else int(text))
        except (OSError, ValueError, IndexError):
            continue
    return max(sizes, default=32 << 20)


@functools.cache
def _machine_cache_bytes() -> int:
    return last_level_cache_bytes("/sys/devices/system/cpu/cpu0/cache")


def machine() -> str:
    """What a choice depends on besides the case: CPU model, torch version and thread count."""
    return f"{cpu_name()} | torch {torch.__version__} | {torch.get_num_threads()} threads"


def use_cache(file: str | Path | bool | None, write: bool = True) -> None:
    """Read this machine's choices from ``file`` (True: :func:`cache_file`, wherever ``$GLASSFORMER_CACHE_DIR``
    points when it is read) and, with ``write``, keep new ones there; None or False: choices are measured in
    this process and forgotten at its end (the default of a library call)."""
    global _kept_in, _writes, _choices
    _kept_in = file if isinstance(file, bool) else False if file is None else Path(file)
    _writes = write and _kept_in is not False
    _choices = None  # read from the new place at the next choice


def kept_in() -> Path | None:
    """The file choices are read from now (None: measured in this process only)."""
    return cache_file() if _kept_in is True else _kept_in or None


def _valid(record: object) -> bool:
    """Whether a stored entry is a full record with the types :func:`describe` reads (a bare bool is the old
    format, anything else was not written by glassformer: both are measured again)."""
    if not (isinstance(record, dict) and record.get("special") in (True, False, None)
            and isinstance(record.get("final"), bool) and isinstance(record.get("measured"), str)):
        return False
    ratios, others = record.get("ratios", []), record.get("others_running")
    return (isinstance(record.get("how", ""), str) and isinstance(ratios, list) and len(ratios) <= 100
            and all(_finite(r) for r in ratios) and (others is None or _finite(others))
            and (record.get("threads") is None or type(record.get("threads")) is int))


def _finite(value: object) -> bool:
    """A JSON number a ratio or a load can be: a finite float, or an int a float holds exactly."""
    return type(value) is float and math.isfinite(value) or type(value) is int and abs(value) <= 2**53


def _read_file() -> dict | None:
    """The cache file's content ({} where there is none or none is used; None where it cannot be used: one line
    on standard error, once per process and file, and the file is never replaced)."""
    file = kept_in()
    if file is None:
        return {}
    try:
        data = load_json(file, "kernel-choice cache", max_bytes=MAX_CACHE_BYTES)
    except MissingFileError:
        return {}
    except (BadFileError, OSError) as error:  # OSError: unreadable (permissions), a dangling link loop...
        why = str(error).rstrip(".")
    else:
        if isinstance(data, dict):
            return data
        why = f"kernel-choice cache {str(file)!r} holds a JSON {type(data).__name__}, not an object of machines"
    if str(file) not in _warned:
        _warned.add(str(file))
        print(f"glassformer: warning: {why}; kernel choices are measured again in this process and the file is "
              "left as it is (delete it to start again)", file=sys.stderr, flush=True)
    return None


def _load() -> dict[str, Record]:
    """This machine's valid choices from the file (the rest are measured again)."""
    mine = (_read_file() or {}).get(machine(), {})
    if not isinstance(mine, dict):
        ignored[:] = [machine()]
        return {}
    ignored[:] = [str(k) for k, v in mine.items() if not _valid(v)]
    return {k: v for k, v in mine.items() if _valid(v)}


def _loaded() -> dict[str, Record]:
    """This machine's choices, read once per thread count: when torch's count changes, that count's choices."""
    global _choices, _loaded_for
    threads = torch.get_num_threads()
    if _choices is not None and _loaded_for[0] is _choices and _loaded_for[1] != threads:
        _choices = None  # a choice holds for the thread count it was measured at
    if _choices is None:
        _choices = _load()
    if _loaded_for[0] is not _choices:  # read from the file, reset, or a test's own dict: answers start again
        _loaded_for = (_choices, threads, {})
    return _choices


def _save(choices: dict[str, Record]) -> None:
    """Write this machine's choices next to other machines' (atomically) where a file was asked for with writing;
    skipped silently where it cannot be written (a read-only home), and where the file there cannot be read."""
    data = _read_file() if _writes else None
    if data is None:
        return
    file = kept_in()
    # a full disk (a GlassformerError, which is a ValueError), a folder in the way: the choice still holds here
    with contextlib.suppress(OSError, ValueError):
        data[machine()] = dict(sorted(choices.items()))
        file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(file, json.dumps(data, indent=1), what="kernel-choice cache")


def _seconds_per_call(fn: Callable[[], object]) -> float:
    """One timing sample of ``fn``: called until it lasts at least MIN_SAMPLE_S. With one torch thread it is timed
    in the thread's CPU time (a core shared with other programs does not enter it, so a busy machine measures as an
    idle one); else in wall time."""
    clock = time.thread_time if torch.get_num_threads() == 1 else time.perf_counter
    calls, start = 0, clock()
    while True:
        fn()
        calls += 1
        elapsed = clock() - start
        if elapsed >= MIN_SAMPLE_S:
            return elapsed / calls


def faster(plain: Callable[[], object], special: Callable[[], object], pairs: int = PAIRS) -> bool | None:
    """True when ``special`` takes at most MARGIN of ``plain``'s time in every one of ROUNDS rounds (the median of
    ``pairs`` paired ratios), False when more in every round, None when rounds disagree. Leaves each round's median
    in :data:`last_ratios` and the highest load seen before and after (:func:`load_now`), when busy confirmed by a
    second, longer look, in :data:`last_others`."""
    global last_others
    before = load_now()
    plain(), special()  # warm up both
    medians = []
    for _ in range(ROUNDS):
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
    last_others = confirmed(max(seen, default=None), _busy)  # a passing spike must not void the measurement
    votes = {ratio <= MARGIN for ratio in medians}
    return votes.pop() if len(votes) == 1 else None


def load_now() -> float | None:
    """Other programs' threads that want a CPU now (None where that cannot be read)."""
    return others_running(samples=3, gap_s=0.001)


def _busy(others: float | None) -> bool:
    """Whether ``others`` competing threads leave fewer CPUs spare than torch runs threads (one thread, timed
    in its CPU time, is never busy)."""
    threads = torch.get_num_threads()
    return threads > 1 and others is not None and spare_cpus(others) < threads - 0.5


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _age_days(record: Record) -> float:
    """How many days ago ``record`` was measured (infinite when its time does not parse)."""
    try:
        measured = datetime.datetime.fromisoformat(record["measured"])
    except ValueError:  # a record read from the file holds a str (_valid)
        return float("inf")
    if measured.tzinfo is None:
        measured = measured.replace(tzinfo=datetime.timezone.utc)
    return (_now() - measured).total_seconds() / 86400


def effective(entry: Record | bool) -> bool:
    """Whether a record's special way is taken: decided, and measured on a machine with CPUs free (a bare bool, as
    older files and a hand-written one hold: itself)."""
    return entry if isinstance(entry, bool) else entry["special"] is True and entry["final"]


def _settled(record: Record | None) -> bool:
    """Whether ``record`` answers its case without measuring: final and measured less than MAX_AGE_DAYS ago (one
    this process measured is remembered in ``_loaded_for``, provisional or not)."""
    return record is not None and record["final"] and _age_days(record) <= MAX_AGE_DAYS


def choose(case: str, ways: Callable[[], tuple[Callable[[], object], Callable[[], object]]],
           grad: bool = False) -> bool:
    """Whether to take the special way for ``case`` (a string naming the kernel and shape class).

    ``ways()`` gives the (plain, special) callables; it is called only when ``case`` has no settled answer
    here, and the measurement (:func:`faster`) is remembered. While ``torch.compile`` traces, an unknown
    case takes the plain way. ``grad``: time with autograd (a training step), in fewer pairs.
    """
    global last_others
    loaded = _loaded()
    answers = _loaded_for[2]
    known = answers.get(case)
    if known is not None:
        return known
    entry = loaded.get(case)
    if _settled(entry):
        answers[case] = answer = effective(entry)
        return answer
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
    _save(_choices)
    answers[case] = answer = effective(record)  # measured by this process: settled here
    return answer


def choices() -> dict[str, bool]:
    """This machine's choices so far: {case: special way taken} (False for no decision or provisional)."""
    return {case: effective(entry) for case, entry in _loaded().items()}


def records() -> dict[str, Record]:
    """This machine's choices with how they were made: {case: record} (see :func:`describe`)."""
    return dict(_loaded())


def describe(record: Record) -> str:
    """When and how a choice was measured, in words (``measured <time>, 3 rounds x 7 pairs, margin 0.9, ...``)."""
    ratios = " ".join(f"{r:.2f}" for r in record.get("ratios") or []) or "-"
    others = record.get("others_running")
    load = "load unknown" if others is None else f"{others:g} other busy thread{'s' * (others != 1)}"
    busy = not record["final"] and record["special"] is not None
    why = "; rounds disagree: no decision" if record["special"] is None else "; taken under load" if busy else ""
    later = "" if record["final"] else " (plain way until measured again by the next process)"
    return f"measured {record['measured']}, {record.get('how', '?')}, special/plain time {ratios}; {load}{why}{later}"


def reset_choices() -> None:
    """Forget every choice of this machine (in memory and in the file): they are measured again."""
    global _choices, _loaded_for
    _choices = {}
    _loaded_for = (_choices, torch.get_num_threads(), {})
    _save(_choices)
