"""check_causality: prove, by perturbation, that no position sees what it must not."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .errors import GlassformerError


@dataclass
class CausalityReport:
    """What :func:`check_causality` found.

    Attributes:
        max_leak: the largest absolute logit change seen at a position that must not see the
            perturbed token; 0.0 means no leak at all.
        max_visible_change: the largest change at positions that may see it (shows the probe bites).
        checks: number of (perturbed position, observing position, row) triples examined.
        worst: (row, perturbed position, observing position) of ``max_leak``, or None.
    """

    max_leak: float
    max_visible_change: float
    checks: int
    worst: tuple[int, int, int] | None

    @property
    def ok(self) -> bool:
        """No leak at all: ``max_leak`` is exactly 0.0."""
        return self.max_leak == 0.0


def _influence(attn: str, T: int, t: int, prefix: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: which positions may be influenced by the token at position t (any depth)."""
    i = torch.arange(T)[None, :]  # (1, T) observing positions
    if attn == "bidirectional":
        return torch.ones(prefix.shape[0], T, dtype=torch.bool)
    later = (i >= t).expand(prefix.shape[0], T)
    if attn == "prefix":
        return later | (t < prefix)[:, None]
    return later


@torch.no_grad()
def check_causality(
    model: nn.Module,
    ids: torch.Tensor,
    *,
    prefix_len: int | torch.Tensor | None = None,
    pad: torch.Tensor | None = None,
    src: torch.Tensor | None = None,
    src_pad: torch.Tensor | None = None,
    return_attn: bool = False,
) -> CausalityReport:
    """Perturb each token in turn and measure the change at positions that must not see it.

    The rule of who may see whom is written here from the architecture's definition, not read
    from the model's masks, so a wrong mask shows up as a leak:
    causal: position i sees t <= i; prefix: also every t < prefix_len; bidirectional: all;
    a padded token is seen by nobody (padded positions' own outputs are not examined).
    For an :class:`EncoderDecoder` pass the source as ``src`` (and ``src_pad``): ``ids`` are the
    decoder's input; padded source tokens are perturbed too and must change nothing.

    Args:
        model: a TransformerLM or EncoderDecoder.
        ids: (B, T) token ids (the decoder input for an EncoderDecoder).
        prefix_len, pad: as for the model's forward.
        src, src_pad: the encoder input of an EncoderDecoder.
        return_attn: run the explicit-softmax path instead of the fused one.
    Returns:
        A :class:`CausalityReport`.
    """
    config = model.config
    encdec = config.arch == "encoder-decoder"
    if encdec and src is None:
        raise GlassformerError("check_causality on an EncoderDecoder needs src (the encoder input)")
    B, T = ids.shape
    V = config.vocab_size
    was_training = model.training
    model.eval()

    def run(tokens: torch.Tensor, source: torch.Tensor | None = None) -> torch.Tensor:
        if encdec:
            out = model(src if source is None else source, tokens, src_pad=src_pad, tgt_pad=pad,
                        return_attn=return_attn)
        else:
            out = model(tokens, pad=pad, prefix_len=prefix_len, return_attn=return_attn)
        return out[0] if return_attn else out

    try:
        base = run(ids)
        attn = "causal" if encdec else config.attn
        if prefix_len is None:
            prefix = torch.zeros(B, dtype=torch.long)
        else:
            prefix = torch.as_tensor(prefix_len).reshape(-1).expand(B).cpu()
        observed = torch.ones(B, T, dtype=torch.bool) if pad is None else ~pad.cpu()
        leak, visible_change, checks, worst = 0.0, 0.0, 0, None
        for t in range(T):
            changed = ids.clone()
            changed[:, t] = (changed[:, t] + 1) % V
            diff = (run(changed) - base).abs().amax(-1).cpu()  # (B, T)
            may_see = _influence(attn, T, t, prefix)
            if pad is not None:
                may_see = may_see & ~pad[:, t].cpu()[:, None]
            hidden = ~may_see & observed
            checks += int(hidden.sum())
            if hidden.any() and float(diff[hidden].max()) > leak:
                leak = float(diff[hidden].max())
                row, pos = (diff * hidden).flatten().argmax().item() // T, (diff * hidden).flatten().argmax().item() % T
                worst = (row, t, pos)
            if (may_see & observed).any():
                visible_change = max(visible_change, float(diff[may_see & observed].max()))
        if encdec and src_pad is not None:
            for s in range(src.shape[1]):
                if not src_pad[:, s].any():
                    continue
                changed = src.clone()
                changed[:, s] = torch.where(src_pad[:, s], (changed[:, s] + 1) % V, changed[:, s])
                diff = (run(ids, changed) - base).abs().amax(-1).cpu()
                rows = src_pad[:, s].cpu()[:, None] & observed
                checks += int(rows.sum())
                if rows.any() and float(diff[rows].max()) > leak:
                    leak = float(diff[rows].max())
                    worst = (int(rows.any(-1).nonzero()[0]), s, -1)
    finally:
        model.train(was_training)
    return CausalityReport(max_leak=leak, max_visible_change=visible_change, checks=checks, worst=worst)
