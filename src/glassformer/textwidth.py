"""Text columns on a terminal: widths in display columns, not characters.

A Chinese, Japanese or Korean character (Unicode East Asian Wide or Fullwidth: 春, ，, Ａ) takes two
columns of a terminal and a combining mark none, so padding by ``len`` makes every column after such
text drift right. Every trace and table of glassformer pads with :func:`pad` (or formats with
:func:`format_columns`, which gives ``str.format``'s ``{x:<24}`` the same meaning in columns).
"""

from __future__ import annotations

import re
import string
import unicodedata
from typing import Any

from .errors import GlassformerError

ALIGNS = ("<", ">", "^")


def char_width(char: str) -> int:
    """Columns one character takes: 2 for East Asian Wide/Fullwidth, 0 for combining marks and
    zero-width controls, else 1 (East Asian Ambiguous characters count 1, as in Western terminals)."""
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def display_width(text: str) -> int:
    """Columns ``text`` takes on a terminal (see :func:`char_width`); ``len`` for ASCII."""
    return sum(char_width(c) for c in text)


def clip(text: str, width: int, keep: str = "start") -> str:
    """``text`` cut to at most ``width`` columns, keeping its start (``keep="start"``) or its end
    (``"end"``); a wide character that would straddle the edge is left out."""
    if keep not in ("start", "end"):
        raise GlassformerError(f"keep must be 'start' or 'end', got {keep!r}")
    if display_width(text) <= width:
        return text
    chars = text if keep == "start" else reversed(text)
    out, used = [], 0
    for c in chars:
        w = char_width(c)
        if used + w > width:
            break
        out.append(c)
        used += w
    return "".join(out if keep == "start" else reversed(out))


def pad(text: str, width: int, align: str = "<", fill: str = " ") -> str:
    """``text`` padded with ``fill`` to ``width`` display columns: ``"<"`` left, ``">"`` right, ``"^"``
    centred (as ``str.format``). Text already as wide or wider is returned unchanged (never cut)."""
    if align not in ALIGNS:
        raise GlassformerError(f"align must be one of {ALIGNS}, got {align!r}")
    missing = max(0, width - display_width(text))
    if align == "<":
        return text + fill * missing
    if align == ">":
        return fill * missing + text
    return fill * (missing // 2) + text + fill * (missing - missing // 2)


# [[fill]align][width][.precision][s]: the string format specs padded in columns; others go to format().
_SPEC = re.compile(r"(?:(?P<fill>.)?(?P<align>[<>^]))?(?P<width>\d+)?(?:\.(?P<precision>\d+))?s?")


class ColumnFormatter(string.Formatter):
    """``str.format`` in display columns: a string field's width and precision (``{x:<24}``, ``{x:>30.30}``)
    count columns, so CJK text lines up; numbers and other fields format as usual."""

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
