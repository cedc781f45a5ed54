"""PNG plots: attention weights as a grid of heatmaps (layers x heads), and loss curves."""

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..errors import GlassformerError
from ..io.fileio import MARKER, atomic_write, check_output_file

CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans CJK TC", "WenQuanYi Zen Hei",
             "WenQuanYi Micro Hei", "Droid Sans Fallback", "AR PL UMing CN", "Source Han Sans SC")
# Shipped (SIL OFL 1.1, fonts/OFL.txt): the common characters of Noto Sans CJK SC, cut by tools/subset_cjk_font.py.
BUNDLED_CJK_FONT = Path(__file__).with_name("fonts") / "NotoSansCJKsc-Subset.otf"
BUNDLED_CJK_FAMILY = "Noto Sans CJK SC Subset"


def cjk_font_families() -> list[str]:
    """Font families to use: DejaVu Sans, the shipped CJK subset (registered once per process), then the first
    installed CJK font (matplotlib falls back along the list per glyph, so Chinese labels render anywhere)."""
    from matplotlib import font_manager

    if not any(f.name == BUNDLED_CJK_FAMILY for f in font_manager.fontManager.ttflist):
        font_manager.fontManager.addfont(str(BUNDLED_CJK_FONT))
    installed = {f.name for f in font_manager.fontManager.ttflist}
    return ["DejaVu Sans", BUNDLED_CJK_FAMILY] + [name for name in CJK_FONTS if name in installed][:1]


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path) -> Path:
    """Lay out, write as PNG (creating folders) and close ``fig``."""
    plt = pyplot()
    fig.tight_layout()
    path = check_output_file(path, what="figure")  # never a link, a FIFO, a user's file: before drawing
    path.parent.mkdir(parents=True, exist_ok=True)
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=110, metadata={"Software": MARKER})  # the marker: ours to replace
    plt.close(fig)
    atomic_write(path, image.getvalue(), what="figure")
    return path


def plot_losses(history: list[dict[str, Any]], path: str | Path, title: str = "training") -> Path:
    """Write train and validation loss against step (``history``: ``Trainer.train``'s) as a PNG; returns its path."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, style in (("train_loss", "-"), ("val_loss", "o-")):
        points = [(h["step"], h[key]) for h in history if key in h]
        if points:
            ax.plot(*zip(*points, strict=True), style, label=key.replace("_", " "), markersize=3)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


def plot_attention(weights: torch.Tensor | Sequence[torch.Tensor], tokens: Sequence[str], path: str | Path, *,
                   query_tokens: Sequence[str] | None = None, batch_index: int = 0,
                   layers: Sequence[int] | None = None, heads: Sequence[int] | None = None,
                   title: str | None = None) -> Path:
    """Write a PNG grid of attention heatmaps (a row per layer, a column per head) to ``path``; returns it.
    ``weights``: per-layer (B, h, Tq, Tk) tensors (``return_attn=True``), or one; ``tokens``: the key labels."""
    plt = pyplot()
    per_layer = [weights] if isinstance(weights, torch.Tensor) else list(weights)
    if not per_layer or any(w is None or w.dim() != 4 for w in per_layer):
        raise GlassformerError("weights must be (B, h, Tq, Tk) tensors, one per layer (use return_attn=True)")
    layers = list(range(len(per_layer))) if layers is None else list(layers)
    n_heads = per_layer[0].shape[1]
    heads = list(range(n_heads)) if heads is None else list(heads)
    Tq, Tk = per_layer[0].shape[2:]
    query_tokens = tokens if query_tokens is None else query_tokens
    if len(tokens) != Tk or len(query_tokens) != Tq:
        raise GlassformerError(f"got {len(query_tokens)} query and {len(tokens)} key labels for weights of shape "
                               f"(Tq={Tq}, Tk={Tk})")
    cell = max(1.6, 0.22 * max(Tq, Tk))
    with plt.rc_context({"font.family": cjk_font_families(), "axes.unicode_minus": False}):
        fig, axes = plt.subplots(len(layers), len(heads), figsize=(cell * len(heads), cell * len(layers)),
                                 squeeze=False)
        show_labels = max(Tq, Tk) <= 40
        for r, layer in enumerate(layers):
            for c, head in enumerate(heads):
                ax = axes[r][c]
                grid = per_layer[layer][batch_index, head].detach().float().cpu().numpy()
                ax.imshow(grid, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
                ax.set_title(f"layer {layer} · head {head}", fontsize=8)
                if show_labels:
                    ax.set_xticks(range(Tk), [repr(t)[1:-1] for t in tokens], rotation=90, fontsize=7)
                    ax.set_yticks(range(Tq), [repr(t)[1:-1] for t in query_tokens], fontsize=7)
                else:
                    ax.set_xticks([])
                    ax.set_yticks([])
        if title:
            fig.suptitle(title)
        return save_figure(fig, path)
