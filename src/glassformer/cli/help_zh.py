"""Each verb's ``--help`` in Chinese (``--lang zh`` or a Chinese locale): :func:`translate_help` swaps in the
texts of locale/cli.json (description, option help looked up by its English text as gettext does, epilog)
and a help formatter that wraps by display columns (a Chinese character takes two). Torch-free."""

import argparse
import re
import shutil

from ..io.textwidth import display_width
from ..locale import catalogue

_CLI = catalogue("cli")
DESCRIPTION_ZH: dict[str, str] = _CLI["description"]  # each verb's description (under its usage line)
HELP_ZH: dict[str, str] = _CLI["help"]  # every option's help, by its English text
GROUP_ZH: dict[str, str] = _CLI["group"]  # option group titles, by their English text
PARAGRAPH_ZH: dict[str, str] = _CLI["paragraph"]  # epilog paragraphs, by their English opening
PHRASE_ZH: dict[str, str] = _CLI["phrase"]  # notes inside example lines
EPILOG_LINE_ZH: dict[str, str] = _CLI["epilog_line"]  # generated epilog lines, by their English start
TRAIN_KEY_ZH: dict[str, str] = _CLI["train_key"]  # train --help: each config key's comment, by key

_KEY_LINE = re.compile(r"(  --(\w+) \S+ +)\S.*")  # "  --lr 1e-3                        peak learning rate"


def wrap_columns(text: str, width: int) -> list[str]:
    """``text`` (whitespace collapsed) wrapped to lines of at most ``width`` display columns: breaks at
    spaces and between any two CJK characters, never before closing punctuation (，。；：）、) nor after
    an opening bracket."""
    tokens = re.findall(r"[\x21-\x7e]+|\s+|.", " ".join(text.split()))
    lines: list[str] = []
    line: list[str] = []  # the current line's tokens
    for token in tokens:
        if token.isspace():
            line += [" "] if line else []
            continue
        if line and display_width("".join(line) + token) > width:  # the space before token counts
            keep = len(line)
            if token in _CLOSING:  # closing punctuation never starts a line: what it closes comes down too
                keep -= 1
                while keep > 1 and line[keep] in _CLOSING:
                    keep -= 1
            while keep > 1 and line[keep - 1] in _OPENING:  # nor does an opening bracket end one
                keep -= 1
            keep = keep if "".join(line[:keep]).strip() else len(line)  # a line too narrow for the rules
            lines.append("".join(line[:keep]).rstrip())
            line = line[keep:]
            while line and line[0] == " ":
                line.pop(0)
        line.append(token)
    text = "".join(line).strip()
    return [*lines, text] if text else lines


_CLOSING = set("，。；：）、！？」")
_OPENING = set("（「")


class ColumnsHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's help layout with option help wrapped by display columns (descriptions and epilogs are
    laid out here: :func:`translate_help` wraps the descriptions)."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return wrap_columns(text, width)

    def _format_usage(self, usage: str | None, actions: list, groups: list, prefix: str | None) -> str:
        # argparse lays out the usage lines by len(prefix): "用法：" is 3 characters but 6 columns
        prefix = argparse._("usage: ") if prefix is None else prefix
        mask = "\0" * display_width(prefix)
        return super()._format_usage(usage, actions, groups, mask).replace(mask, prefix, 1)


def translate_epilog(epilog: str) -> str:
    """An epilog in Chinese: each paragraph of :data:`PARAGRAPH_ZH` whole; the other blocks line by line
    (headers from :data:`EPILOG_LINE_ZH`, notes from :data:`PHRASE_ZH`, ``train``'s key comments from
    :data:`TRAIN_KEY_ZH`), their example commands unchanged."""
    blocks = []
    for block in epilog.split("\n\n"):
        opening = next((key for key in PARAGRAPH_ZH if block.startswith(key)), None)
        blocks.append(PARAGRAPH_ZH[opening] if opening else "\n".join(map(_translate_line, block.split("\n"))))
    return "\n\n".join(blocks)


def _translate_line(line: str) -> str:
    match = _KEY_LINE.fullmatch(line)
    if match and match[2] in TRAIN_KEY_ZH:
        return match[1] + TRAIN_KEY_ZH[match[2]]
    for english, chinese in PHRASE_ZH.items():
        line = line.replace(english, chinese)
    for english, chinese in EPILOG_LINE_ZH.items():
        if line.startswith(english):
            line = chinese + line[len(english):]
            return line[:-1] + "）" if chinese.startswith("  （") else line
    return line


def translate_help(verbs: argparse._SubParsersAction) -> None:
    """Put every verb parser of ``verbs`` into Chinese: description, option help strings, epilog and a
    formatter that wraps by display columns. A help string without a translation stays English."""
    width = max(40, min(100, shutil.get_terminal_size().columns - 2))
    for verb, parser in verbs.choices.items():
        if verb in DESCRIPTION_ZH:
            parser.description = "\n".join(wrap_columns(DESCRIPTION_ZH[verb], width))
        if parser.epilog:
            parser.epilog = "\n".join(_wrap_line(line, width) for line in translate_epilog(parser.epilog).split("\n"))
        parser.formatter_class = ColumnsHelpFormatter
        for action in parser._actions:
            if isinstance(action.help, str):
                action.help = HELP_ZH.get(action.help, action.help)
        for group in parser._action_groups:
            group.title = GROUP_ZH.get(group.title, group.title)


def _wrap_line(line: str, width: int) -> str:
    """One epilog line wrapped to ``width`` columns, its indent kept; example commands stay whole. A key line
    (``  --lr 1e-3      峰值学习率``) keeps its column: the comment wraps under itself (under the key, 6 columns
    in, when the terminal leaves it fewer than 20 columns)."""
    indent = line[:len(line) - len(line.lstrip())]
    example = line.lstrip().startswith("glassformer ") and line.isascii()
    if display_width(line) <= width or example:
        return line
    key = _KEY_LINE.fullmatch(line)
    if key:
        head, comment = key[1], line[len(key[1]):]
        column = display_width(head)
        if width - column >= _MIN_COMMENT:
            first, *rest = wrap_columns(comment, width - column)
            return "\n".join([head + first, *(" " * column + part for part in rest)])
        return "\n".join([head.rstrip(), *(" " * 6 + part for part in wrap_columns(comment, width - 6))])
    return "\n".join(indent + part for part in wrap_columns(line, width - len(indent)))


_MIN_COMMENT = 20  # columns a key's comment needs beside it before it goes under the key instead
