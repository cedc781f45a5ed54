"""How many threads the machine can give *now*, and how they wait: chosen before torch starts OpenMP.

torch runs each operation on one thread per core (OpenMP). When another program keeps one of the
cores busy (a browser, another training), one of torch's threads gets only part of a core, and the
others, having finished their share, *spin* at the end of every parallel region waiting for it: a
tiny model's step then costs up to 30x its idle time instead of 2x (issue 27: 190 s instead of 5.7 s
on 2 cores, one of them busy). Two levers fix that:

- **the thread count**: as many threads as cores are free now (``torch.set_num_threads``), so no
  thread waits for a core it does not get;
- **the wait policy**: ``OMP_WAIT_POLICY=PASSIVE`` (and ``KMP_BLOCKTIME=0`` for Intel's OpenMP)
  makes waiting threads sleep instead of spin. OpenMP reads it once, when torch loads it, so the
  ``glassformer`` command sets it (:func:`prepare`) *before* torch is imported, and only when the
  machine is busy at that moment: on an idle machine spinning is faster (a sleeping thread takes
  microseconds to wake, which batch-1 decoding pays at every operation).

Nothing happens at ``import glassformer``: the command (cli.main) calls :func:`prepare` then
:func:`apply` before a verb runs, and the trainer and evaluation apply the thread count when they start
(:class:`LoadFollower`). A script that wants the wait policy too calls :func:`prepare` before it
imports torch.

"Busy" is measured, not assumed: the kernel's count of runnable tasks (``/proc/loadavg``, averaged over ten
reads in ~20 milliseconds, and when that says busy, again over ~50 ms: the smaller counts, so a
passing spike does not decide the run's wait policy) minus this process's own running threads, against the CPUs this
process may run on (``os.sched_getaffinity``). Where ``/proc`` does not exist (macOS, Windows) the
machine counts as idle and nothing changes. Whatever the user set (``OMP_NUM_THREADS``,
``OMP_WAIT_POLICY``, ``GOMP_SPINCOUNT``, ``KMP_BLOCKTIME``, ``GLASSFORMER_THREADS=fixed``, an
explicit ``num_threads`` or ``--threads``) wins. This module uses the standard library only: it runs
before torch exists.

A count measured in a busy moment must not stick: the trainer re-measures between steps, and
evaluation between batches (2 s after they start, then every 10 s: :class:`LoadFollower`,
:func:`follow_load`), and sets the count the machine gives now, torch's own count again once it is
idle. (A recipe run whose import met a passing load trained on one thread of two: 26 s instead of
17.) Threads only change results in the last bits of float sums; for bit-identical reruns fix them
(``GLASSFORMER_THREADS=fixed``).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from dataclasses import dataclass

WAIT_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")  # the user chose how threads wait
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # the user chose how many threads
SWITCH = "GLASSFORMER_THREADS"  # "fixed": leave threads and wait policy to torch's defaults
SAMPLES, SAMPLE_GAP_S = 10, 0.002  # /proc/loadavg reads per measurement, and the pause between them
CONFIRM_SAMPLES = 25  # a second look (~50 ms) before a busy reading counts: the wait policy is set only once


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; all CPUs where that is unknown)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _runnable_total() -> int | None:
    """Runnable tasks on the whole machine right now (the 4th field of /proc/loadavg, "running/total")."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            return int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None


def _own_running() -> int:
    """This process's threads that are running or runnable now (state R in /proc/self/task/*/stat)."""
    count = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 1
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/stat", encoding="ascii", errors="replace") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]  # the name, in parentheses, may hold spaces
        except (OSError, IndexError):
            continue
        count += state == "R"
    return max(1, count)  # the thread reading this runs


def others_running(samples: int = SAMPLES, gap_s: float = SAMPLE_GAP_S) -> float | None:
    """How many other programs' threads want a CPU now: the mean over ``samples`` reads of runnable
    tasks minus this process's running threads (a mean, so that a load present half of the time
    counts half); None where /proc is missing (then nothing is known)."""
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
    """The CPUs of this process's ``cpus`` that ``others`` threads of other programs leave (may be
    negative: more threads want them than there are). The other threads may run on CPUs outside this
    process's affinity; they are counted against it in proportion (8 busy threads on a 64-CPU machine
    take a quarter of a 2-CPU process's CPUs)."""
    cpus = usable_cpus() if cpus is None else cpus
    if not others:
        return float(cpus)
    online = max(cpus, os.cpu_count() or cpus)
    return cpus - others * cpus / online


def free_cpus(others: float | None, cpus: int | None = None) -> int:
    """The threads to run when ``others`` threads of other programs want a CPU: the spare CPUs,
    rounded, at least 1 and at most ``cpus``."""
    cpus = usable_cpus() if cpus is None else cpus
    return max(1, min(cpus, round(spare_cpus(others, cpus) + 1e-9)))


@dataclass(frozen=True)
class ThreadPlan:
    """What :func:`plan` decided: ``threads`` to use (None: leave torch's choice), ``wait`` policy
    ("passive", "spin" or "user"), the ``cpus`` usable, ``others`` measured, and ``reason`` in words."""

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


def user_fixed(env: dict[str, str] | os._Environ = os.environ) -> list[str]:
    """The variables by which the user fixed threads or waiting (then glassformer changes neither)."""
    if env.get(SWITCH, "").lower() == "fixed":
        return [SWITCH]
    return [name for name in (*THREAD_VARS, *WAIT_VARS) if env.get(name) and env.get(name) != _ours.get(name)]


def plan(others: float | None = None, cpus: int | None = None,
         env: dict[str, str] | os._Environ = os.environ) -> ThreadPlan:
    """Threads and wait policy for a machine where ``others`` threads of other programs want a CPU
    (measured by :func:`others_running` when not given) out of ``cpus`` usable ones."""
    cpus = usable_cpus() if cpus is None else cpus
    fixed = user_fixed(env)
    if fixed:
        return ThreadPlan(None, "user", cpus, others, f"set by {', '.join(fixed)}")
    if others is None:
        others = others_running()
        if others and free_cpus(others, cpus) < cpus:  # busy: look again, longer; a passing spike must not decide
            again = others_running(samples=CONFIRM_SAMPLES)
            others = others if again is None else min(others, again)
    if others is None:
        return ThreadPlan(None, "spin", cpus, None, "no /proc to measure the load: torch's defaults")
    free = free_cpus(others, cpus)
    if free >= cpus:
        return ThreadPlan(None, "spin", cpus, others, "the machine is idle: torch's defaults")
    return ThreadPlan(free, "passive", cpus, others,
                      f"{others:g} other busy thread{'s' * (others != 1)}: threads sleep while they wait")


def set_wait_policy(chosen: ThreadPlan, env: dict[str, str] | os._Environ = os.environ) -> bool:
    """Set OpenMP's wait policy in ``env`` for a "passive" plan, when torch (and so OpenMP) has not
    started yet; returns whether it was set. Never overrides a variable the user set."""
    if chosen.wait != "passive" or "torch" in sys.modules or any(env.get(name) for name in WAIT_VARS):
        return False
    env["OMP_WAIT_POLICY"] = _ours["OMP_WAIT_POLICY"] = "PASSIVE"  # GNU libgomp (torch's wheels), Intel's libiomp
    env["KMP_BLOCKTIME"] = _ours["KMP_BLOCKTIME"] = "0"  # Intel's libiomp: sleep at once (libgomp ignores it)
    return True


_at_start: ThreadPlan | None = None  # the plan made by prepare() or the first apply()
_default: int | None = None  # torch's own thread count, before glassformer changed it
_applied: int | None = None  # the count glassformer last left torch with (None: never, or the user fixed it)


def prepare() -> ThreadPlan:
    """Measure the load and set the wait policy before torch loads: called by the ``glassformer``
    command before a verb runs (or by a script, before it imports torch). The plan is kept
    (:func:`at_start`) for :func:`apply` to set the thread count once torch is there."""
    global _at_start
    _at_start = plan()
    set_wait_policy(_at_start)
    return _at_start


def at_start() -> ThreadPlan | None:
    """The plan :func:`prepare` (or the first :func:`apply`) made (None before either ran)."""
    return _at_start


def apply(chosen: ThreadPlan | None = None) -> ThreadPlan:
    """Set torch's thread count to the plan's (``chosen``, else the one :func:`prepare` made, else a
    new measurement); a plan without a count (the user fixed it) changes nothing. Returns the plan."""
    global _default, _applied, _at_start
    chosen = chosen or _at_start or plan()
    _at_start = _at_start or chosen
    import torch

    if _default is None:
        _default = torch.get_num_threads()
    if chosen.threads and torch.get_num_threads() != chosen.threads:
        torch.set_num_threads(chosen.threads)
    _applied = None if chosen.wait == "user" else torch.get_num_threads()
    return chosen


def follow_load() -> ThreadPlan | None:
    """Measure the load *now* and set torch's thread count to what the machine can give (torch's own
    count again when it is idle; the wait policy stays as OpenMP started with it): so that a count
    chosen in a busy moment does not stick for a whole run. For long loops, between steps.

    Returns the new plan, or None (nothing measured, nothing changed) when the user fixed the threads
    (environment, ``GLASSFORMER_THREADS=fixed``) or torch's count is not the one glassformer left
    (someone called ``torch.set_num_threads``: theirs wins).
    """
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


class LoadFollower:
    """Calls :func:`follow_load` from a loop, at most every ``every_s`` seconds (the first after
    ``first_s``): ``tick()`` once per step costs a clock read. The trainer uses one, ``on`` unless the
    run's config fixed the thread count; evaluation too. When ``on`` and no thread count was applied
    yet in this process (a script that imported glassformer, not the command), it applies one first
    (:func:`apply`): the policy starts with the loop, never at import."""

    def __init__(self, first_s: float = 2.0, every_s: float = 10.0, on: bool = True) -> None:
        self.every_s, self.on = every_s, on
        if on and _at_start is None:
            apply()
        self.next = time.monotonic() + first_s

    def tick(self) -> None:
        """Follow the load when it is time (measuring takes ~20 ms)."""
        if self.on and time.monotonic() >= self.next:
            follow_load()
            self.next = time.monotonic() + self.every_s
