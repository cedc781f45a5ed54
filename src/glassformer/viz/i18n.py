"""The words a learner reads, in English and Chinese (locale/report.en.json, report.zh.json: same keys and
``{fields}``). Error messages stay in English: they are searched for, quoted in issues and matched by tests."""

import string
from collections.abc import Mapping

from ..errors import GlassformerError
from ..io.checks import shown
from ..io.textwidth import format_columns
from ..locale import catalogue, locale_lang

LANGS = ("en", "zh")
HTML_LANG = {"en": "en", "zh": "zh-CN"}  # the page's <html lang>: picks the CJK glyph variants
EN: dict[str, str] = catalogue("report.en")
ZH: dict[str, str] = catalogue("report.zh")
MESSAGES: dict[str, Mapping[str, str]] = {"en": EN, "zh": ZH}


def resolve_lang(lang: str | None, name: str = "lang", environ: Mapping[str, str] | None = None) -> str:
    """``lang`` checked (one of :data:`LANGS`; else a GlassformerError naming ``name``), or the locale's
    language when it is None."""
    if lang is None:
        return locale_lang(environ)
    if lang not in LANGS:
        raise GlassformerError(f"{name} must be one of {', '.join(LANGS)}, got {shown(lang)}")
    return lang


def text(key: str, lang: str = "en", **fields: object) -> str:
    """The message ``key`` in ``lang``, its ``{fields}`` filled in (widths counted in display columns)."""
    return format_columns(MESSAGES[resolve_lang(lang)][key], **fields)


def fields(message: str) -> set[str]:
    """The ``{field}`` names a message uses."""
    return {name for _, name, _, _ in string.Formatter().parse(message) if name}


def js_labels(lang: str = "en", prefix: str = "js.") -> dict[str, str]:
    """A page script's labels: the messages whose keys start with ``prefix``, without it ({fields} unfilled)."""
    table = MESSAGES[resolve_lang(lang)]
    return {key.removeprefix(prefix): value for key, value in table.items() if key.startswith(prefix)}
