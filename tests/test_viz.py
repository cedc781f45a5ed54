"""plot_attention writes readable PNGs, CJK labels included."""

import warnings

import pytest
import torch

from glassformer import TransformerLM
from glassformer.viz import plot_attention
from glassformer.viz.plots import cjk_font_families


def test_plot_attention_writes_a_layer_by_head_grid(tmp_path):
    model = TransformerLM(vocab_size=20, d_model=16, n_heads=2, n_layers=3, d_ff=32)
    _, attn = model(torch.randint(0, 20, (1, 6)), return_attn=True)
    path = plot_attention(attn, list("abcdef"), tmp_path / "attn.png", title="test")
    from matplotlib import image

    pixels = image.imread(path)
    assert pixels.shape[0] > pixels.shape[1]  # 3 rows (layers) x 2 columns (heads): taller than wide


def test_plot_attention_renders_cjk_without_missing_glyphs(tmp_path):
    if len(cjk_font_families()) < 2:
        pytest.skip("no CJK font installed (apt install fonts-noto-cjk)")
    model = TransformerLM(vocab_size=20, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    _, attn = model(torch.randint(0, 20, (1, 5)), return_attn=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns "Glyph ... missing from font(s)"
        plot_attention(attn, list("春天来了，"), tmp_path / "cjk.png")


def test_plot_attention_checks_labels(tmp_path):
    attn = [torch.rand(1, 2, 4, 4)]
    with pytest.raises(ValueError, match=r"got 3 query and 3 key labels for weights of shape \(Tq=4, Tk=4\)"):
        plot_attention(attn, list("abc"), tmp_path / "x.png")
