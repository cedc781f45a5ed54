"""Training's lines for a person in Chinese under ``--lang zh`` or a zh locale (issue 34, point 4): the
model line, the evaluation line, the summary, where the checkpoints are, the resume line and the Ctrl-C
resume command; English stays the default, and the two tables hold the same keys and fields."""

from __future__ import annotations

import string

import pytest

from glassformer import cli
from glassformer.training import report


@pytest.fixture(autouse=True)
def english_after():
    yield
    report.use_language("en")  # the language is the command's choice: never leak into the next test


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("hello world, a tiny corpus to train on.\n" * 100, encoding="utf-8")
    return tmp_path


def _fields(message: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(message) if name}


def test_both_languages_have_the_same_lines_and_fields():
    assert report.TEXT["en"].keys() == report.TEXT["zh"].keys()
    for key, english in report.TEXT["en"].items():
        assert _fields(report.TEXT["zh"][key]) == _fields(english), key


def _train(monkeypatch, capsys, *words, env_lang="C.UTF-8"):
    for name in ("LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANG", env_lang)
    status = cli.main(["train", "--data", "a.txt", "--eval_every", "2", "--eval_batches", "1", "--out_dir", "out",
                       *words])
    out = capsys.readouterr()
    return status, out.out, out.err


@pytest.mark.parametrize("how", ["flag", "locale"])
def test_training_prints_chinese_lines(corpus, monkeypatch, capsys, how):
    words = ["--lang", "zh"] if how == "flag" else []
    status, out, err = _train(monkeypatch, capsys, "--max_steps", "3", *words,
                              env_lang="C.UTF-8" if how == "flag" else "zh_CN.UTF-8")
    assert status == 0
    assert "模型：TransformerLM causal，2 层 × 64 宽，4 个头" in err and "个参数" in err
    assert "第 2/3 步 | 正在验证集上评估" in err
    assert out.startswith("完成：第 3 步（共 3 步）")
    assert "检查点在 out/last 和 out/best；摘要在 out/summary.json" in out
    status, out, err = _train(monkeypatch, capsys, "--max_steps", "4", "--resume", "true", *words,
                              env_lang="C.UTF-8" if how == "flag" else "zh_CN.UTF-8")
    assert status == 0 and "继续训练 out/：从第 3 步继续（共 4 步）（来自 out/ckpt-000003）" in err


def test_english_stays_the_default(corpus, monkeypatch, capsys):
    status, out, err = _train(monkeypatch, capsys, "--max_steps", "2")
    assert status == 0 and out.startswith("done: step 2 of 2 in ") and "model: TransformerLM causal" in err
    assert not any("\u4e00" <= ch <= "\u9fff" for ch in out + err)


def test_the_resume_command_after_ctrl_c_in_chinese():
    report.use_language("zh")
    assert report.say("resume_with", step=5, max_steps=10, command="glassformer train --resume true") == \
        "在第 5 步（共 10 步）中断；继续训练请运行：glassformer train --resume true"
    with pytest.raises(ValueError, match="lang must be one of en, zh, got 'fr'"):
        report.use_language("fr")


def test_the_recipe_verdict_and_summary_in_chinese():
    from glassformer.recipes.summary import recipe_summary, verdict

    models = {"prefix-LM": {"exact_match": 1.0, "symbol_accuracy": 1.0},
              "causal-LM": {"exact_match": 0.623, "symbol_accuracy": 0.9}}
    assert verdict(models) == "prefix-LM wins: 1.000 vs 0.623 exact match (causal-LM)"
    report.use_language("zh")
    assert verdict(models) == "prefix-LM 胜：完全匹配 1.000 对 0.623（causal-LM）"
    lines = recipe_summary({"task": "lm", "corpus": "tinyshakespeare", "wall_s": 12.0,
                            "samples": [{"prompt": "ROMEO:", "text": "O, she doth"}]}, "out/x/")
    assert lines == ["配方 lm（语料 tinyshakespeare）：12.0 秒", "样例 1（提示 'ROMEO:'）：", "    O, she doth",
                     "全部结果在 out/x/results.json"]


def test_other_verbs_say_where_their_output_went_in_chinese(corpus, monkeypatch, capsys):
    status, _, _ = _train(monkeypatch, capsys, "--max_steps", "2")
    assert status == 0
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert cli.main(["generate", "out/last", "--prompt", "hello", "--max_new_tokens", "3", "--json", "g.json"]) == 0
    assert "已写入 g.json" in capsys.readouterr().err
    assert cli.main(["eval", "out/last", "--data", "a.txt", "--max_batches", "1"]) == 0
    assert "正在评分：a.txt 的 " in capsys.readouterr().err
    assert cli.main(["inspect", "out/last", "--text", "hello", "--out", "r.html"]) == 0
    assert capsys.readouterr().out.startswith("报告已写入 r.html（")
