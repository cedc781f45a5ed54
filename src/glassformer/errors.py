"""glassformer's own error types and the one place that checks plain arguments.

A :class:`GlassformerError` is a mistake the user can fix (a bad option, a bad file); the command line
prints it as one line. It subclasses ``ValueError`` so that ``except ValueError`` keeps working.
Genuine bugs are never turned into one of these: they keep their traceback.
"""

from __future__ import annotations

import math
from typing import Any


class GlassformerError(ValueError):
    """A user-facing error: bad input, a bad file or a bad config, named in the message."""


class UsageError(GlassformerError):
    """A command-line usage mistake (options that do not fit together, a missing file argument)."""


class ArgumentTypeError(GlassformerError, TypeError):
    """An argument of the wrong type (a float where ids belong, a list where a tensor belongs)."""


class MissingFileError(GlassformerError, FileNotFoundError):
    """A file or folder that was named does not exist (or lacks a file it must hold)."""


class BadFileError(GlassformerError):
    """A file that exists but cannot be used: malformed, corrupt, truncated, unsafe or inconsistent."""


def check_int(name: str, value: Any, low: int | None = None, high: int | None = None, *,
              allow_none: bool = False) -> int | None:
    """``value`` if it is an int (not a bool) in [low, high], else a ValueError naming ``name``.

    Args:
        name: the argument's name, as the user spelled it.
        value: what was given.
        low, high: inclusive bounds; None means unbounded on that side.
        allow_none: accept None (an option left unset) and return it.
    Returns:
        ``value`` unchanged.
    """
    if value is None and allow_none:
        return None
    ok = isinstance(value, int) and not isinstance(value, bool)
    if ok and (low is None or value >= low) and (high is None or value <= high):
        return value
    if low is not None and high is not None:
        expected = f"an int in [{low}, {high}]"
    elif low is not None:
        expected = f"an int >= {low}"
    elif high is not None:
        expected = f"an int <= {high}"
    else:
        expected = "an int"
    if allow_none:
        expected += " or None"
    raise GlassformerError(f"{name} must be {expected}, got {value!r}")


def check_number(name: str, value: Any, low: float | None = None, high: float | None = None, *,
                 low_open: bool = False, allow_none: bool = False) -> float | None:
    """``value`` as a float if it is a finite real number in range, else a ValueError naming ``name``.

    NaN and infinity are always refused. ``low_open`` makes the lower bound exclusive (``> low``).
    Returns ``float(value)`` (or None when ``allow_none`` and ``value`` is None).
    """
    if value is None and allow_none:
        return None
    number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if number is not None and math.isfinite(number):
        above = low is None or (number > low if low_open else number >= low)
        if above and (high is None or number <= high):
            return float(number)
    bounds = []
    if low is not None:
        bounds.append(f"{'>' if low_open else '>='} {low}")
    if high is not None:
        bounds.append(f"<= {high}")
    expected = "a finite number" + (f" {' and '.join(bounds)}" if bounds else "")
    if allow_none:
        expected += " or None"
    raise GlassformerError(f"{name} must be {expected}, got {value!r}")
