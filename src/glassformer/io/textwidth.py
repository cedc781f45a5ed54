"""Text widths in terminal display columns, not characters (a CJK character takes two, a combining mark
none): every trace and table pads with :func:`pad` or :func:`format_columns`."""

import itertools
import re
import string
import unicodedata
from typing import Any

from ..errors import GlassformerError

ALIGNS = ("<", ">", "^")


def char_width(char: str) -> int:
    """Columns one character takes: 2 for East Asian Wide/Fullwidth, 0 for combining and zero-width, else 1."""
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def display_width(text: str) -> int:
    """Columns ``text`` takes on a terminal (see :func:`char_width`); ``len`` for ASCII."""
    return sum(char_width(c) for c in text)


def clip(text: str, width: int, keep: str = "start") -> str:
    """``text`` cut to at most ``width`` columns, keeping its start or (``keep="end"``) its end."""
    if keep not in ("start", "end"):
        raise GlassformerError(f"keep must be 'start' or 'end', got {keep!r}")
    chars = text if keep == "start" else text[::-1]
    kept = "".join(c for c, used in zip(chars, itertools.accumulate(map(char_width, chars))) if used <= width)
    return kept if keep == "start" else kept[::-1]


def pad(text: str, width: int, align: str = "<", fill: str = " ") -> str:
    """``text`` padded with ``fill`` to ``width`` display columns, aligned as ``str.format`` (never cut)."""
    if align not in ALIGNS:
        raise GlassformerError(f"align must be one of {ALIGNS}, got {align!r}")
    missing = max(0, width - display_width(text))
    left = {"<": 0, ">": missing, "^": missing // 2}[align]
    return fill * left + text + fill * (missing - left)


# [[fill]align][width][.precision][s]: the string format specs padded in columns; others go to format().
_SPEC = re.compile(r"(?:(?P<fill>.)?(?P<align>[<>^]))?(?P<width>\d+)?(?:\.(?P<precision>\d+))?s?")


class ColumnFormatter(string.Formatter):
    """``str.format`` with a string field's width and precision (``{x:<24}``) counted in display columns."""

    def format_field(self, value: Any, format_spec: str) -> str:
        """One replacement field (after ``!r``/``!s`` conversion)."""
        match = _SPEC.fullmatch(format_spec) if isinstance(value, str) and format_spec else None
        if match is None:
            return super().format_field(value, format_spec)
        if match["precision"] is not None:
            value = clip(value, int(match["precision"]))
        return pad(value, int(match["width"] or 0), match["align"] or "<", match["fill"] or " ")


_FORMATTER = ColumnFormatter()


def format_columns(template: str, /, *args: Any, **fields: Any) -> str:
    """``template.format(*args, **fields)`` with string widths counted in display columns."""
    return _FORMATTER.format(template, *args, **fields)
