"""plot_attention writes readable PNGs, CJK labels included (with the font subset the package ships)."""

import warnings
from pathlib import Path

import pytest
import torch

from glassformer import TransformerLM
from glassformer.viz import plot_attention, plots
from glassformer.viz.plots import cjk_font_families


def test_plot_attention_writes_a_layer_by_head_grid(tmp_path):
    model = TransformerLM(vocab_size=20, d_model=16, n_heads=2, n_layers=3, d_ff=32)
    _, attn = model(torch.randint(0, 20, (1, 6)), return_attn=True)
    path = plot_attention(attn, list("abcdef"), tmp_path / "attn.png", title="test")
    from matplotlib import image

    pixels = image.imread(path)
    assert pixels.shape[0] > pixels.shape[1]  # 3 rows (layers) x 2 columns (heads): taller than wide


def _captured_figures(monkeypatch) -> list:
    """Make plots.save_figure remember each figure it writes (then write it as usual)."""
    figures, real_save = [], plots.save_figure

    def save(fig, path):
        figures.append(fig)
        return real_save(fig, path)

    monkeypatch.setattr(plots, "save_figure", save)
    return figures


def _cjk_attention(tmp_path, name: str):
    model = TransformerLM(vocab_size=20, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    _, attn = model(torch.randint(0, 20, (1, 5)), return_attn=True)
    return plot_attention(attn, list("春天来了，"), tmp_path / name)


def test_missing_cjk_glyphs_are_detected(tmp_path, monkeypatch):
    """With DejaVu Sans alone matplotlib warns about each missing glyph: the check below can fail."""
    monkeypatch.setattr(plots, "cjk_font_families", lambda: ["DejaVu Sans"])
    with pytest.warns(UserWarning, match=r"Glyph \d+ .* missing from font\(s\) DejaVu Sans"):
        _cjk_attention(tmp_path, "tofu.png")


def test_the_shipped_cjk_font_comes_first_even_without_an_installed_one(monkeypatch):
    from matplotlib import font_manager

    kept = [f for f in font_manager.fontManager.ttflist if "CJK" not in f.name]
    monkeypatch.setattr(font_manager.fontManager, "ttflist", kept)  # a machine without fonts-noto-cjk
    assert cjk_font_families() == ["DejaVu Sans", plots.BUNDLED_CJK_FAMILY]
    assert cjk_font_families() == ["DejaVu Sans", plots.BUNDLED_CJK_FAMILY]  # registered once
    assert sum(f.name == plots.BUNDLED_CJK_FAMILY for f in font_manager.fontManager.ttflist) == 1


def test_plot_attention_renders_cjk_without_missing_glyphs(tmp_path, monkeypatch):
    families = cjk_font_families()
    assert families[:2] == ["DejaVu Sans", plots.BUNDLED_CJK_FAMILY]
    from matplotlib import font_manager, ft2font

    figures = _captured_figures(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns "Glyph ... missing from font(s)" when it draws tofu
        path = _cjk_attention(tmp_path, "cjk.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    (fig,) = figures
    labels = [t for ax in fig.axes for t in ax.get_xticklabels() + ax.get_yticklabels()]
    assert {t.get_text() for t in labels} == set("春天来了，")
    cjk_file = font_manager.findfont(font_manager.FontProperties(family=families[1]), fallback_to_default=False)
    assert "DejaVu" not in Path(cjk_file).name
    for label in labels:
        assert label.get_fontfamily() == families  # Latin from DejaVu Sans, the rest from the CJK font
        for char in label.get_text():  # every label character has a glyph in the CJK font
            assert ft2font.FT2Font(cjk_file).get_char_index(ord(char)) != 0, char


def test_plot_attention_checks_labels(tmp_path):
    attn = [torch.rand(1, 2, 4, 4)]
    with pytest.raises(ValueError, match=r"got 3 query and 3 key labels for weights of shape \(Tq=4, Tk=4\)"):
        plot_attention(attn, list("abc"), tmp_path / "x.png")
