"""check_causality: prove, by perturbation, that no position sees what it must not."""

from dataclasses import dataclass

import torch
from torch import nn

from .errors import GlassformerError


@dataclass
class CausalityReport:
    """What :func:`check_causality` found: ``max_leak``, the largest logit change where the perturbed token
    must not be seen (0.0: none); ``max_visible_change``, where it may; ``checks``, the (perturbed,
    observing, row) triples examined; ``worst``, (row, perturbed, observing) of the leak or None."""

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
    if attn == "bidirectional":
        return torch.ones(prefix.shape[0], T, dtype=torch.bool)
    later = (torch.arange(T)[None, :] >= t).expand(prefix.shape[0], T)  # observing positions i >= t
    return later | (t < prefix)[:, None] if attn == "prefix" else later


@torch.no_grad()
def check_causality(model: nn.Module, ids: torch.Tensor, *, prefix_len: int | torch.Tensor | None = None,
                    pad: torch.Tensor | None = None, src: torch.Tensor | None = None,
                    src_pad: torch.Tensor | None = None, return_attn: bool = False) -> CausalityReport:
    """Perturb each token of ``ids`` (B, T) in turn and measure the change at positions that must not see it,
    by the architecture's rule, not the model's masks: causal sees t <= i, prefix also t < prefix_len,
    bidirectional all; a padded token nobody. An EncoderDecoder needs ``src`` (padded source tokens must
    change nothing). ``return_attn``: the explicit-softmax path. Returns a :class:`CausalityReport`."""
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
        prefix = torch.as_tensor(0 if prefix_len is None else prefix_len).reshape(-1).expand(B).cpu()  # (B,)
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
                row, pos = divmod(int((diff * hidden).flatten().argmax()), T)
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
