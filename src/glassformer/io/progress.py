"""Heartbeat lines for long steps: one line to stderr at most every ``every`` seconds, on a terminal or in a
log (unlike a progress bar); quiet under :func:`quiet` and on torchrun ranks other than 0."""

import contextlib
import contextvars
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator

from .checks import check_number

EVERY_S = 10.0  # seconds between two lines of a long step
POLL_S = 1.0  # how often the thread of :meth:`Heartbeat.beating` looks at the clock (real seconds)

_QUIET = contextvars.ContextVar("glassformer_progress_quiet", default=False)


def seconds() -> float:
    """The clock heartbeats read (``time.monotonic``); tests replace this function with a fake clock."""
    return time.monotonic()


@contextlib.contextmanager
def quiet(on: bool = True) -> Iterator[None]:
    """While inside (and ``on``), heartbeats made in this thread print nothing."""
    token = _QUIET.set(on or _QUIET.get())
    try:
        yield
    finally:
        _QUIET.reset(token)


def showing() -> bool:
    """Whether a new heartbeat prints: not under :func:`quiet`, and rank 0 of a ``torchrun`` (or no torchrun)."""
    return not _QUIET.get() and os.environ.get("RANK", "0") == "0"


def _write(line: str) -> None:
    """``line`` on stderr; on a terminal through tqdm, so that an open progress bar is redrawn below it."""
    if sys.stderr.isatty():
        from tqdm.auto import tqdm

        tqdm.write(line, file=sys.stderr)
    else:
        print(line, file=sys.stderr, flush=True)


class Heartbeat:
    """A context manager that prints ``"<what>: <done> of <total> <unit> (<pct>%)[, <note>], <elapsed> s"``
    every ``every`` seconds, and a closing line if it printed any. ``total``: None when unknown; ``unit``:
    "bytes" (shown in MB) or a count's name; ``clock``, ``enabled``, ``write``: defaults for tests to replace."""

    def __init__(self, what: str, total: int | None = None, unit: str = "batches", every: float = EVERY_S,
                 clock: Callable[[], float] | None = None, enabled: bool | None = None,
                 write: Callable[[str], None] | None = None):
        check_number("every", every, 0.0, low_open=True)
        self.what, self.total, self.unit, self.every = what, total, unit, every
        self.clock = clock if clock is not None else seconds  # looked up now: a test's fake clock is seen
        self.enabled = showing() if enabled is None else enabled
        self.write = write if write is not None else _write
        self.done, self.note, self.lines = 0, "", 0
        self.started = self.last = self.clock()
        self._lock = threading.Lock()

    def _amount(self, value: float) -> str:
        return f"{value / 1e6:,.1f}" if self.unit == "bytes" else f"{value:,.0f}"

    def line(self, now: float) -> str:
        """The line for the current state at clock time ``now``."""
        unit = "MB" if self.unit == "bytes" else self.unit
        if self.total:
            share = f"{self._amount(self.done)} of {self._amount(self.total)} {unit} ({self.done / self.total:.0%})"
        else:
            share = f"{self._amount(self.done)} {unit}"
        note = f", {self.note}" if self.note else ""
        return f"{self.what}: {share}{note}, {now - self.started:,.0f} s"

    def update(self, done: int | None = None, advance: int = 0, note: str | None = None) -> None:
        """Set ``done`` (or add ``advance``) and ``note``; print a line when ``every`` seconds have passed."""
        with self._lock:
            self.done = (self.done if done is None else done) + advance
            if note is not None:
                self.note = note
            if not self.enabled:
                return
            now = self.clock()
            if now - self.last >= self.every:
                self.last = now
                self.lines += 1
                self.write(self.line(now))

    @contextlib.contextmanager
    def beating(self, poll: float | None = None) -> "Iterator[Heartbeat]":
        """While inside, a thread calls :meth:`update` every ``poll`` seconds (lines while a Rust call blocks)."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(POLL_S if poll is None else poll):
                self.update()

        thread = threading.Thread(target=beat, name=f"heartbeat: {self.what}", daemon=True)
        if self.enabled:
            thread.start()
        try:
            yield self
        finally:
            stop.set()
            if thread.is_alive():
                thread.join()

    def close(self) -> None:
        """Print the closing line (``"<what>: done, <amount> in <elapsed> s"``) if any line was printed."""
        with self._lock:
            if self.enabled and self.lines:
                now, unit = self.clock(), "MB" if self.unit == "bytes" else self.unit
                self.write(f"{self.what}: done, {self._amount(self.done)} {unit} in {now - self.started:,.0f} s")
                self.lines += 1

    def __enter__(self) -> "Heartbeat":
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:  # a step that failed ends with its error, not with "done"
            self.close()
