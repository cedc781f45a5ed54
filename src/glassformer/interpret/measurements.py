"""What the training microscope measures (training/microscope.py records it): head scores on repeated-token
probes, the logit lens, norms and attention of a text probe, in-context learning, and where a recorded series
changes phase (docs/interpret.md). Each function reads a model and returns JSON-able numbers; none writes."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import GlassformerError
from ..io.checks import check_int, check_number
from ..models import TransformerLM
from .detectors import head_scores
from .hooks import run_with_cache
from .lens import residual_names
from .patching import next_token_loss


def _rounded(t: torch.Tensor, digits: int = 4) -> Any:
    """A tensor as nested lists of rounded floats (what a JSON line holds)."""
    return torch.round(t.double(), decimals=digits).tolist()


def icl_score(loss_by_position: Sequence[float] | torch.Tensor, early: int | None = None,
              late: int | None = None) -> float:
    """In-context learning (Olsson et al. 2022): loss[late] - loss[early] of a (T,) loss by position, each
    the mean of 5 positions around it; below 0 when later tokens are predicted better. ``early``,
    ``late``: default T // 10 (at least 1) and T - 1. An error for T < 3 or a position out of range."""
    loss = torch.as_tensor(loss_by_position, dtype=torch.float64).flatten()
    T = loss.numel()
    if T < 3:
        raise GlassformerError(f"icl_score needs the loss at 3 positions or more, got {T}")
    early = max(1, T // 10) if early is None else check_int("early", early, 0, T - 1)
    late = T - 1 if late is None else check_int("late", late, 0, T - 1)

    def around(i: int) -> float:
        lo = min(max(0, i - 2), max(0, T - 5))
        return float(loss[lo:lo + 5].mean()) if T >= 5 else float(loss[i])
    return around(late) - around(early)

def detect_phase_change(steps: Sequence[int], values: Sequence[float], *, window: int = 5, min_snr: float = 10.0,
                        max_width: float = 0.3, min_after: int = 3) -> dict[str, Any] | None:
    """Where a series, smoothed by a running median of ``window`` (odd) records, changes abruptly and for good:
    a fall or a rise (whichever moves farther from the start) of at least ``min_snr`` times the records'
    noise (their robust spread around the smoothed curve), 20% to 80% of it within ``max_width`` of the
    steps, and at least ``min_after`` records after its middle, all past halfway. The same for ``x``,
    ``-x``, ``1 - x``, ``x + 5``. Returns {"step", "from", "to", "width"} or None (docs/interpret.md)."""
    if len(steps) != len(values):
        raise GlassformerError(f"steps and values must have the same length, got {len(steps)} and {len(values)}")
    check_int("window", window, 1)
    check_int("min_after", min_after, 1)
    if window % 2 == 0:
        raise GlassformerError(f"window must be odd, got {window}")
    check_number("min_snr", min_snr, 0.0, low_open=True)
    points = [(int(s), float(v)) for s, v in zip(steps, values) if v is not None and math.isfinite(float(v))]
    if len(points) < 3:
        return None
    xs, ys = [s for s, _ in points], [v for _, v in points]
    half = min(window, len(points) - (1 - len(points) % 2)) // 2  # a running median of this many records either side
    smooth = [statistics.median(ys[max(0, i - half):i + half + 1]) for i in range(len(ys))]  # -x's is -(x's)
    start = smooth[0]
    sign = 1.0 if start - min(smooth) >= max(smooth) - start else -1.0  # a rise is a fall of -x
    level = [sign * (v - start) for v in smooth]  # 0 at the start, falling
    drop = -min(level)
    # a robust standard deviation of the records around the smoothed curve
    noise = 1.4826 * statistics.median(abs(y - v) for y, v in zip(ys, smooth))
    floor = 1e-9 * max(abs(v) for v in smooth)  # rounding: what a noise-free series still has
    if drop <= 0 or drop < min_snr * max(noise, floor):
        return None

    def first_below(fraction: float) -> int:
        return next(i for i, v in enumerate(level) if v <= -fraction * drop)
    begin, middle, end = (first_below(f) for f in (0.2, 0.5, 0.8))
    after = level[middle + 1:]
    if len(after) < min_after or max(after) > -drop / 2:  # not lasting: too recent, or back above halfway
        return None
    width = xs[end] - xs[max(begin - 1, 0)]
    if width > max_width * (xs[-1] - xs[0]):
        return None
    low = start - sign * drop
    return {"step": xs[middle], "from": round(start, 5), "to": round(low, 5), "width": width}

@dataclass
class Probe:
    """What a measurement reads (:meth:`Microscope.add`): ``text`` (R, T) the probe text's ids;
    ``repeated`` (B, start + 2n) random tokens repeated twice (after a bos when ``start`` is 1); ``length``
    n; ``step``; ``low``, ``bos``: the smallest random id and the bos id, to build more probes."""

    text: torch.Tensor
    repeated: torch.Tensor
    length: int
    start: int
    step: int
    low: int = 0
    bos: int | None = None


Measurement = Callable[[nn.Module, Probe], Any]

def head_score_record(model: TransformerLM, lengths: Sequence[int], probe_length: int, batch: int, low: int = 0,
                      bos: int | None = None) -> dict[str, Any]:
    """Head scores (L, h) on repeated-token probes of each of ``lengths`` (the least over lengths, and
    induction per length) and the losses of the ``probe_length`` probe (``batch`` rows of ids >= ``low``)."""
    per = {n: head_scores(model, n, batch, low=low, bos=bos) for n in lengths}
    at = per[probe_length]  # its losses are recorded
    out: dict[str, Any] = {"loss_first": at.loss_first, "loss_repeat": at.loss_repeat}
    for kind in ("previous_token", "induction", "duplicate"):
        out[kind] = _rounded(torch.stack([getattr(s, kind) for s in per.values()]).min(0).values)
    out["induction_by_length"] = {str(n): _rounded(s.induction) for n, s in per.items()}
    return out


def text_probe_record(model: TransformerLM, ids: torch.Tensor, heads: Sequence[Sequence[int]],
                      snapshot_tokens: int) -> dict[str, Any]:
    """On the text probe ``ids`` (R, T): each layer's attention entropy (L, h), logit-lens loss and residual
    norm by residual point, each block's weight norm, the loss by position and its :func:`icl_score`, and the
    first ``snapshot_tokens`` x ``snapshot_tokens`` of row 0's pattern for each [layer, head] of ``heads``."""
    ids = ids.to(model.emb.weight.device)  # (R, T)
    names = residual_names(model)
    _, cache = run_with_cache(model, ids, names=[*names, "pattern"])
    lens_loss, resid_norm = [], []
    for name in names:
        resid = cache[name]  # (R, T, d)
        logits = model.logits(model.norm_f(resid))  # read as the model reads its last layer
        lens_loss.append(float(next_token_loss(logits, ids)))
        resid_norm.append(float(resid.float().norm(dim=-1).mean()))
    by_position = next_token_loss(logits, ids, reduction="none").mean(0)  # (T - 1,): [i] predicts position i + 1
    patterns = cache.stack("pattern")  # (L, R, h, T, T); entropy (L, h): a row's mean nats, layer by layer
    entropy = torch.stack([-(p.float() * p.float().clamp_min(1e-12).log()).sum(-1).mean((0, 2)) for p in patterns])
    S = min(snapshot_tokens, ids.shape[1])
    snapshots = {f"{layer}.{head}": _rounded(patterns[layer, 0, head, :S, :S], 3) for layer, head in heads}
    weight_norm = [math.sqrt(sum(float(p.double().pow(2).sum()) for p in block.parameters()))
                   for block in model.blocks]
    return {"entropy": _rounded(entropy),
            "lens_loss": [round(v, 5) for v in lens_loss], "resid_norm": [round(v, 4) for v in resid_norm],
            "weight_norm": [round(v, 4) for v in weight_norm], "attention": snapshots,
            "loss_by_position": [round(v, 4) for v in by_position.tolist()],
            "icl_score": round(icl_score(by_position), 5) if by_position.numel() >= 3 else None}
