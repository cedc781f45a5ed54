"""PNG plots of attention heads over training, from the induction recipe's history: records
{"step", "loss_first", "loss_repeat", "previous_token": L x h, "induction": L x h}."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .plots import pyplot, save_figure


def plot_phase_change(history: Sequence[dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """Loss on each copy and the best previous-token and induction scores against the step (two panels);
    returns the PNG's path."""
    plt = pyplot()
    steps = [r["step"] for r in history]
    fig, (loss_ax, score_ax) = plt.subplots(2, 1, figsize=(7, 5.2), sharex=True)
    loss_ax.plot(steps, [r["loss_first"] for r in history], label="first copy (unpredictable)", color="tab:gray")
    loss_ax.plot(steps, [r["loss_repeat"] for r in history], label="repeated copy", color="tab:red")
    loss_ax.set_ylabel("next-token loss")
    loss_ax.legend(loc="center right")
    loss_ax.set_title(title or "the phase change: loss on random tokens repeated twice")
    for key, label, color in (("previous_token", "best previous-token head", "tab:blue"),
                              ("induction", "best induction head", "tab:green")):
        score_ax.plot(steps, [max(max(row) for row in r[key]) for r in history], label=label, color=color)
    score_ax.set_ylabel("attention score")
    score_ax.set_xlabel("training step")
    score_ax.set_ylim(0, 1.02)
    score_ax.legend(loc="center right")
    return save_figure(fig, path)


def plot_head_scores(history: Sequence[dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """Every head's scores against the step (a panel per layer and score, a line per head); returns the path."""
    plt = pyplot()
    steps = [r["step"] for r in history]
    n_layers, n_heads = len(history[0]["induction"]), len(history[0]["induction"][0])
    fig, axes = plt.subplots(2, n_layers, figsize=(3.6 * n_layers, 5.2), sharex=True, sharey=True, squeeze=False)
    for row, (key, label) in enumerate((("previous_token", "previous-token score"), ("induction", "induction score"))):
        for layer in range(n_layers):
            ax = axes[row][layer]
            for head in range(n_heads):
                ax.plot(steps, [r[key][layer][head] for r in history], label=f"head {head}")
            ax.set_ylim(0, 1.02)
            ax.set_title(f"layer {layer}: {label}", fontsize=10)
            if row == 1:
                ax.set_xlabel("training step")
    axes[0][-1].legend(fontsize=8, loc="upper left")
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)
