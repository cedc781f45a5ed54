"""Head detectors: previous-token, induction and duplicate-token heads (Olsson et al. 2022), scored on random
tokens repeated twice: a score is a head's mean attention on the position its kind looks at (1: always).
"""

from typing import NamedTuple

import torch

from ..errors import GlassformerError
from ..io.checks import check_int
from ..models import TransformerLM
from .hooks import run_with_cache
from .patching import next_token_loss


def repeated_tokens(vocab_size: int, length: int, batch: int = 1, *, seed: int = 0, low: int = 0,
                    bos: int | None = None) -> torch.Tensor:
    """Random tokens in [low, vocab_size) repeated twice: (batch, 2 * length) ids, or (batch, 1 + 2 * length)
    after ``bos``; the same ``seed`` gives the same tokens."""
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
    """Each head's mean attention, over the second copy, to the token after the first copy of the current
    token (``length - 1`` back; the first copy begins at ``start``). pattern (B, h, T, T) -> (h,)."""
    return _stripe(pattern, length - 1, start + length)


def duplicate_token_scores(pattern: torch.Tensor, length: int, start: int = 0) -> torch.Tensor:
    """Each head's mean attention, over the second copy, to the first copy of the current token
    (``length`` back). pattern (B, h, T, T) -> (h,)."""
    return _stripe(pattern, length, start + length)


class HeadScores(NamedTuple):
    """What :func:`head_scores` measures: (L, h) ``previous_token``, ``induction``, ``duplicate`` scores, and
    the mean next-token loss on the first copy (about ln V) and on the second (low once induction works)."""

    previous_token: torch.Tensor
    induction: torch.Tensor
    duplicate: torch.Tensor
    loss_first: float
    loss_repeat: float


@torch.no_grad()
def head_scores(model: TransformerLM, length: int = 32, batch: int = 16, *, seed: int = 0, low: int = 0,
                bos: int | None = None) -> HeadScores:
    """Run a causal TransformerLM on :func:`repeated_tokens` (same arguments) and score every head."""
    if not isinstance(model, TransformerLM) or model.config.attn != "causal":
        raise GlassformerError("head_scores reads a causal TransformerLM (the repeated-token test is next-token)")
    ids = repeated_tokens(model.config.vocab_size, length, batch, seed=seed, low=low, bos=bos)
    ids = ids.to(model.emb.weight.device)
    logits, cache = run_with_cache(model, ids, names="pattern")
    patterns = cache.stack("pattern")  # (L, B, h, T, T)
    start = 0 if bos is None else 1
    loss = next_token_loss(logits, ids, reduction="none")  # (B, T - 1): loss[:, i] predicts position i + 1
    first = loss[:, start:start + length - 1].mean()  # targets r_2 .. r_n of the first copy
    repeat = loss[:, start + length:].mean()  # targets r_2 .. r_n of the second copy
    return HeadScores(torch.stack([previous_token_scores(p) for p in patterns]),
                      torch.stack([induction_scores(p, length, start) for p in patterns]),
                      torch.stack([duplicate_token_scores(p, length, start) for p in patterns]),
                      float(first), float(repeat))


def probe_lengths(length: int) -> list[int]:
    """The probe lengths a head is scored at: ``length``, about 3/4 and 1/2 of it (distinct, >= 2); a head
    attending a fixed distance back scores at one length only, an induction head at all."""
    check_int("length", length, 2)
    return list(dict.fromkeys(max(2, n) for n in (length, (3 * length) // 4, length // 2)))


@torch.no_grad()
def scores_over_lengths(model: TransformerLM, lengths: list[int], batch: int = 16, *, seed: int = 0, low: int = 0,
                        bos: int | None = None) -> dict[str, torch.Tensor]:
    """Every head's scores at each probe length n in ``lengths`` (other arguments: :func:`head_scores`'s):
    {kind: (L, h) the lowest, f"{kind}_by_length": (len(lengths), L, h)} for kind in previous_token,
    induction, duplicate."""
    if not lengths:
        raise GlassformerError("lengths must name at least one probe length, got []")
    per = [head_scores(model, int(n), batch, seed=seed, low=low, bos=bos) for n in lengths]
    out: dict[str, torch.Tensor] = {}
    for kind in ("previous_token", "induction", "duplicate"):
        stacked = torch.stack([getattr(s, kind) for s in per])  # (n_lengths, L, h)
        out[kind], out[f"{kind}_by_length"] = stacked.min(0).values, stacked
    return out
