"""Lesson 2's experiments: attention against torch.nn, why divide by √d, order blindness, positions.
Each runs in seconds on a CPU and returns its findings (``glassformer demo --lesson2`` runs them all)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..interop.torch_nn import from_torch
from ..models import TransformerLM
from ..nn import causal_mask


def attention_vs_torch(d_model: int = 32, n_heads: int = 4, T: int = 7, seed: int = 0) -> dict:
    """Our MultiHeadAttention against ``torch.nn.MultiheadAttention`` with its weights (:func:`from_torch`; torch's
    boolean mask means "True = blocked", the opposite of ours); returns the largest output and weight differences."""
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(d_model, n_heads, batch_first=True).eval()
    ours = from_torch(ref)  # qkv.weight is torch's in_proj_weight, o_proj its out_proj
    with torch.no_grad():
        x = torch.randn(2, T, d_model)
        mask = causal_mask(T)
        out, weights = ours(x, mask=mask)
        ref_out, ref_weights = ref(x, x, x, attn_mask=~mask, average_attn_weights=False)
    return {"max_out_diff": float((out - ref_out).abs().max()),
            "max_weight_diff": float((weights - ref_weights).abs().max())}


def why_scale(widths: tuple[int, ...] = (4, 16, 64, 256, 1024), T: int = 16, trials: int = 200,
              seed: int = 0) -> list[dict]:
    """Softmax saturation with and without the 1/√d scale as the width d grows (q·k of random q, k has standard
    deviation √d). Returns a row per width: the mean largest weight and gradient norm, unscaled and scaled."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for d in widths:
        q = torch.randn(trials, 1, d, generator=gen)
        k = torch.randn(trials, T, d, generator=gen)
        row = {"d": d}
        for name, scale in (("unscaled", 1.0), ("scaled", 1.0 / math.sqrt(d))):
            scores = ((q @ k.transpose(-1, -2)) * scale).squeeze(1).requires_grad_(True)  # (trials, T)
            weights = scores.softmax(-1)
            target = torch.randn(trials, T, generator=gen)
            (weights * target).sum().backward()
            row[f"max_weight_{name}"] = float(weights.detach().max(-1).values.mean())
            row[f"grad_norm_{name}"] = float(scores.grad.norm(dim=-1).mean())
        rows.append(row)
    return rows


def permutation_equivariance(T: int = 8, seed: int = 0) -> dict:
    """Without positions, permuting the input only permutes the output: the largest difference between
    f(P x) and P f(x) for a bidirectional model with ``pos="none"`` and with sinusoidal positions."""
    torch.manual_seed(seed)
    ids = torch.randint(0, 50, (1, T))
    perm = torch.randperm(T)
    found = {}
    for pos in ("none", "sinusoidal"):
        model = TransformerLM(vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=64,
                              attn="bidirectional", pos=pos).eval()
        with torch.no_grad():
            diff = (model(ids[:, perm]) - model(ids)[:, perm]).abs().max()
        found[f"max_diff_pos_{pos}"] = float(diff)
    return found


def positions_on_an_order_task(schemes: tuple[str, ...] = ("none", "sinusoidal", "learned", "rope", "alibi"),
                               steps: int = 300, T: int = 12, vocab: int = 16, seed: int = 0) -> list[dict]:
    """Train a tiny bidirectional model per position scheme to output the token one place to the left (a pure
    order task: without positions, chance); returns per scheme the accuracy on fresh sequences."""
    rows = []
    for pos in schemes:
        torch.manual_seed(seed)
        model = TransformerLM(vocab_size=vocab, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_len=T,
                              attn="bidirectional", pos=pos)
        opt = torch.optim.AdamW(model.parameters(), lr=5e-3)

        def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
            x = torch.randint(0, vocab, (n, T))
            return x, torch.cat([x[:, :1], x[:, :-1]], dim=1)

        for _ in range(steps):
            x, y = batch(32)
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            x, y = batch(256)
            accuracy = float((model(x).argmax(-1) == y).float().mean())
        rows.append({"pos": pos, "accuracy": accuracy, "chance": 1.0 / vocab})
    return rows


def run_all() -> dict:
    """All four experiments' findings."""
    return {"attention_vs_torch": attention_vs_torch(), "why_scale": why_scale(),
            "permutation_equivariance": permutation_equivariance(),
            "positions": positions_on_an_order_task()}


def summary(findings: dict, lang: str = "en") -> str:
    """A readable account of :func:`run_all`'s findings, in ``lang`` ("en" or "zh")."""
    from ..viz.i18n import text

    a = findings["attention_vs_torch"]
    lines = [text("lesson2.attention", lang),
             text("lesson2.attention_diff", lang, out=f"{a['max_out_diff']:.2e}", weight=f"{a['max_weight_diff']:.2e}"),
             text("lesson2.scale", lang),
             text("lesson2.scale_head", lang)]
    for r in findings["why_scale"]:
        lines.append(f"   {r['d']:<6} {r['max_weight_unscaled']:>14.3f} {r['max_weight_scaled']:>13.3f} "
                     f"{r['grad_norm_unscaled']:>15.4f} {r['grad_norm_scaled']:>12.4f}")
    p = findings["permutation_equivariance"]
    lines += [text("lesson2.permutation", lang),
              f"   pos='none': {p['max_diff_pos_none']:.2e}   pos='sinusoidal': {p['max_diff_pos_sinusoidal']:.2e}",
              text("lesson2.positions", lang)]
    for r in findings["positions"]:
        lines.append(text("lesson2.chance", lang, pos=r["pos"], accuracy=f"{r['accuracy']:.3f}",
                          chance=f"{r['chance']:.3f}"))
    return "\n".join(lines)
