"""Greedy or sampled decoding, one token per row per step (a generator, so callers can stream). A row that
produced an eos id or hit a stop criterion receives ``pad_token_id`` from then on, as in Hugging Face."""

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from .incremental import IncrementalDecoder
from .processors import LogitsProcessorList

# (B, L) tokens so far -> (B,) bool, True = "this row is finished"
StoppingCriterion = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class Step:
    """One decoding step: tokens (B,) chosen (``pad_token_id`` for rows finished earlier), scores (B, V)
    they were chosen from (processed, -inf for removed tokens), finished (B,) after this step."""

    tokens: torch.Tensor
    scores: torch.Tensor
    finished: torch.Tensor


def history_for_processors(decoder: IncrementalDecoder, vocab_size: int) -> torch.Tensor:
    """Tokens so far (B, L) with padding replaced by ``vocab_size`` so processors ignore it."""
    seq, pad = decoder.sequences(), decoder.padding()
    return seq if pad is None else seq.masked_fill(pad, vocab_size)


def sampling_probs(scores: torch.Tensor) -> torch.Tensor:
    """softmax(scores) over the last dimension; a row whose every token was removed (all -inf) becomes
    uniform instead of NaN."""
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)
    return scores.masked_fill(dead, 0.0).softmax(dim=-1)


def decode_steps(decoder: IncrementalDecoder, max_new_tokens: int, processors: LogitsProcessorList, *,
                 do_sample: bool = False, eos_token_id: list[int] | None = None, pad_token_id: int = 0,
                 stopping_criteria: list[StoppingCriterion] | None = None,
                 generator: torch.Generator | None = None) -> Iterator[Step]:
    """Greedy (argmax) or sampled decoding of a decoder not started yet: a :class:`Step` per new token,
    at most ``max_new_tokens``; stops early when every row is finished (the loop's only host
    synchronisation, made only when an eos id or a stopping criterion can finish a row)."""
    logits = decoder.start()
    B, V = logits.shape
    eos = torch.tensor(eos_token_id or [], dtype=torch.long, device=logits.device)
    finished = torch.zeros(B, dtype=torch.bool, device=logits.device)
    can_finish = bool(eos_token_id or stopping_criteria)
    for i in range(max_new_tokens):
        scores = processors(history_for_processors(decoder, V), logits) if processors else logits
        if do_sample:
            tokens = torch.multinomial(sampling_probs(scores), 1, generator=generator)[:, 0]
        else:
            tokens = scores.argmax(dim=-1)
        if can_finish:  # else no row is ever finished
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
