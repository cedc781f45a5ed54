"""The words a learner reads, in English and Chinese: the demo's printed steps and the HTML report's labels.

One catalogue per language (locale/report.en.json, locale/report.zh.json), the same keys in each (a test checks that,
and that each Chinese message uses the same ``{fields}`` as its English one). :func:`text` looks a
message up and fills its fields;
:func:`resolve_lang` turns ``--lang`` (or, when it is not given, the locale: ``LC_ALL``,
``LC_MESSAGES``, ``LANG``) into ``"en"`` or ``"zh"``. The Chinese follows the course's own words
(注意力、掩码、补齐、前缀 LM、交叉注意力、贪心生成……).

Error messages stay in English: they are searched for, quoted in issues and matched by tests.
"""

from __future__ import annotations

import os
import string
from collections.abc import Mapping

from ..errors import GlassformerError, shown
from ..locale import catalogue
from ..textwidth import format_columns

LANGS = ("en", "zh")
HTML_LANG = {"en": "en", "zh": "zh-CN"}  # the page's <html lang>: picks the CJK glyph variants


EN: dict[str, str] = catalogue("report.en")
ZH: dict[str, str] = catalogue("report.zh")
MESSAGES: dict[str, Mapping[str, str]] = {"en": EN, "zh": ZH}
# What the demo's and the report's English wording gives each language (same keys; checked by the tests).


def locale_lang(environ: Mapping[str, str] | None = None) -> str:
    """``"zh"`` when the locale (``LC_ALL``, then ``LC_MESSAGES``, then ``LANG``) is Chinese, else ``"en"``."""
    env = os.environ if environ is None else environ
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = env.get(name, "")
        if value:  # the first one set decides, as in POSIX
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"


def resolve_lang(lang: str | None, name: str = "lang", environ: Mapping[str, str] | None = None) -> str:
    """``lang`` checked (one of :data:`LANGS`), or the locale's language when it is None.

    Raises:
        GlassformerError: naming ``name``, the value and the languages there are.
    """
    if lang is None:
        return locale_lang(environ)
    if lang not in LANGS:
        raise GlassformerError(f"{name} must be one of {', '.join(LANGS)}, got {shown(lang)}")
    return lang


def text(key: str, lang: str = "en", **fields: object) -> str:
    """The message ``key`` in ``lang``, its ``{fields}`` filled in (``str.format``, string widths such as
    ``{context:<24}`` counted in display columns: :func:`glassformer.textwidth.format_columns`)."""
    return format_columns(MESSAGES[resolve_lang(lang)][key], **fields)


def fields(message: str) -> set[str]:
    """The ``{field}`` names a message uses."""
    return {name for _, name, _, _ in string.Formatter().parse(message) if name}


def js_labels(lang: str = "en") -> dict[str, str]:
    """The page script's labels (the ``js.`` messages, without the prefix), for the page's data."""
    table = MESSAGES[resolve_lang(lang)]
    return {key[3:]: value for key, value in table.items() if key.startswith("js.")}
