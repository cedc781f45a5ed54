"""Traces and tables line up under Chinese text: widths are display columns (a CJK character takes two),
not characters (glassformer.io.textwidth; issue 34)."""

from __future__ import annotations

import pytest
import torch

from glassformer import ModelConfig
from glassformer.errors import GlassformerError
from glassformer.generation import format_trace, trace_generation
from glassformer.io.textwidth import clip, display_width, format_columns, pad
from glassformer.models import build_model
from glassformer.tokenizers import CharTokenizer
from glassformer.viz.i18n import text


@pytest.mark.parametrize("s, width", [("abc", 3), ("春天", 4), ("春天来了，", 10), ("ａＢ", 4), ("e\u0301", 1),
                                      ("", 0), ("a春b", 4), ("\u200b", 0)])
def test_display_width_counts_wide_characters_twice(s, width):
    assert display_width(s) == width


def test_pad_and_clip_work_in_columns():
    assert pad("春天", 6) == "春天  " and pad("春天", 6, ">") == "  春天" and pad("春", 5, "^") == " 春  "
    assert pad("春天来了", 4) == "春天来了"  # never cut
    assert clip("春天来了", 5) == "春天" and clip("春天来了", 5, keep="end") == "来了"
    assert clip("ab春", 3) == "ab"  # a wide character is not split at the edge
    with pytest.raises(GlassformerError, match="align must be one of"):
        pad("x", 3, "=")
    with pytest.raises(GlassformerError, match="keep must be 'start' or 'end', got 'middle'"):
        clip("x", 3, keep="middle")


def test_format_columns_gives_string_widths_in_columns_and_leaves_numbers_alone():
    line = format_columns("{a:<6}|{b:>5}|{n:>6.2f}|{m:,}|{r!r:>8.6}", a="春天", b="ab", n=1.5, m=12345, r="春天来了")
    assert line == "春天  |   ab|  1.50|12,345|   '春天"
    assert format_columns("{0:_^6}", "你") == "__你__"


def _columns_of(lines: list[str], marker: str) -> set[int]:
    """The display column where ``marker`` starts on each line."""
    return {display_width(line[:line.index(marker)]) for line in lines}


def test_format_trace_lines_up_arrows_and_candidates_under_chinese_text():
    records = [
        {"step": 1, "context": [], "context_text": "春天来了，", "chosen": 0, "chosen_text": "花",
         "chosen_probability": 0.5, "top_k": [(0, 0.5), (1, 0.2)], "top_k_text": [("花", 0.5), ("a", 0.2)]},
        {"step": 2, "context": [], "context_text": "ab", "chosen": 1, "chosen_text": "a",
         "chosen_probability": 0.25, "top_k": [(1, 0.25), (0, 0.2)], "top_k_text": [("a", 0.25), ("花", 0.2)]},
        {"step": 3, "context": [], "context_text": "春" * 40, "chosen": 0, "chosen_text": "开",
         "chosen_probability": 0.125, "top_k": [(0, 0.1), (1, 0.1)], "top_k_text": [("开", 0.1), ("b", 0.1)]},
    ]
    lines = format_trace(records).splitlines()
    assert len(lines) == 3
    assert len(_columns_of(lines, "->")) == 1  # by characters the arrows would sit at three columns
    assert len({display_width(line[:line.rindex("  '")]) for line in lines}) == 1  # the last candidates too
    assert "…" in lines[2] and display_width(lines[2].split("  -> ")[0].strip()) <= 33  # the end, cut to 30


def test_a_real_chinese_trace_lines_up():
    corpus = "春天来了，花开了。夏天来了，雨下了。"
    tokenizer = CharTokenizer.from_text(corpus)
    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_heads=2, n_layers=1, d_ff=32,
                                    max_len=16)).eval()
    records = trace_generation(model, tokenizer.encode("春天来了，"), max_new_tokens=6, top_k=3, tokenizer=tokenizer)
    lines = format_trace(records).splitlines()
    assert len(lines) == 6 and len(_columns_of(lines, "->")) == 1


def test_the_chinese_demo_step_template_pads_in_columns():
    lines = [text("demo.step", "zh", step=i, context=repr(c), chosen=repr("花"), p="0.50", top="'花' 0.50")
             for i, c in enumerate(["春天来了，", "ab", "春a"])]
    assert len(_columns_of(lines, "->")) == 1
