"""glassformer's errors (a :class:`GlassformerError`: a mistake the user can fix, one line) and argument checks."""

from __future__ import annotations

import math
import os
import re
import reprlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported by the checks that take tensors: the command line's --help needs none
    import torch

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


class NotOursError(GlassformerError):
    """A path where glassformer would write holds something it did not write (or an input)."""


class MeasurementError(GlassformerError):
    """A user's measurement (``watch.measurements``, ``Microscope.add``) failed: raised, exited or returned too much."""


class OutOfMemoryError(GlassformerError):
    """What was asked cannot fit in the memory available (or in ``max_memory``); refused before allocating."""


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


def check_seed(name: str, value: Any, *, allow_none: bool = False) -> int | None:
    """``value`` if it is an int in [0, 2**63 - 1] (what torch's generators accept), else an error naming ``name``."""
    return check_int(name, value, 0, MAX_SEED, allow_none=allow_none)


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


def check_token_ids(ids: Any, vocab_size: int, name: str = "ids") -> None:
    """Refuse ``ids`` unless a (B, T) long/int32 tensor of ids in [0, vocab_size), naming ``name``."""
    import torch

    if not isinstance(ids, torch.Tensor):
        raise ArgumentTypeError(f"{name} must be a torch.Tensor of token ids, got {type(ids).__name__}")
    if ids.dtype not in (torch.long, torch.int32):  # what an embedding table takes
        raise ArgumentTypeError(f"{name} must be a tensor of dtype torch.long (or torch.int32), got dtype "
                                f"{ids.dtype}: convert it with ids.long()")
    if ids.dim() != 2:
        raise GlassformerError(f"{name} must have shape (B, T), got {tuple(ids.shape)}")
    if ids.numel() == 0 or torch.compiler.is_compiling():
        return
    low, high = (int(v) for v in torch.aminmax(ids))
    if low < 0 or high >= vocab_size:
        raise GlassformerError(token_id_error(low if low < 0 else high, vocab_size, name))


def check_pad(pad: torch.Tensor | None, batch: int, length: int, name: str = "pad") -> None:
    """Padding flags, when given, must be a bool tensor of shape (batch, length), True = padding."""
    import torch

    if pad is None:
        return
    if not isinstance(pad, torch.Tensor) or pad.dtype != torch.bool:
        got = pad.dtype if isinstance(pad, torch.Tensor) else type(pad).__name__
        raise ArgumentTypeError(f"{name} must be a bool tensor (True = padding), got {got}")
    if tuple(pad.shape) != (batch, length):
        raise GlassformerError(f"{name} must have shape (B, T) = {(batch, length)}, got {tuple(pad.shape)}")


def check_memory(memory: torch.Tensor | None, src_pad: torch.Tensor | None, batch: int, d_model: int) -> None:
    """A decoder's memory, when given, must be (batch, S, d_model), and its padding flags (batch, S)."""
    if memory is None:
        return
    if memory.dim() != 3 or memory.shape[0] != batch or memory.shape[2] != d_model:
        raise GlassformerError(f"memory must have shape (B={batch}, S, d={d_model}), got {tuple(memory.shape)}")
    check_pad(src_pad, batch, memory.shape[1], name="src_pad")


def check_prefix_len(prefix_len: Any, length: int | torch.Tensor | None = None,
                     batch: int | None = None) -> int | torch.Tensor:
    """``prefix_len`` (an int, or a (B,) integer tensor made long) when in [0, ``length``] and of ``batch`` rows."""
    import torch

    if isinstance(prefix_len, torch.Tensor):
        if prefix_len.dim() != 1 or prefix_len.dtype.is_floating_point or prefix_len.dtype.is_complex \
                or prefix_len.dtype == torch.bool:
            raise ArgumentTypeError(f"prefix_len must be an int or a (B,) integer tensor, got a {prefix_len.dtype} "
                                    f"tensor of shape {tuple(prefix_len.shape)}")
        if batch is not None and prefix_len.shape[0] != batch:
            raise GlassformerError(f"prefix_len must have one length per row: shape ({batch},), "
                                   f"got {tuple(prefix_len.shape)}")
        prefix_len = prefix_len.long()
        shown: Any = prefix_len.tolist()
        low_ok = bool((prefix_len >= 0).all())
        high_ok = length is None or bool((prefix_len <= torch.as_tensor(length, device=prefix_len.device)).all())
    elif is_int(prefix_len):
        shown = prefix_len
        low_ok = prefix_len >= 0
        high_ok = length is None or bool(torch.as_tensor(prefix_len <= torch.as_tensor(length)).all())
    else:
        raise ArgumentTypeError(f"prefix_len must be an int or a (B,) integer tensor, got {type(prefix_len).__name__}")
    if not (low_ok and high_ok):
        if length is None:
            raise GlassformerError(f"prefix_len must be >= 0, got {shown}")
        limit = length.tolist() if isinstance(length, torch.Tensor) else length
        raise GlassformerError(f"prefix_len={shown} is out of range: "
                               f"expected 0 <= prefix_len <= sequence length {limit}")
    return prefix_len


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
