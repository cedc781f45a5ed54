"""Beam search with the semantics of Hugging Face ``generate(num_beams=...)`` (transformers 4.50+/5.x).

A step keeps the best ``K = max(2, 1 + n_eos) * num_beams`` (beam, token) continuations by total
log-probability: the best ``num_beams`` that do not end run on; those among the top ``num_beams`` that
end join the finished list, scored ``sum of log-probs / generated_length ** length_penalty``. Tensors
are shaped (B, beams, ...) as in Hugging Face's vectorised code, so the same weights give the same sequences."""

import torch

from .incremental import IncrementalDecoder
from .processors import LogitsProcessorList
from .search import history_for_processors, sampling_probs

NEG = -1.0e9  # "impossible" score, as in Hugging Face (finite so sums stay ordered)


def _gather(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """t (B, N, ...) -> (B, K, ...) picking entries ``index`` (B, K) along dimension 1."""
    return torch.take_along_dim(t, index.reshape(*index.shape, *[1] * (t.dim() - 2)), dim=1)


def _widen(t: torch.Tensor, width: int, fill: int) -> torch.Tensor:
    """t (B, N, L) -> (B, N, width), the new columns set to ``fill``."""
    out = t.new_full((*t.shape[:-1], width), fill)
    out[..., :t.shape[-1]] = t
    return out


def beam_search(decoder: IncrementalDecoder, num_beams: int, max_new_tokens: int, processors: LogitsProcessorList, *,
                eos_token_id: list[int] | None = None, pad_token_id: int = 0, length_penalty: float = 1.0,
                early_stopping: bool | str = False, num_return_sequences: int = 1, do_sample: bool = False,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Beam search over a decoder holding ``num_beams`` copies of each prompt, prompt-major.

    ``processors`` apply to the log-probabilities; ``do_sample`` draws the K continuations from the
    softmax instead of taking the top K. Returns (sequences (B * num_return_sequences, prompt_len + n),
    best first per prompt, and their (B * num_return_sequences,) length-penalised scores)."""
    prompt_len = decoder.length
    B, nb = decoder.tokens.shape[0] // num_beams, num_beams
    max_length = prompt_len + max_new_tokens
    device = decoder.tokens.device
    eos = torch.tensor(eos_token_id or [], dtype=torch.long, device=device)
    K = max(2, 1 + len(eos_token_id or [])) * nb
    top_nb = torch.arange(K, device=device) < nb  # (K,) the first num_beams candidates of a step

    # (B, nb, width) token buffers; width grows by doubling up to max_length, as tokens arrive
    width = min(max_length, prompt_len + 64)
    running = torch.full((B, nb, width), pad_token_id, dtype=torch.long, device=device)
    running[:, :, :prompt_len] = decoder.sequences().view(B, nb, prompt_len)
    running_scores = torch.zeros(B, nb, device=device)
    running_scores[:, 1:] = NEG  # only beam 0 expands at the first step: all beams start equal
    finished = running.clone()  # (B, nb, width) best finished hypotheses, best first
    finished_scores = torch.full((B, nb), NEG, device=device)
    finished_len = torch.zeros(B, nb, dtype=torch.long, device=device)  # generated tokens
    is_finished = torch.zeros(B, nb, dtype=torch.bool, device=device)
    improvable = torch.ones(B, 1, dtype=torch.bool, device=device)
    row_offset = torch.arange(B, device=device)[:, None] * nb  # (B, 1) first decoder row of each prompt

    logits = decoder.start()
    V = logits.shape[-1]
    cur_len = prompt_len
    while True:
        log_probs = logits.log_softmax(dim=-1)
        log_probs = processors(history_for_processors(decoder, V), log_probs) if processors else log_probs
        totals = (log_probs.view(B, nb, V) + running_scores[:, :, None]).view(B, nb * V)
        if do_sample:
            picked = torch.multinomial(sampling_probs(totals), K, generator=generator)
            top_scores, order = totals.gather(1, picked).sort(dim=-1, descending=True)
            picked = picked.gather(1, order)
        else:
            top_scores, picked = totals.topk(K, dim=-1)  # (B, K)
        src_beam, tokens = picked // V, picked % V
        if cur_len >= running.shape[-1]:
            width = min(max_length, 2 * running.shape[-1])
            running, finished = _widen(running, width, pad_token_id), _widen(finished, width, pad_token_id)
        candidates = _gather(running, src_beam)  # (B, K, width)
        candidates[:, :, cur_len] = tokens
        ends = torch.isin(tokens, eos) | (cur_len + 1 >= max_length)  # (B, K)

        # the best num_beams candidates that do not end keep running
        alive_scores = top_scores + ends.float() * NEG
        keep = alive_scores.topk(nb, dim=-1).indices  # (B, nb)
        running = _gather(candidates, keep)
        running_scores = _gather(alive_scores, keep)
        next_rows = (_gather(src_beam, keep) + row_offset).view(-1)  # decoder rows they continue

        # ending candidates among the top num_beams compete with the finished list
        just_finished = ends & top_nb
        final_scores = top_scores / float(cur_len + 1 - prompt_len) ** length_penalty
        full = is_finished.all(dim=-1, keepdim=True) & (early_stopping is True)
        final_scores = final_scores + (full | ~improvable | ~just_finished).float() * NEG
        merged = torch.cat([finished_scores, final_scores], dim=1)  # (B, nb + K)
        best = merged.topk(nb, dim=-1).indices
        finished = _gather(torch.cat([finished, candidates], dim=1), best)
        finished_scores = _gather(merged, best)
        new_len = torch.full_like(tokens, cur_len + 1 - prompt_len)
        finished_len = _gather(torch.cat([finished_len, new_len], dim=1), best)
        is_finished = _gather(torch.cat([is_finished, just_finished], dim=1), best)

        cur_len += 1
        # could a running beam still beat the worst finished one? (Hugging Face's heuristic)
        if early_stopping == "never" and length_penalty > 0.0:
            best_length = max_length - prompt_len
        else:
            best_length = cur_len - prompt_len
        best_running = running_scores[:, :1] / float(best_length) ** length_penalty
        worst_finished = torch.where(is_finished, finished_scores.min(dim=1, keepdim=True).values, NEG)
        improvable = improvable & (best_running > worst_finished).any(dim=-1, keepdim=True)
        done = (~improvable.any()) | (is_finished.all() & (early_stopping is True)) | ends.all()
        if bool(done):
            break
        decoder.reorder(next_rows)
        decoder.append(running[:, :, cur_len - 1].reshape(-1))
        logits = decoder.next_logits()

    n = num_return_sequences
    out_len = prompt_len + int(finished_len[:, :n].max())
    return finished[:, :n, :out_len].reshape(B * n, out_len), finished_scores[:, :n].reshape(B * n)
