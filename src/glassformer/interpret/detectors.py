"""Head detectors: which heads attend to the previous token, and which are induction heads.

On a sequence of random tokens repeated twice, ``r_1 .. r_n r_1 .. r_n``, an *induction head*
(Olsson et al. 2022) at the second copy of ``r_i`` attends to the token that followed its first copy,
``r_{i+1}``, n - 1 positions back, and copies it: that is how a model predicts the second half it
cannot otherwise know. It is built on a *previous-token head* in an earlier layer, which attends one
position back. A score is a head's mean attention on the position its kind looks at (1: always there).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from ..errors import GlassformerError, check_int
from ..models import TransformerLM
from .hooks import run_with_cache


def repeated_tokens(vocab_size: int, length: int, batch: int = 1, *, seed: int = 0, low: int = 0,
                    bos: int | None = None) -> torch.Tensor:
    """Random tokens repeated twice: (batch, 2 * length) ids, or (batch, 1 + 2 * length) after ``bos``.

    Args:
        vocab_size: ids are drawn uniformly from [low, vocab_size).
        length: n, the length of one copy.
        seed: the random generator's seed (the same seed gives the same tokens).
        low: the smallest id drawn (leave special tokens out).
        bos: a start token put first, when the model expects one.
    """
    check_int("length", length, 2)
    check_int("batch", batch, 1)
    check_int("low", low, 0, vocab_size - 1)
    half = torch.randint(low, vocab_size, (batch, length), generator=torch.Generator().manual_seed(seed))
    ids = torch.cat([half, half], dim=1)  # (B, 2n)
    if bos is not None:
        ids = torch.cat([torch.full((batch, 1), bos, dtype=ids.dtype), ids], dim=1)
    return ids


def _stripe(pattern: torch.Tensor, offset: int, first_query: int) -> torch.Tensor:
    """Mean over batch and queries i >= first_query of pattern[..., i, i - offset]: (..., h) -> (h,)."""
    T = pattern.shape[-1]
    if first_query >= T or first_query < offset:
        raise GlassformerError(f"the pattern has {T} positions: too few for this score")
    queries = torch.arange(first_query, T)
    picked = pattern[..., queries, queries - offset]  # (B, h, queries)
    return picked.float().mean(-1).reshape(-1, pattern.shape[-3]).mean(0)  # (h,)


def previous_token_scores(pattern: torch.Tensor) -> torch.Tensor:
    """Each head's mean attention to the previous position. pattern (B, h, T, T) -> (h,)."""
    return _stripe(pattern, 1, 1)


def induction_scores(pattern: torch.Tensor, length: int, start: int = 0) -> torch.Tensor:
    """Each head's mean attention, over the second copy of a repeated sequence, to the token after the
    first copy of the current token (``length - 1`` back). pattern (B, h, T, T) -> (h,).

    Args:
        length: n, the length of one copy; start: where the first copy begins (1 after a bos token).
    """
    return _stripe(pattern, length - 1, start + length)


def duplicate_token_scores(pattern: torch.Tensor, length: int, start: int = 0) -> torch.Tensor:
    """Each head's mean attention, over the second copy, to the first copy of the current token
    (``length`` back). pattern (B, h, T, T) -> (h,)."""
    return _stripe(pattern, length, start + length)


class HeadScores(NamedTuple):
    """What :func:`head_scores` measures on repeated random tokens.

    Attributes:
        previous_token, induction, duplicate: (L, h) scores per layer and head.
        loss_first, loss_repeat: mean next-token loss on the first copy (unpredictable: about ln V) and
            on the second copy (its first token excluded): low once induction heads work.
    """

    previous_token: torch.Tensor
    induction: torch.Tensor
    duplicate: torch.Tensor
    loss_first: float
    loss_repeat: float


@torch.no_grad()
def head_scores(model: TransformerLM, length: int = 32, batch: int = 16, *, seed: int = 0, low: int = 0,
                bos: int | None = None) -> HeadScores:
    """Run ``model`` on random tokens repeated twice and score every head (see :class:`HeadScores`).

    Args:
        model: a causal TransformerLM (trained, loaded, or imported from Hugging Face), in eval mode.
        length, batch, seed, low, bos: as :func:`repeated_tokens` takes them (``bos``: e.g. GPT-2's
            ``<|endoftext|>``, 50256, for a model trained with it). Only the attention patterns are
            cached; those layers take the explicit path for this one forward.
    """
    if not isinstance(model, TransformerLM) or model.config.attn != "causal":
        raise GlassformerError("head_scores reads a causal TransformerLM (the repeated-token test is next-token)")
    ids = repeated_tokens(model.config.vocab_size, length, batch, seed=seed, low=low, bos=bos)
    ids = ids.to(model.emb.weight.device)
    logits, cache = run_with_cache(model, ids, names="pattern")
    patterns = cache.stack("pattern")  # (L, B, h, T, T)
    start = 0 if bos is None else 1
    loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="none")
    loss = loss.view(batch, -1)  # (B, T - 1): loss[:, i] predicts position i + 1
    first = loss[:, start:start + length - 1].mean()  # targets r_2 .. r_n of the first copy
    repeat = loss[:, start + length:].mean()  # targets r_2 .. r_n of the second copy
    return HeadScores(torch.stack([previous_token_scores(p) for p in patterns]),
                      torch.stack([induction_scores(p, length, start) for p in patterns]),
                      torch.stack([duplicate_token_scores(p, length, start) for p in patterns]),
                      float(first), float(repeat))


def probe_lengths(length: int) -> list[int]:
    """The probe lengths a head is scored at: ``length``, about 3/4 and 1/2 of it (distinct, >= 2).

    An induction head follows content, so it scores at every length; a head that attends a fixed
    distance d back scores only at the length whose offset (n - 1) equals d, so its lowest score over
    several lengths is near 0.
    """
    check_int("length", length, 2)
    return list(dict.fromkeys(max(2, n) for n in (length, (3 * length) // 4, length // 2)))


@torch.no_grad()
def scores_over_lengths(model: TransformerLM, lengths: list[int], batch: int = 16, *, seed: int = 0, low: int = 0,
                        bos: int | None = None) -> dict[str, torch.Tensor]:
    """Every head's previous-token, induction and duplicate score at each probe length, and their lowest.

    Args:
        model, batch, seed, low, bos: as :func:`head_scores` takes them.
        lengths: the probe lengths n (each probe is 2n tokens, after ``bos``), e.g. :func:`probe_lengths`.
    Returns:
        {kind: (L, h) the lowest score over ``lengths``, f"{kind}_by_length": (len(lengths), L, h)} for
        kind in previous_token, induction, duplicate. A head is called an induction head by its lowest
        score: one that attends a fixed distance back scores at one length only.
    Raises:
        GlassformerError for an empty ``lengths``.
    """
    if not lengths:
        raise GlassformerError("lengths must name at least one probe length, got []")
    per = [head_scores(model, int(n), batch, seed=seed, low=low, bos=bos) for n in lengths]
    out: dict[str, torch.Tensor] = {}
    for kind in ("previous_token", "induction", "duplicate"):
        stacked = torch.stack([getattr(s, kind) for s in per])  # (n_lengths, L, h)
        out[kind], out[f"{kind}_by_length"] = stacked.min(0).values, stacked
    return out
