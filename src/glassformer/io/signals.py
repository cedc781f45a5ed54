"""Ctrl-C and SIGTERM as a request to stop at the end of a step: the one handler of every trainer (the model's
Trainer, the SAE and transcoder trainers), so that a stopped run saves a state that a resume continues."""

from __future__ import annotations

import signal
import threading
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """While caught (:meth:`catch` ... :meth:`release`, or ``with``), Ctrl-C or SIGTERM appends its number to
    :attr:`requests` (the loop checks it at a step's end); a second signal acts at once (Ctrl-C raises
    KeyboardInterrupt, SIGTERM ends the process). Outside the main thread (where Python sets no handler)
    nothing is caught. :meth:`release` puts the previous handlers back."""

    def __init__(self) -> None:
        self.requests: list[int] = []
        self._previous: dict[int, Any] = {}

    def catch(self) -> StopSignals:
        """Install the handlers (in the main thread); returns self."""
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS}
        return self

    def release(self) -> None:
        """Put back the handlers that were there before :meth:`catch`."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.requests.append(signum)
        signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)

    def __enter__(self) -> StopSignals:
        return self.catch()

    def __exit__(self, *_exc: object) -> None:
        self.release()
