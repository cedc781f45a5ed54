"""Choosing tokens: greedy or sampled, one token per row per step (a generator, so callers can stream).

``decode_steps`` drives an :class:`IncrementalDecoder`. Each step: process the logits (repetition
penalty, temperature, top-k, ...), pick a token per row (argmax, or a draw from the softmax), append
it and yield it. A row that has produced an end-of-sequence id or hit a stop criterion is finished:
from then on it receives ``pad_token_id``, as in Hugging Face ``generate``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from .incremental import IncrementalDecoder
from .processors import LogitsProcessorList

# (B, L) tokens so far -> (B,) bool, True = "this row is finished"
StoppingCriterion = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class Step:
    """One decoding step: the chosen token of each row and the scores it was chosen from.

    Attributes:
        tokens: (B,) the chosen ids (``pad_token_id`` for rows finished earlier).
        scores: (B, V) processed logits the choice was made from (-inf for removed tokens).
        finished: (B,) rows that are finished after this step.
    """

    tokens: torch.Tensor
    scores: torch.Tensor
    finished: torch.Tensor


def history_for_processors(decoder: IncrementalDecoder, vocab_size: int) -> torch.Tensor:
    """Tokens so far (B, L) with padding replaced by ``vocab_size`` so processors ignore it."""
    seq, pad = decoder.sequences(), decoder.padding()
    return seq if pad is None else seq.masked_fill(pad, vocab_size)


def sampling_probs(scores: torch.Tensor) -> torch.Tensor:
    """softmax(scores) over the last dimension, where a row whose every token was removed (all -inf,
    e.g. no_repeat_ngram_size=1 once each token has been seen) becomes uniform instead of NaN."""
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)
    return scores.masked_fill(dead, 0.0).softmax(dim=-1)


def decode_steps(decoder: IncrementalDecoder, max_new_tokens: int, processors: LogitsProcessorList, *,
                 do_sample: bool = False, eos_token_id: list[int] | None = None, pad_token_id: int = 0,
                 stopping_criteria: list[StoppingCriterion] | None = None,
                 generator: torch.Generator | None = None) -> Iterator[Step]:
    """Greedy or sampled decoding; yields a :class:`Step` per new token, at most ``max_new_tokens``.

    Args:
        decoder: B rows, not started yet (this calls ``start()``).
        processors: shape the (B, V) scores before each choice (empty: the raw logits).
        do_sample: draw from softmax(scores) with ``generator``; else argmax.
        eos_token_id: ids that finish a row; pad_token_id: what finished rows receive.
        stopping_criteria: callables (B, L) tokens -> (B,) bool, True = finished.
    Yields:
        :class:`Step` (tokens (B,), scores (B, V), finished (B,)). Stops early when every row is
        finished (that check is the loop's only host synchronisation, made only when something can
        finish a row: an eos id or a stopping criterion).
    """
    logits = decoder.start()
    B, V = logits.shape
    eos = torch.tensor(eos_token_id or [], dtype=torch.long, device=logits.device)
    finished = torch.zeros(B, dtype=torch.bool, device=logits.device)
    can_finish = bool(eos_token_id or stopping_criteria)
    for i in range(max_new_tokens):
        scores = processors(history_for_processors(decoder, V), logits) if processors else logits
        if do_sample:
            probs = sampling_probs(scores)
            tokens = torch.multinomial(probs, 1, generator=generator)[:, 0]
        else:
            tokens = scores.argmax(dim=-1)
        tokens = tokens.masked_fill(finished, pad_token_id)
        if eos_token_id:
            finished = finished | torch.isin(tokens, eos)
        decoder.append(tokens)
        for criterion in stopping_criteria or []:
            finished = finished | criterion(decoder.sequences())
        yield Step(tokens, scores, finished)
        if i == max_new_tokens - 1 or (can_finish and bool(finished.all())):
            return
        logits = decoder.next_logits()
