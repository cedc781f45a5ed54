"""Sentence embeddings from an encoder (the sentence-transformers recipe: mean pooling, L2 norm)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ..models import TransformerLM
from ..tokenizers import Tokenizer

POOLINGS = ("mean", "cls")


def pad_batch(tokenizer: Tokenizer, texts: Sequence[str], max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Encode ``texts`` with special tokens, cut each to ``max_len`` (keeping a final [SEP]/eos) and
    right-pad: returns ids (B, T) and pad (B, T) bool, True = padding."""
    rows = [tokenizer.encode(text, add_special_tokens=True) for text in texts]
    eos = tokenizer.eos_id
    rows = [r if len(r) <= max_len else r[:max_len - 1] + [eos] if r[-1] == eos else r[:max_len] for r in rows]
    T = max(len(r) for r in rows)
    pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else 0
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long)
    pad = torch.ones(len(rows), T, dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r, dtype=torch.long)
        pad[i, :len(r)] = False
    return ids, pad


@torch.inference_mode()
def sentence_embeddings(model: TransformerLM, tokenizer: Tokenizer, texts: Sequence[str], *, pooling: str = "mean",
                        normalize: bool = True, batch_size: int = 32) -> torch.Tensor:
    """One vector per text from an encoder's last hidden states.

    ``pooling="mean"`` averages the vectors of the real tokens (padding excluded; [CLS] and [SEP]
    included, as sentence-transformers does); ``"cls"`` takes the first token's vector.

    Args:
        model: a TransformerLM (usually attn="bidirectional", e.g. all-MiniLM-L6-v2 from load_hf_dir).
        tokenizer: its tokenizer.
        texts: the sentences; each is cut to ``model.config.max_len`` tokens.
        normalize: divide each vector by its L2 norm (then dot products are cosine similarities).
        batch_size: texts per forward pass.
    Returns:
        (N, d) float tensor.
    """
    if isinstance(texts, str) or not texts or not all(isinstance(t, str) for t in texts):
        raise TypeError("texts must be a non-empty sequence of str")
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
    if not isinstance(model, TransformerLM):
        raise TypeError(f"model must be a glassformer TransformerLM, got {type(model).__name__}")
    out = []
    for start in range(0, len(texts), batch_size):
        ids, pad = pad_batch(tokenizer, texts[start:start + batch_size], model.config.max_len)
        ids, pad = ids.to(model.emb.weight.device), pad.to(model.emb.weight.device)
        hidden = model.hidden_states(ids, pad=pad if pad.any() else None)  # (B, T, d)
        if pooling == "cls":
            vectors = hidden[:, 0]
        else:
            real = (~pad).unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
            vectors = (hidden * real).sum(1) / real.sum(1).clamp(min=1.0)
        out.append(F.normalize(vectors, dim=-1) if normalize else vectors)
    return torch.cat(out)
