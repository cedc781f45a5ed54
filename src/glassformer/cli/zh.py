"""The command line's own frame in Chinese (argparse's messages, the top-level help, the verbs' summaries,
the "did you mean" hint), from locale/cli.json; each verb's own help is in cli/help_zh.py. Torch-free."""

from collections.abc import Mapping, Sequence

from ..locale import catalogue, locale_lang

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


def cli_lang(words: Sequence[str], environ: Mapping[str, str] | None = None) -> str:
    """The language of the command line: the last ``--lang X``/``--lang=X`` among ``words`` when it is
    "zh" or "en", else the locale's (LC_ALL, LC_MESSAGES, LANG). A bad value is left to the verb's check."""
    lang = _without_lang(words)[1]
    return lang if lang in ("en", "zh") else locale_lang(environ)


def _without_lang(words: Sequence[str]) -> tuple[list[str], str | None]:
    """``words`` without any ``--lang X`` or ``--lang=X`` before a ``--``, and the last X (None: none)."""
    kept: list[str] = []
    lang, rest = None, iter(words)
    for word in rest:
        if word == "--":
            return [*kept, word, *rest], lang
        if word.startswith("--lang="):
            lang = word.split("=", 1)[1]
        elif word == "--lang" and (value := next(rest, None)) is not None:
            lang = value
        else:
            kept.append(word)
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
