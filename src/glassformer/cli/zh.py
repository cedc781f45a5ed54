"""The command line's own frame in Chinese (argparse's messages, the top-level help, the verbs' summaries,
the "did you mean" hint), from locale/cli.json; each verb's own help is in cli/help_zh.py. Torch-free."""

import os
from collections.abc import Mapping, Sequence

from ..locale import catalogue

_CLI = catalogue("cli")
ARGPARSE_ZH: dict[str, str] = _CLI["argparse"]  # argparse's own strings (its gettext keys), same %-placeholders
VERB_HELP_ZH: dict[str, str] = _CLI["verb_help"]  # each verb's one-line summary in ``glassformer --help``
CLI_TEXT: dict[str, dict[str, str]] = _CLI["cli_text"]  # the CLI's frame texts by key: {"en": ..., "zh": ...}


def cli_text(key: str, lang: str = "en", **fields: object) -> str:
    """The CLI frame text ``key`` in ``lang`` ("en" or "zh"), its ``{fields}`` filled in."""
    return CLI_TEXT[key][lang].format(**fields)


def argparse_zh(message: str) -> str:
    """argparse's gettext hook under zh: its string in Chinese, or unchanged when not in the table."""
    return ARGPARSE_ZH.get(message, message)


def locale_lang(environ: Mapping[str, str] | None = None) -> str:
    """viz/i18n.py's rule, here so the CLI need not load glassformer.viz (which loads torch): "zh" when
    the first of LC_ALL, LC_MESSAGES, LANG that is set is Chinese, else "en" (tests check they agree)."""
    env = os.environ if environ is None else environ
    value = next((env[name] for name in ("LC_ALL", "LC_MESSAGES", "LANG") if env.get(name)), "")
    return "zh" if value.lower().startswith("zh") else "en"


def cli_lang(words: Sequence[str], environ: Mapping[str, str] | None = None) -> str:
    """The language of the command line: the last ``--lang X``/``--lang=X`` among ``words`` when it is
    "zh" or "en", else the locale's (LC_ALL, LC_MESSAGES, LANG). A bad value is left to the verb's check."""
    lang = _without_lang(words)[1]
    return lang if lang in ("en", "zh") else locale_lang(environ)


def _without_lang(words: Sequence[str]) -> tuple[list[str], str | None]:
    """``words`` without any ``--lang X`` or ``--lang=X`` before a ``--``, and the last X (None: none)."""
    kept, lang, i = [], None, 0
    while i < len(words):
        word = words[i]
        if word == "--":
            kept += words[i:]
            break
        if word == "--lang" and i + 1 < len(words):
            lang, i = words[i + 1], i + 2
            continue
        if word.startswith("--lang="):
            lang, i = word.split("=", 1)[1], i + 1
            continue
        kept.append(word)
        i += 1
    return kept, lang


def move_lang(words: list[str], verbs_with_lang: Sequence[str]) -> list[str]:
    """``words`` without any ``--lang X`` pair, given back once after the verb when the verb takes
    ``--lang`` (demo, inspect): ``glassformer --lang zh demo`` = ``glassformer demo --lang zh``."""
    kept, lang = _without_lang(words)
    verb = next((w for w in kept if not w.startswith("-")), None)
    if lang is not None and verb in verbs_with_lang:
        at = kept.index(verb) + 1
        kept[at:at] = ["--lang", lang]
    return kept
