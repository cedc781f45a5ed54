"""How many threads the machine can give *now*, and how they wait: chosen before torch starts OpenMP, and applied
only when asked (:func:`glassformer.runtime.tune`, which the ``glassformer`` command calls; a library call alone
changes nothing).

On a busy machine torch's threads spin waiting for one that got part of a core (up to 30x slower), so: as many
threads as cores are free (from ``/proc``), re-measured in long loops, and passive waiting when busy unless the
command's thread count follows the load (training, evaluation: the count alone adapts, and spinning threads
are faster whenever the load has gone). Whatever the user set (``OMP_NUM_THREADS``, ``OMP_WAIT_POLICY``, ...,
``GLASSFORMER_THREADS=fixed``) wins. Standard library only.
"""

import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

WAIT_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")  # the user chose how threads wait
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # the user chose how many threads
SWITCH = "GLASSFORMER_THREADS"  # "fixed": leave threads and wait policy to torch's defaults
SAMPLES, SAMPLE_GAP_S = 10, 0.002  # /proc/loadavg reads per measurement, and the pause between them
CONFIRM_SAMPLES = 25  # a second look (~50 ms) before a busy reading counts


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; all CPUs where that is unknown)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cpus)


def _runnable_total() -> int | None:
    """Runnable tasks on the whole machine right now (the 4th field of /proc/loadavg, "running/total")."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            return int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None


def _own_running() -> int:
    """This process's threads that are running or runnable now (state R in /proc/self/task/*/stat), at least 1."""
    count = 0
    for stat in Path("/proc/self/task").glob("*/stat"):  # none where there is no /proc
        try:  # the name, in parentheses, may hold spaces
            count += stat.read_text(encoding="ascii", errors="replace").rsplit(")", 1)[1].split()[0] == "R"
        except (OSError, IndexError):
            continue  # a thread that ended meanwhile
    return max(1, count)


def others_running(samples: int = SAMPLES, gap_s: float = SAMPLE_GAP_S) -> float | None:
    """Other programs' threads that want a CPU now: the mean over ``samples`` reads of runnable tasks minus
    this process's running threads; None where /proc is missing."""
    counts = []
    for i in range(samples):
        total = _runnable_total()
        if total is None:
            return None
        counts.append(max(0, total - _own_running()))
        if i + 1 < samples:
            time.sleep(gap_s)
    return float(statistics.fmean(counts))


def spare_cpus(others: float | None, cpus: int | None = None) -> float:
    """The CPUs of this process's ``cpus`` that ``others`` busy threads leave (may be negative), counting
    them in proportion of ``cpus`` to the machine's CPUs."""
    cpus = usable_cpus() if cpus is None else cpus
    online = max(cpus, os.cpu_count() or cpus)
    return cpus - (others or 0) * cpus / online


def free_cpus(others: float | None, cpus: int) -> int:
    """The threads to run beside ``others`` busy threads: the spare CPUs, rounded, in [1, cpus]."""
    return max(1, min(cpus, round(spare_cpus(others, cpus) + 1e-9)))


@dataclass(frozen=True)
class ThreadPlan:
    """What :func:`plan` decided: ``threads`` (None: torch's choice), ``wait`` ("passive", "spin" or "user"),
    the ``cpus`` usable, ``others`` measured, and the ``reason`` in words."""

    threads: int | None
    wait: str
    cpus: int
    others: float | None
    reason: str

    def describe(self) -> str:
        """One line: ``threads: 1 of 2 CPUs, OpenMP waits passively (1 other busy thread)``."""
        count = f"{self.threads} of {self.cpus} CPUs" if self.threads else f"torch's default ({self.cpus} CPUs)"
        return f"threads: {count}, wait {self.wait} ({self.reason})"


_ours: dict[str, str] = {}  # the variables set_wait_policy wrote (not the user's choice)


def confirmed(others: float | None, busy: Callable[[float | None], bool]) -> float | None:
    """``others`` busy threads as read, or, where ``busy(others)``, the lower of them and a second, longer look
    (:data:`CONFIRM_SAMPLES` reads): a passing spike, such as this process's own threads winding down as /proc is
    read, must not decide."""
    if not busy(others):
        return others
    again = others_running(samples=CONFIRM_SAMPLES)
    return others if again is None else min(others, again)


def plan(others: float | None = None, cpus: int | None = None, env: dict[str, str] | os._Environ = os.environ,
         follows_load: bool = False) -> ThreadPlan:
    """Threads and wait policy beside ``others`` busy threads (measured when not given) on ``cpus`` CPUs;
    ``follows_load``: the count will be measured again while the command runs (:class:`LoadFollower`), so
    threads spin even when busy now (under a load that came and went, a passive start took 1.09x the time)."""
    cpus = usable_cpus() if cpus is None else cpus
    fixed = [SWITCH] if env.get(SWITCH, "").lower() == "fixed" else [  # the user's choice: glassformer changes nothing
        name for name in (*THREAD_VARS, *WAIT_VARS) if env.get(name) and env.get(name) != _ours.get(name)]
    if fixed:
        return ThreadPlan(None, "user", cpus, others, f"set by {', '.join(fixed)}")
    if others is None:
        others = confirmed(others_running(), lambda o: bool(o) and free_cpus(o, cpus) < cpus)
    if others is None:
        return ThreadPlan(None, "spin", cpus, None, "no /proc to measure the load: torch's defaults")
    free = free_cpus(others, cpus)
    if free >= cpus:
        return ThreadPlan(None, "spin", cpus, others, "the machine is idle: torch's defaults")
    busy = f"{others:g} other busy thread{'s' * (others != 1)}"
    if follows_load:
        return ThreadPlan(free, "spin", cpus, others, f"{busy}: the count follows the load, threads spin")
    return ThreadPlan(free, "passive", cpus, others, f"{busy}: threads sleep while they wait")


def set_wait_policy(chosen: ThreadPlan, env: dict[str, str] | os._Environ = os.environ) -> bool:
    """Set OpenMP's wait policy in ``env`` for a "passive" plan before torch loads, unless the user set one;
    returns whether it was set."""
    if chosen.wait != "passive" or "torch" in sys.modules or any(env.get(name) for name in WAIT_VARS):
        return False
    env["OMP_WAIT_POLICY"] = _ours["OMP_WAIT_POLICY"] = "PASSIVE"  # GNU libgomp (torch's wheels), Intel's libiomp
    env["KMP_BLOCKTIME"] = _ours["KMP_BLOCKTIME"] = "0"  # Intel's libiomp: sleep at once (libgomp ignores it)
    return True


_at_start: ThreadPlan | None = None  # the plan made by prepare()
_default: int | None = None  # torch's own thread count
_applied: int | None = None  # the count glassformer last set (None: never, or the user fixed it)


def prepare(follows_load: bool = False) -> ThreadPlan:
    """Measure the load, set the wait policy (before torch is imported, while OpenMP still reads it), then torch's
    thread count; returns the plan. ``follows_load``: the command measures the load again as it runs (see
    :func:`plan`)."""
    global _at_start, _default, _applied
    _at_start = chosen = plan(follows_load=follows_load)
    set_wait_policy(chosen)
    import torch

    if _default is None:
        _default = torch.get_num_threads()
    if chosen.threads and torch.get_num_threads() != chosen.threads:
        torch.set_num_threads(chosen.threads)
    _applied = None if chosen.wait == "user" else torch.get_num_threads()
    return chosen


def at_start() -> ThreadPlan | None:
    """The plan :func:`prepare` made (None before)."""
    return _at_start


def follow_load() -> ThreadPlan | None:
    """Measure the load now and set torch's thread count to what the machine gives (torch's own when idle);
    the new plan, or None when the user fixed the threads or someone else set them since glassformer did."""
    global _applied
    import torch

    if _applied is None or torch.get_num_threads() != _applied:
        return None
    chosen = plan()
    if chosen.wait == "user":
        return None
    wanted = chosen.threads or _default or _applied
    if wanted != _applied:
        torch.set_num_threads(wanted)
        _applied = wanted
    return chosen


def fix(count: int) -> None:
    """Set torch's thread count to ``count`` as asked (:func:`glassformer.runtime.tune`): loops leave it there."""
    global _applied
    import torch

    torch.set_num_threads(count)
    _applied = None  # asked for: not a count that follows the load


class LoadFollower:
    """Calls :func:`follow_load` from a loop, at most every ``every_s`` seconds (the first after ``first_s``), when
    ``on`` and a thread count chosen by the policy is in force (:func:`prepare`, asked for by
    :func:`glassformer.runtime.tune` or the command): a loop alone never changes the thread count."""

    def __init__(self, first_s: float = 2.0, every_s: float = 10.0, on: bool = True) -> None:
        self.every_s, self.on = every_s, on
        self.next = time.monotonic() + first_s

    def tick(self) -> None:
        """Follow the load when it is time and the policy was asked for (a clock read otherwise)."""
        if self.on and _applied is not None and time.monotonic() >= self.next:
            follow_load()
            self.next = time.monotonic() + self.every_s
