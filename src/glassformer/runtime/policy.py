"""The speed policy, applied only when asked: :func:`tune` is the one call that lets glassformer set torch's
thread count, OpenMP's wait policy and where kernel choices are kept. Library calls (training, evaluation,
generation, SAE training) change none of these by themselves; the ``glassformer`` command asks for the policy
for every verb; lessons and examples ask for it in one line. Standard library only until kernel choices are
asked for (threads must be planned before torch loads OpenMP)."""

import sys
from dataclasses import dataclass
from pathlib import Path

from . import threads as _threads


@dataclass(frozen=True)
class SpeedPolicy:
    """What :func:`tune` applied: the thread ``plan`` (None: threads left as they were), the fixed thread
    count (``threads``, None unless asked), and the file kernel choices are kept in (None: this process only)."""

    plan: _threads.ThreadPlan | None
    threads: int | None
    kernel_cache: Path | None

    def describe(self) -> str:
        """One line: ``threads: 1 of 2 CPUs, wait passive (...); kernel choices: this process only``."""
        if self.plan is not None:
            count = self.plan.describe()
        else:
            count = f"threads: {self.threads} (asked)" if self.threads else "threads: left as they were"
        kept = f"kept in {self.kernel_cache}" if self.kernel_cache else "this process only"
        return f"{count}; kernel choices: {kept}"


def tune(threads: str | int | None = "auto", *, follows_load: bool = False,
         kernel_cache: bool | str | Path | None = None) -> SpeedPolicy:
    """Ask for glassformer's speed policy in this process (what the ``glassformer`` command does for each verb).

    Why: torch starts one thread per core, and a thread that shares its core with another program makes the
    others spin while they wait for it; on a 2-core laptop with one busy core a tiny model's training took 23x
    its idle time. ``tune()`` measures the load and runs one thread per free core.

    Args:
        threads: "auto": as many threads as cores are free now (:func:`.threads.plan`; torch's own count on an
            idle machine), measured again by training and evaluation loops as they run; called before
            ``import torch``, it also makes waiting threads sleep on a busy machine (``OMP_WAIT_POLICY``,
            which OpenMP reads only when it loads). An int >= 1: that many threads, fixed. None: threads are
            left as they are. What the user set (``OMP_NUM_THREADS``, ``OMP_WAIT_POLICY``, ...,
            ``GLASSFORMER_THREADS=fixed``) always wins over "auto".
        follows_load: the script trains or evaluates with glassformer's loops, whose thread count follows the
            load: threads then keep spinning (faster when the load comes and goes); only with "auto".
        kernel_cache: True: keep kernel choices (which kernel is faster here, measured once) in
            ``$GLASSFORMER_CACHE_DIR/kernel-choices.json`` (default ``~/.cache/glassformer``) and read them from
            there; a path: that file; False: measured in this process only (the default of every library
            call); None: as it was.

    Returns:
        The :class:`SpeedPolicy` applied (``describe()`` says it in one line).
    """
    from ..errors import UsageError
    from ..io.checks import check_int

    if kernel_cache is not None and not isinstance(kernel_cache, (bool, str, Path)) or kernel_cache == "":
        raise UsageError(f"kernel_cache must be True, False, None or a path, got {kernel_cache!r}")
    plan, fixed = None, None
    if threads == "auto":
        plan = _threads.prepare(follows_load=follows_load)
    elif threads is not None:
        if isinstance(threads, str):
            raise UsageError(f"threads must be 'auto', an int >= 1 or None, got {threads!r}")
        fixed = check_int("threads", threads, 1, 4096)
        _threads.fix(fixed)
    if kernel_cache is None:
        module = sys.modules.get("glassformer.runtime.kernel_choice")  # never imported: nothing was asked
        return SpeedPolicy(plan, fixed, module.kept_in() if module is not None else None)
    from . import kernel_choice

    kernel_choice.use_cache(kernel_cache if isinstance(kernel_cache, bool) else Path(kernel_cache).expanduser())
    return SpeedPolicy(plan, fixed, kernel_choice.kept_in())
