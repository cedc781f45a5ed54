"""The command line's help and frame in Chinese under ``--lang zh`` (anywhere on the line) or a Chinese
locale; English by default; no torch imported to answer (issue 34 point 4). Every verb's description,
option help, group title and epilog has its Chinese text: a new or edited English one fails here."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from glassformer.cli.zh import ARGPARSE_ZH, CLI_TEXT, cli_lang, move_lang

SCRIPT = """
import sys
from glassformer.cli import main
try:
    code = main({argv!r})
except SystemExit as stop:
    code = stop.code
print("torch loaded:", "torch" in sys.modules)
sys.exit(code)
"""


def _run(argv: list[str], lang_env: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("LC_ALL", "LC_MESSAGES", "LANG")}
    if lang_env is not None:
        env["LANG"] = lang_env
    return subprocess.run([sys.executable, "-c", SCRIPT.format(argv=argv)], capture_output=True, text=True,
                          env=env, timeout=600)


@pytest.mark.parametrize("argv, lang_env", [
    (["--lang", "zh", "train", "--help"], None),
    (["train", "--help", "--lang", "zh"], "C"),
    (["--help"], "zh_CN.UTF-8"),
])
def test_help_frame_in_chinese_without_torch(argv: list[str], lang_env: str | None) -> None:
    done = _run(argv, lang_env)
    assert done.returncode == 0, done.stderr
    assert "用法：glassformer" in done.stdout and "usage:" not in done.stdout
    assert "torch loaded: False" in done.stdout


def test_every_verb_summary_in_chinese() -> None:
    """A new verb without a Chinese one-line summary fails here; the summaries show under zh."""
    from glassformer.cli import VERBS
    from glassformer.cli.zh import VERB_HELP_ZH

    assert set(VERB_HELP_ZH) == set(VERBS)
    done = _run(["--help"], "zh_CN.UTF-8")
    assert VERB_HELP_ZH["train"][:10] in done.stdout and "train on your own" not in done.stdout


def test_help_english_by_default() -> None:
    done = _run(["--help"], "C")
    assert "usage: glassformer" in done.stdout and "看得见" not in done.stdout
    assert "torch loaded: False" in done.stdout


def test_usage_errors_in_chinese() -> None:
    """Missing argument, unknown option and "did you mean" in Chinese; exit 2, one line, no torch."""
    done = _run(["--lang", "zh", "generate", "ckpt", "--prompt", "a", "--max_new_token", "5"], None)
    assert done.returncode == 2
    assert "无法识别的参数：--max_new_token 5" in done.stderr and "你是不是想写 --max_new_tokens" in done.stderr
    assert "torch loaded: False" in done.stdout
    done = _run(["eval"], "zh_CN.UTF-8")
    assert "glassformer eval：错误：缺少以下必需参数：checkpoint" in done.stderr


@pytest.mark.parametrize("argv, lang_env, message", [
    (["--lang", "zh", "train", "--max_stpes", "5"], None,
     "glassformer：错误：未知选项 --max_stpes（你是不是想写 --max_steps？）；glassformer train --help 列出了所有的键"),
    (["recipe", "x", "--zzz", "1"], "zh_CN.UTF-8",
     "glassformer：错误：未知选项 --zzz；glassformer train --help 列出了所有的键"),
    (["train", "--lang", "zh", "--lr"], None, "glassformer：错误：覆盖项 --lr 缺少值"),
    (["train", "--lr"], "C", "glassformer: error: override --lr has no value"),
    (["train", "--max_stpes", "5"], "C",
     "glassformer: error: unknown option --max_stpes (did you mean --max_steps?); glassformer train --help "
     "lists the keys"),
])
def test_option_errors_in_the_command_lines_language(argv: list[str], lang_env: str | None, message: str) -> None:
    """The option errors glassformer finds itself (train's and recipe's keys) speak the language argparse's do."""
    done = _run(argv, lang_env)
    assert done.returncode == 2 and done.stderr == message + "\n" and "torch loaded: False" in done.stdout


@pytest.mark.parametrize("argv, lang_env, hint", [
    (["trian", "--data", "x.txt"], "C", " (did you mean train?) (see 'glassformer --help')"),
    (["--lang", "zh", "genrate"], None, "（你是不是想写 generate？）（参见 'glassformer --help'）"),
])
def test_a_mistyped_verb_gets_the_closest_one(argv: list[str], lang_env: str | None, hint: str) -> None:
    done = _run(argv, lang_env)
    assert done.returncode == 2 and done.stderr.endswith(hint + "\n") and done.stderr.count("\n") == 1
    assert repr(argv[-1] if argv[0] == "--lang" else argv[0]) in done.stderr
    assert "torch loaded: False" in done.stdout
    far = _run(["xyzzy"], "C")
    assert far.returncode == 2 and "invalid choice: 'xyzzy'" in far.stderr and "did you mean" not in far.stderr


def test_lang_resolution_and_hand_on() -> None:
    assert cli_lang(["--lang", "zh", "train"], {}) == "zh"
    assert cli_lang(["train", "--lang=en"], {"LANG": "zh_CN.UTF-8"}) == "en"
    assert cli_lang(["train"], {"LC_ALL": "zh_TW.UTF-8"}) == "zh"
    assert cli_lang(["train"], {"LANG": "en_US.UTF-8"}) == "en"
    assert move_lang(["--lang", "zh", "demo", "--steps", "3"], ("demo",)) == ["demo", "--lang", "zh", "--steps", "3"]
    assert move_lang(["train", "--lang=zh", "--max_steps", "3"], ("demo",)) == ["train", "--max_steps", "3"]


def test_locale_rule() -> None:
    """The first of LC_ALL, LC_MESSAGES, LANG that is set decides (the CLI and the reports share the rule)."""
    from glassformer.locale import locale_lang

    for env, lang in (({}, "en"), ({"LANG": "zh_CN.UTF-8"}, "zh"), ({"LC_ALL": "C", "LANG": "zh_CN"}, "en"),
                      ({"LC_MESSAGES": "zh_TW"}, "zh"), ({"LANG": "en_US.UTF-8"}, "en"),
                      ({"LC_ALL": "", "LANG": "zh"}, "zh")):
        assert locale_lang(env) == lang, env


def test_translations_keep_placeholders() -> None:
    """Every Chinese text has exactly the English one's %-placeholders / {fields}."""
    for english, chinese in ARGPARSE_ZH.items():
        assert sorted(re.findall(r"%\(\w+\)\w|%\w", english)) == sorted(re.findall(r"%\(\w+\)\w|%\w", chinese))
    for key, both in CLI_TEXT.items():
        assert set(re.findall(r"{(\w+)}", both["en"])) == set(re.findall(r"{(\w+)}", both["zh"])), key


def _verb_parsers() -> dict:
    import argparse

    from glassformer.cli import build_parser

    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_every_option_help_has_chinese_and_none_is_stale() -> None:
    import argparse

    from glassformer.cli.help_zh import HELP_ZH

    used = set()
    for verb, parser in _verb_parsers().items():
        for action in parser._actions:
            if action.dest == "help" or action.help == argparse.SUPPRESS:
                continue
            assert action.help, f"{verb} {action.option_strings or action.dest}: no help string"
            assert action.help in HELP_ZH, f"{verb} {action.option_strings or action.dest}: {action.help!r}"
            used.add(action.help)
    assert set(HELP_ZH) == used, f"stale: {sorted(set(HELP_ZH) - used)}"
    for english, chinese in HELP_ZH.items():
        assert sorted(re.findall(r"%\(\w+\)\w", english)) == sorted(re.findall(r"%\(\w+\)\w", chinese)), english


def test_every_description_group_and_epilog_has_chinese() -> None:
    """Descriptions and group titles all have Chinese ones; in each epilog, every line that is not an
    example command or a key list is Chinese after translation, and the examples are unchanged."""
    from glassformer.cli import VERBS
    from glassformer.cli.help_zh import DESCRIPTION_ZH, GROUP_ZH, PARAGRAPH_ZH, PHRASE_ZH, translate_epilog

    assert set(DESCRIPTION_ZH) == set(VERBS)
    parsers = _verb_parsers()
    titles = {group.title for parser in parsers.values() for group in parser._action_groups}
    assert set(GROUP_ZH) == titles - {"positional arguments", "options"}

    def commands(text: str) -> list[str]:  # the example command lines, without their notes
        lines = re.findall(r"^(?: *|example: |示例：)(glassformer [a-z]+ .*)$", text, re.M)
        return [re.split(r"\s{2,}|[#(（]", line)[0].strip() for line in lines]

    epilogs = {verb: parser.epilog for verb, parser in parsers.items() if parser.epilog}
    for verb, english in epilogs.items():
        chinese = translate_epilog(english)
        assert commands(chinese) == commands(english), verb
        for line in chinese.split("\n"):
            english_words = len(re.findall(r"\b[a-z]{2,}\b", re.sub(r"[^\x00-\x7f].*", "", line)))
            if english_words >= 3 and line.isascii():  # only commands, key lists and model fields stay ASCII
                assert re.match(r" *(glassformer |--\w+ |\w+=)", line), f"{verb}: {line!r}"
    for key in [*PARAGRAPH_ZH, *PHRASE_ZH]:  # no stale entry
        assert any(key in english for english in epilogs.values()), key


def test_train_key_comments_have_chinese() -> None:
    """train --help lists the config keys with defaults and comments: each comment has its Chinese one."""
    from pathlib import Path

    import glassformer
    from glassformer.cli.commands.overrides import dataclass_keys
    from glassformer.cli.help_zh import TRAIN_KEY_ZH, translate_epilog

    config = Path(glassformer.__file__).parent / "training" / "config.py"
    commented = {name for name, _, comment in dataclass_keys(config, "TrainConfig") if comment}
    assert set(TRAIN_KEY_ZH) == commented
    chinese = translate_epilog(_verb_parsers()["train"].epilog)
    for name in commented:
        line = next(line for line in chinese.split("\n") if line.startswith(f"  --{name} "))
        assert line.endswith(TRAIN_KEY_ZH[name]), line


@pytest.mark.parametrize("verb", ["demo", "prepare", "train", "recipe", "eval", "generate", "translate", "inspect",
                                  "convert", "embed", "sae", "bench"])
def test_verb_help_in_chinese_fits_the_terminal(verb: str, capsys: pytest.CaptureFixture,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Each verb's --help under zh: its description and every option's help in Chinese, no line wider than
    the terminal's 80 columns (Chinese characters count two) but for example commands and key lists."""
    from glassformer.cli import main
    from glassformer.cli.help_zh import DESCRIPTION_ZH, HELP_ZH
    from glassformer.io.textwidth import display_width

    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as stop:
        main(["--lang", "zh", verb, "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert DESCRIPTION_ZH[verb][:12] in out.replace("\n", "")
    for english in HELP_ZH:
        assert english not in out.replace("\n", " ")
    wide = [line for line in out.split("\n") if display_width(line) > 80 and not line.isascii()
            and not line.startswith("  --")]  # train's key list: one key a line, as in English
    assert wide == []


@pytest.mark.parametrize("columns", [80, 100, 50])
def test_train_key_comments_keep_their_column_in_chinese(columns: int, capsys: pytest.CaptureFixture,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``train --help`` under zh: a key's comment too long for the terminal wraps under itself (its column,
    as every other comment's), or under the key on a terminal too narrow for the column; no line too wide."""
    from glassformer.cli import main
    from glassformer.io.textwidth import display_width

    monkeypatch.setenv("COLUMNS", str(columns))
    with pytest.raises(SystemExit):
        main(["--lang", "zh", "train", "--help"])
    lines = capsys.readouterr().out.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("  --objective "))
    block = lines[start:next(i for i in range(start, len(lines)) if not lines[i].startswith("  "))]
    keys = [re.fullmatch(r"(  --\w+ \S+ +)\S.*", line) for line in block]
    column = display_width(next(key for key in keys if key)[1])
    wide = columns - 2 - column >= 20  # the comments beside the keys
    assert column == 35 and len(block) > 50
    for line, key in zip(block, keys):
        assert display_width(line) <= columns - 2 or line.isascii(), line
        if key:
            assert display_width(key[1]) == column, line  # every comment in one column
        elif not line.startswith("  --"):  # a comment's continuation
            assert line.startswith(" " * (column if wide else 6)) and line[column if wide else 6] != " ", line
    assert sum(key is None for key in keys) >= (3 if wide else 1), "the test shows wrapped comments"


def test_generate_help_in_chinese_without_torch() -> None:
    done = _run(["--lang", "zh", "generate", "--help"], None)
    assert done.returncode == 0, done.stderr
    assert "打印每一步的最佳候选和所选的词元" in done.stdout and "print each step" not in done.stdout
    assert "torch loaded: False" in done.stdout


def test_wrap_columns_counts_columns_and_keeps_punctuation() -> None:
    from glassformer.cli.help_zh import wrap_columns
    from glassformer.io.textwidth import display_width

    text = "在整个文件上为检查点打分：损失、困惑度（字符级模型还有每字符比特数）。目标 training.json，除非另行给出。"
    for width in range(16, 60):  # from the longest word (training.json，) up
        lines = wrap_columns(text, width)
        assert "".join(lines).replace(" ", "") == text.replace(" ", "")
        assert all(display_width(line) <= width for line in lines), width
        assert not any(line[0] in "，。；：）、" or line[-1] == "（" for line in lines), lines
    assert wrap_columns("one two three", 7) == ["one two", "three"]
    for width in range(1, 6):  # narrower than the punctuation rules can honour: no line is lost or empty
        lines = wrap_columns("数）。（一）二", width)
        assert "".join(lines) == "数）。（一）二" and all(lines), (width, lines)
