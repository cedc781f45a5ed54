"""Argument checks at the boundary: is it an int, a finite number in range, a seed, a token id, a device
name, a known key, a file name staying inside its folder? Each returns the value or raises the
:mod:`glassformer.errors` type whose message names the argument, the value and what was expected."""

from __future__ import annotations

import math
import os
import re
import reprlib
import sys
from pathlib import Path
from typing import Any

from ..errors import ArgumentTypeError, BadFileError, GlassformerError

MAX_SEED = 2**63 - 1  # the largest seed glassformer passes to a random generator (torch takes up to 2**64 - 1)


def is_int(value: Any) -> bool:
    """Whether ``value`` is a plain int: the one test of "an int" in glassformer (a bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """Whether ``value`` is an int or a float, not a bool (finiteness is :func:`check_number`'s)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_token_id(name: str, value: Any, vocab_size: int) -> int:
    """``value`` if it is an int token id in [0, vocab_size), else an error naming ``name``."""
    if not is_int(value):
        raise ArgumentTypeError(f"{name} must be an int token id, got {shown(value)}")
    if not 0 <= value < vocab_size:
        raise GlassformerError(token_id_error(value, vocab_size, name))
    return value


def token_id_error(bad: int, vocab_size: int, name: str | None = None) -> str:
    """The message of a token id out of range (``name``: where it came from, when known)."""
    where = f" in {name}" if name else ""
    return f"token id {bad}{where} is out of range: expected 0 <= id < vocab_size={vocab_size}"


def check_int(name: str, value: Any, low: int | None = None, high: int | None = None, *,
              allow_none: bool = False) -> int | None:
    """``value`` if it is an int (not a bool) in [low, high] (None: unbounded), else an error naming ``name``."""
    if value is None and allow_none:
        return None
    if is_int(value) and (low is None or value >= low) and (high is None or value <= high):
        return value
    if low is not None and high is not None:
        expected = f"an int in [{low}, {high}]"
    else:
        expected = "an int" + (f" >= {low}" if low is not None else f" <= {high}" if high is not None else "")
    raise GlassformerError(f"{name} must be {expected}{' or None' if allow_none else ''}, got {shown(value)}")


def shown(value: Any) -> str:
    """``repr(value)`` for an error message, on one line of at most 80 characters."""
    if is_int(value) and abs(value) >= 10**30:
        return f"a{' negative' if value < 0 else 'n'} int of about {int(value.bit_length() * 0.30103) + 1} digits"
    if "torch" in sys.modules and sys.modules["torch"].is_tensor(value):  # without torch loaded, no tensor
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    text = " ".join(reprlib.repr(value).split())  # bounded for long containers and strings; one line
    return text if len(text) <= 80 else text[:77] + "..."


def first_line(error: BaseException) -> str:
    """The first line of an error's message (its type's name when it has none)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def check_number(name: str, value: Any, low: float | None = None, high: float | None = None, *,
                 low_open: bool = False, high_open: bool = False, allow_none: bool = False) -> float | None:
    """``float(value)`` if it is a finite number in range (``*_open``: exclusive), else an error naming ``name``."""
    if value is None and allow_none:
        return None
    too_large = is_int(value) and abs(value) > 2**1023  # for a float: math.isfinite would raise
    if is_number(value) and not too_large and math.isfinite(value):
        above = low is None or (value > low if low_open else value >= low)
        if above and (high is None or (value < high if high_open else value <= high)):
            return float(value)
    limits = ((">" if low_open else ">=", low), ("<" if high_open else "<=", high))
    bounds = " and ".join(f"{sign} {bound}" for sign, bound in limits if bound is not None)
    expected = f"a finite number {bounds}" if bounds else "a finite number"
    raise GlassformerError(f"{name} must be {expected}{' or None' if allow_none else ''}, got {shown(value)}")


def check_inside(folder: str | Path, name: Any, what: str = "file") -> Path:
    """``folder / name`` when ``name`` (a shard a model folder names) is a plain relative path staying inside
    ``folder`` after links (a Hugging Face ``snapshots/REV`` may reach ``blobs``); else a :class:`BadFileError`."""
    folder = Path(folder)
    if not isinstance(name, str) or not name or "\x00" in name:
        raise BadFileError(f"{str(folder)!r} names a {what} {name!r:.80}, which is not a file name")
    if Path(name).is_absolute() or os.path.isabs(name) or ".." in Path(name).parts or name.startswith("~"):
        raise BadFileError(f"{str(folder)!r} names the {what} {name!r}, outside the folder (only plain "
                           "names inside the model folder are read)")
    path = folder / name
    root = folder.resolve()  # Hugging Face cache: snapshots/REV/FILE -> ../../blobs/HASH
    allowed = [root, root.parent.parent / "blobs"] if root.parent.name == "snapshots" else [root]
    target = (root / name).resolve()  # the folder resolved once: a link it passes through may move meanwhile
    if not any(target == base or base in target.parents for base in allowed):
        raise BadFileError(f"{str(path)!r} leads outside the model folder (to {str(target)!r}); "
                           "glassformer reads only files inside it")
    return path


def check_known_keys(data: dict[str, Any], known: set[str], what: str = "config") -> None:
    """Refuse a key of ``data`` not among ``known``, naming the unknown ones and the known ones."""
    unknown = sorted((k for k in data if k not in known), key=str)
    if unknown:
        raise GlassformerError(f"unknown {what} key(s) {unknown}; known keys: {sorted(known)}")


DEVICE_NAME = re.compile(r"auto|cpu|cuda(:\d{1,3})?")  # what a config's ``device`` may say


def check_device_name(device: Any) -> str:
    """``device`` when a name a config may hold ("auto", "cpu", "cuda", "cuda:N"), else an error naming it."""
    if not isinstance(device, str) or not DEVICE_NAME.fullmatch(device):
        raise GlassformerError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {shown(device)}")
    return device
