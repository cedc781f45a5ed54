"""Logits processors: ``processor(ids, scores) -> scores`` reshapes the next-token scores before a choice.

``ids`` (B, L) are the tokens so far (padding marked with the id V, one past the vocabulary, so it never
counts), ``scores`` (B, V) float32; removed tokens get ``-inf``. Hugging Face's order: repetition
penalty, no-repeat n-gram, then (sampling only) temperature, top-k, top-p, min-p."""

import torch

from ..io.checks import check_int, check_number


class LogitsProcessorList(list):
    """Apply processors in order: ``LogitsProcessorList([a, b])(ids, scores) == b(ids, a(ids, scores))``."""

    def __call__(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        for processor in self:
            scores = processor(ids, scores)
        return scores


def _finite(scores: torch.Tensor, changed: torch.Tensor) -> torch.Tensor:
    """``changed`` kept finite: removed tokens (-inf in ``scores``) stay removed, an overflow becomes the
    largest finite value of its sign, 0/0 becomes 0 (temperature 1e-300 shapes, never makes NaN)."""
    big = torch.finfo(scores.dtype).max
    return torch.where(torch.isneginf(scores), scores, changed.nan_to_num(nan=0.0, posinf=big, neginf=-big))


class Temperature:
    """Divide the scores by ``temperature``: < 1 sharpens the distribution, > 1 flattens it."""

    def __init__(self, temperature: float) -> None:
        self.temperature = check_number("temperature", temperature, 0, low_open=True)

    def __call__(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return _finite(scores, scores / self.temperature)


class TopK:
    """Keep the ``top_k`` highest-scoring tokens (ties with the k-th are kept too); remove the rest."""

    def __init__(self, top_k: int, min_tokens_to_keep: int = 1) -> None:
        self.top_k = max(check_int("top_k", top_k, 1), min_tokens_to_keep)

    def __call__(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        kth = scores.topk(min(self.top_k, scores.shape[-1]), dim=-1).values[..., -1:]  # (B, 1)
        return scores.masked_fill(scores < kth, float("-inf"))


class TopP:
    """Nucleus sampling (Holtzman et al. 2020): keep the smallest set of most likely tokens whose
    probabilities sum to at least ``top_p``."""

    def __init__(self, top_p: float, min_tokens_to_keep: int = 1) -> None:
        self.top_p = check_number("top_p", top_p, 0, 1, low_open=True)
        self.min_tokens_to_keep = min_tokens_to_keep

    def __call__(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        sorted_scores, order = scores.sort(dim=-1)  # ascending
        cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= 1.0 - self.top_p  # the unlikely tail whose total mass is <= 1 - top_p
        remove[..., -self.min_tokens_to_keep:] = False
        return scores.masked_fill(remove.scatter(-1, order, remove), float("-inf"))


class MinP:
    """Min-p sampling (Nguyen et al. 2024): remove tokens less likely than ``min_p`` times the top one."""

    def __init__(self, min_p: float, min_tokens_to_keep: int = 1) -> None:
        self.min_p = check_number("min_p", min_p, 0, 1)
        self.min_tokens_to_keep = min_tokens_to_keep

    def __call__(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        probs = scores.softmax(dim=-1)
        remove = probs < self.min_p * probs.amax(dim=-1, keepdim=True)
        keep = probs.topk(min(self.min_tokens_to_keep, probs.shape[-1]), dim=-1).indices
        return scores.masked_fill(remove.scatter(-1, keep, False), float("-inf"))


class RepetitionPenalty:
    """CTRL's repetition penalty (Keskar et al. 2019): a token already in ``ids`` gets score s / penalty
    when s > 0, s * penalty when s < 0."""

    def __init__(self, penalty: float) -> None:
        self.penalty = check_number("repetition_penalty", penalty, 0, low_open=True)

    def __call__(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        B, V = scores.shape
        seen = torch.zeros(B, V + 1, dtype=torch.bool, device=scores.device)
        seen.scatter_(1, ids, True)  # column V collects the padding marker
        penalised = _finite(scores, torch.where(scores < 0, scores * self.penalty, scores / self.penalty))
        return torch.where(seen[:, :V], penalised, scores)


class NoRepeatNGram:
    """Forbid any token that would repeat an n-gram of ``ids`` (Paulus et al. 2017): when the last n-1
    tokens occurred before, the tokens that followed them then are removed."""

    def __init__(self, ngram_size: int) -> None:
        self.n = check_int("no_repeat_ngram_size", ngram_size, 1)

    def __call__(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        n, L = self.n, ids.shape[1]
        if n > L:
            return scores
        windows = ids.unfold(1, n, 1)  # (B, L - n + 1, n): every n-gram
        current = ids[:, L - n + 1:]  # (B, n - 1): the context the next token would extend
        matches = (windows[:, :, :-1] == current[:, None, :]).all(dim=-1)  # (B, L - n + 1)
        V = scores.shape[-1]
        banned = torch.zeros(scores.shape[0], V + 1, dtype=torch.bool, device=scores.device)
        banned.scatter_(1, torch.where(matches, windows[:, :, -1], V), True)
        return scores.masked_fill(banned[:, :V], float("-inf"))


class VocabLimit:
    """Remove every id >= ``size``: the ids a model's padded vocabulary has but its tokenizer lacks
    (a model may round its vocabulary up, e.g. 50257 -> 50304). ``size``: the tokenizer's, checked by its caller."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        out = scores.clone()
        out[:, self.size:] = float("-inf")
        return out


def make_processors(*, do_sample: bool, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                    min_p: float | None = None, repetition_penalty: float | None = None,
                    no_repeat_ngram_size: int | None = None, min_tokens_to_keep: int = 1) -> LogitsProcessorList:
    """The processors a ``generate`` call asks for, in Hugging Face's order (empty when none applies).

    Temperature, top-k, top-p and min-p apply only when ``do_sample`` (as in Hugging Face); each processor
    checks its value when made (a :class:`~glassformer.generation.GenerationConfig` checks them all, always).
    ``min_tokens_to_keep`` protects the best tokens from the filters. ``top_k`` and ``no_repeat_ngram_size``
    of 0 (or None) are off."""
    processors = LogitsProcessorList()
    if repetition_penalty is not None and repetition_penalty != 1.0:
        processors.append(RepetitionPenalty(repetition_penalty))
    if no_repeat_ngram_size:  # None or 0: off
        processors.append(NoRepeatNGram(no_repeat_ngram_size))
    if not do_sample:
        return processors
    if temperature != 1.0:
        processors.append(Temperature(temperature))
    if top_k:  # None or 0: off
        processors.append(TopK(top_k, min_tokens_to_keep))
    if top_p is not None:
        processors.append(TopP(top_p, min_tokens_to_keep))
    if min_p is not None:
        processors.append(MinP(min_p, min_tokens_to_keep))
    return processors
