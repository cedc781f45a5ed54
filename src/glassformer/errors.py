"""glassformer's own error types and the one place that checks plain arguments.

A :class:`GlassformerError` is a mistake the user can fix (a bad option, a bad file); the command line
prints it as one line. It subclasses ``ValueError`` so that ``except ValueError`` keeps working.
Genuine bugs are never turned into one of these: they keep their traceback.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

MAX_SEED = 2**63 - 1  # the largest seed glassformer passes to a random generator (torch takes up to 2**64 - 1)


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


def is_int(value: Any) -> bool:
    """Whether ``value`` is a plain int: the one test of "an int" in glassformer (a bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """Whether ``value`` is an int or a float, not a bool (finiteness is :func:`check_number`'s)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_token_id(name: str, value: Any, vocab_size: int) -> int:
    """``value`` if it is a token id of a ``vocab_size`` vocabulary (an int in [0, vocab_size)), else an
    error naming ``name``: the one rule of a token id's range (tensors of ids: ``models.common.check_ids``)."""
    if not is_int(value):
        raise ArgumentTypeError(f"{name} must be an int token id, got {shown(value)}")
    if not 0 <= value < vocab_size:
        raise GlassformerError(token_id_error(name, value, vocab_size))
    return value


def token_id_error(name: str, bad: int, vocab_size: int) -> str:
    """The message of an id out of range, shared by every place that checks ids."""
    return f"token id {bad} in {name} is out of range: expected 0 <= id < vocab_size={vocab_size}"


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
    if is_int(value) and (low is None or value >= low) and (high is None or value <= high):
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
    raise GlassformerError(f"{name} must be {expected}, got {shown(value)}")


def shown(value: Any) -> str:
    """``repr(value)`` for an error message, cut to 80 characters (a huge int or a long string stays
    one short line)."""
    if is_int(value) and abs(value) >= 10**30:
        return f"a{' negative' if value < 0 else 'n'} int of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_number(name: str, value: Any, low: float | None = None, high: float | None = None, *,
                 low_open: bool = False, allow_none: bool = False) -> float | None:
    """``value`` as a float if it is a finite real number in range, else a ValueError naming ``name``.

    NaN and infinity are always refused. ``low_open`` makes the lower bound exclusive (``> low``).
    Returns ``float(value)`` (or None when ``allow_none`` and ``value`` is None).
    """
    if value is None and allow_none:
        return None
    number = value if is_number(value) else None
    if isinstance(number, int) and abs(number) > 2**1023:  # too large for a float: math.isfinite would raise
        number = None
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
    raise GlassformerError(f"{name} must be {expected}, got {shown(value)}")


def check_seed(name: str, value: Any, *, allow_none: bool = False) -> int | None:
    """``value`` if it is an int in [0, 2**63 - 1] (what torch's generators accept), else an error naming ``name``."""
    return check_int(name, value, 0, MAX_SEED, allow_none=allow_none)


def check_inside(folder: str | Path, name: Any, what: str = "file") -> Path:
    """The path of ``name`` inside ``folder``, refusing any name that would leave it.

    A model folder names its own files (the shards of ``model.safetensors.index.json``, say); such a
    name must be a plain relative path: not absolute, no ``..``, and (after following symbolic links)
    still inside ``folder``. One exception keeps the Hugging Face cache working: a folder
    ``.../snapshots/REV`` may link into the ``.../blobs`` folder next to ``snapshots``.

    Args:
        folder: the model folder.
        name: the file's name as the folder's own files spell it (anything else is refused).
        what: how to call the file in the error message ("shard", "file").
    Returns:
        ``folder / name``. Raises :class:`BadFileError` naming the file otherwise.
    """
    folder = Path(folder)
    if not isinstance(name, str) or not name or "\x00" in name:
        raise BadFileError(f"{str(folder)!r} names a {what} {name!r:.80}, which is not a file name")
    parts = Path(name).parts
    if Path(name).is_absolute() or os.path.isabs(name) or ".." in parts or name.startswith("~"):
        raise BadFileError(f"{str(folder)!r} names the {what} {name!r}, outside the folder (only plain "
                           "names inside the model folder are read)")
    path = folder / name
    root = folder.resolve()
    allowed = [root]
    if root.parent.name == "snapshots":  # Hugging Face cache: snapshots/REV/FILE -> ../../blobs/HASH
        allowed.append(root.parent.parent / "blobs")
    target = path.resolve()
    if not any(target == base or base in target.parents for base in allowed):
        raise BadFileError(f"{str(path)!r} leads outside the model folder (to {str(target)!r}); "
                           "glassformer reads only files inside it")
    return path


MAX_JSON_BYTES = 1 << 30  # a config or tokenizer file larger than 1 GiB is not one


def load_json(path: str | Path, what: str = "file") -> Any:
    """The JSON value of the file ``path``; every way the file can be unusable is a one-line error.

    A missing file is a :class:`MissingFileError`; a folder (or a device, a pipe), a file over
    :data:`MAX_JSON_BYTES`, bytes that are not UTF-8, invalid JSON (or a nesting too deep to parse) a
    :class:`BadFileError` naming the file. Permission problems stay ``PermissionError`` (an
    ``OSError``, which the command line also prints as one line).
    """
    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"{what} {str(path)!r} does not exist")
    if not path.is_file():
        raise BadFileError(f"{what} {str(path)!r} is not a file")
    if path.stat().st_size > MAX_JSON_BYTES:
        raise BadFileError(f"{what} {str(path)!r} is {path.stat().st_size:,} bytes, too large for a JSON "
                           f"{what} (at most {MAX_JSON_BYTES:,})")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise BadFileError(f"{what} {str(path)!r} is not UTF-8 text ({error.reason} at byte {error.start})") from None
    except json.JSONDecodeError as error:
        raise BadFileError(f"{what} {str(path)!r} is not valid JSON ({error.msg} at line {error.lineno} "
                           f"column {error.colno})") from None
    except RecursionError:
        raise BadFileError(f"{what} {str(path)!r} is nested too deeply to read") from None
