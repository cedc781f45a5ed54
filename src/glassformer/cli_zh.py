"""Chinese text of the command line's own frame (``--lang zh`` anywhere on the line, or a Chinese locale).

argparse's frame (usage, option groups, "the following arguments are required", "unrecognized
arguments", "invalid choice"), the top-level description and epilog, the verbs' one-line summaries and
the "did you mean" hint; each verb's own help is in cli_help_zh.py. Torch-free: the CLI reads this
before any verb runs. The vocabulary follows viz/messages_zh.py.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

# argparse's own strings (its gettext keys, Python 3.11) -> Chinese, with the same %-placeholders.
ARGPARSE_ZH = {
    "usage: ": "用法：",
    "positional arguments": "位置参数",
    "options": "选项",
    "show this help message and exit": "显示本帮助并退出",
    "the following arguments are required: %s": "缺少以下必需参数：%s",
    "unrecognized arguments: %s": "无法识别的参数：%s",
    "argument %(argument_name)s: %(message)s": "参数 %(argument_name)s：%(message)s",
    "invalid choice: %(value)r (choose from %(choices)s)": "无效的选项值：%(value)r（可选：%(choices)s）",
    "invalid %(type)s value: %(value)r": "无效的 %(type)s 值：%(value)r",
    "expected one argument": "需要一个值",
    "expected at most one argument": "最多需要一个值",
    "expected at least one argument": "至少需要一个值",
    "show program's version number and exit": "显示版本号并退出",
}

# Each verb's one-line summary in ``glassformer --help`` (tests: every verb of cli.VERBS has one).
VERB_HELP_ZH = {
    "demo": "训练课程里的小型字符级语言模型，并展示每一步",
    "train": "用 YAML 配置在你自己的文本文件上训练（clm、mlm、prefix-LM 或 seq2seq）",
    "recipe": "按名称或 YAML 训练并评估一个自带的配方（语料、训练、评估）",
    "eval": "在一个文本文件（或平行文件）上评估检查点",
    "generate": "续写（或翻译）--prompt 文本：贪心、采样、束搜索、流式输出、逐步轨迹",
    "translate": "逐行批量翻译一个文件或标准输入（给出 --ref 时计算 sacreBLEU）",
    "inspect": "写出一个离线 HTML 报告：注意力、形状、生成过程",
    "convert": "把 Hugging Face 模型文件夹转换为 glassformer 检查点，或反向转换",
    "embed": "打印句子嵌入或它们之间的余弦相似度",
    "sae": "在检查点的一个钩子点上训练稀疏自编码器；指标与特征页面",
    "bench": "与 Hugging Face GPT-2 和 nanoGPT 比较训练与生成速度",
}

# The CLI's own frame texts, by key: English and Chinese, with the same {fields}.
CLI_TEXT = {
    "description": {"en": "Transformers you can see through: train, generate, inspect.",
                    "zh": "看得见内部的 Transformer：训练、生成、检查。"},
    "epilog": {"en": "Options are spelled as the Python keywords they set (--max_new_tokens, --top_k); "
                     "the dashed spelling (--max-new-tokens) is accepted too.",
               "zh": "选项的写法与它们设置的 Python 关键字相同（--max_new_tokens、--top_k）；"
                     "也接受连字符写法（--max-new-tokens）。"},
    "did_you_mean": {"en": " (options are never abbreviated: did you mean {option}?)",
                     "zh": "（选项不能缩写：你是不是想写 {option}？）"},
    "see_help": {"en": " (see '{prog} --help')", "zh": "（参见 '{prog} --help'）"},
    "error": {"en": "{prog}: error: {message}", "zh": "{prog}：错误：{message}"},
}


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
    lang = None
    for i, word in enumerate(words):
        if word == "--":
            break
        if word == "--lang" and i + 1 < len(words):
            lang = words[i + 1]
        elif word.startswith("--lang="):
            lang = word.split("=", 1)[1]
    return lang if lang in ("en", "zh") else locale_lang(environ)


def move_lang(words: list[str], verbs_with_lang: Sequence[str]) -> list[str]:
    """``words`` without any ``--lang X`` pair, given back once after the verb when the verb takes
    ``--lang`` (demo, inspect): ``glassformer --lang zh demo`` = ``glassformer demo --lang zh``."""
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
    verb = next((w for w in kept if not w.startswith("-")), None)
    if lang is not None and verb in verbs_with_lang:
        at = kept.index(verb) + 1
        kept[at:at] = ["--lang", lang]
    return kept
