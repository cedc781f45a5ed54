"""fill_mask: an encoder-only (BERT-style) model's best candidates for each masked position."""

from typing import Any

import torch

from ..errors import GlassformerError
from ..io.checks import check_int
from .api import PromptLike, _check_length, _eval_mode, batch_prompts
from .protocol import Encoder


def fill_mask(model: Encoder, ids: PromptLike, mask_token_id: int | None = None, top_k: int = 5, *,
              tokenizer: Any = None, pad: torch.Tensor | None = None,
              attention_mask: torch.Tensor | None = None) -> list[dict[str, Any]]:
    """An encoder-only model's ``top_k`` candidates for each ``mask_token_id`` (default
    ``tokenizer.mask_id``) in ``ids`` ((T,) or (B, T), or lists, right-padded), in one forward pass.

    Returns one dict per masked position, in reading order: ``row``, ``position``, ``candidates``
    [(id, probability)] best first, and with a tokenizer ``tokens`` [(piece, probability)].
    No mask id in ``ids`` is an error."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "arch", None) != "lm" or config.attn != "bidirectional":
        raise GlassformerError("fill_mask needs an encoder-only TransformerLM (attn='bidirectional')")
    if mask_token_id is None:
        mask_token_id = None if tokenizer is None else tokenizer.mask_id
        if mask_token_id is None:
            raise GlassformerError("fill_mask needs mask_token_id (or a tokenizer with a mask token)")
    check_int("top_k", top_k, 1)
    device = next(model.parameters()).device
    ids, pad = batch_prompts(ids, pad=pad, attention_mask=attention_mask, side="right", device=device)
    _check_length(config, ids, None, "input")
    where = (ids == mask_token_id) if pad is None else (ids == mask_token_id) & ~pad
    if not bool(where.any()):
        raise GlassformerError(f"no mask token (id {mask_token_id}) in the input")
    with _eval_mode(model):
        logits = model(ids, pad)  # (B, T, V)
        rows, positions = where.nonzero(as_tuple=True)
        probs = logits[rows, positions].float().softmax(dim=-1)  # (M, V)
        top_p, top_ids = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
    found = zip(rows.tolist(), positions.tolist(), top_p.tolist(), top_ids.tolist(), strict=True)
    results: list[dict[str, Any]] = [{"row": r, "position": t, "candidates": list(zip(cand, ps, strict=True))}
                                     for r, t, ps, cand in found]
    if tokenizer is not None:
        for item in results:
            item["tokens"] = [(tokenizer.id_to_token(i), p) for i, p in item["candidates"]]
    return results
