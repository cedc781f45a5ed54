"""Sentence embeddings from an encoder (the sentence-transformers recipe: mean pooling, L2 norm)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from ..data.padding import pad_rows
from ..errors import ArgumentTypeError, GlassformerError
from ..io.checks import check_int
from ..validate import check_choice
from .api import _eval_mode, pad_id_for
from .protocol import Encoder

if TYPE_CHECKING:
    from ..tokenizers import Tokenizer

POOLINGS = ("mean", "cls")


def encode_texts(tokenizer: Tokenizer, texts: Sequence[str], max_len: int) -> list[list[int]]:
    """N id lists of ``texts`` with special tokens, each cut to ``max_len`` ids keeping a final [SEP]/eos
    (not padded); a text that encodes to no ids is an error."""
    eos = tokenizer.eos_id
    rows = [tokenizer.encode(text, add_special_tokens=True) for text in texts]
    empty = [i for i, row in enumerate(rows) if not row]
    if empty:
        raise GlassformerError(f"texts[{empty[0]}] = {texts[empty[0]]!r:.40} encodes to no tokens (and the tokenizer "
                               "adds no special tokens): there is nothing to embed")
    return [r if len(r) <= max_len else r[:max_len - 1] + [eos] if r[-1] == eos else r[:max_len] for r in rows]


def sentence_embeddings(model: Encoder, tokenizer: Tokenizer, texts: Sequence[str], *, pooling: str = "mean",
                        normalize: bool = True, batch_size: int = 32) -> torch.Tensor:
    """(N, d): one vector per text from an encoder's last hidden states (e.g. all-MiniLM-L6-v2).

    ``pooling="mean"`` averages the real tokens' vectors ([CLS] and [SEP] included, as
    sentence-transformers does); ``"cls"`` takes the first one. Texts are cut to ``max_len`` tokens.
    ``normalize`` divides by the L2 norm (dot products are then cosine similarities)."""
    if isinstance(texts, str) or not texts or not all(isinstance(t, str) for t in texts):
        raise ArgumentTypeError("texts must be a non-empty sequence of str")
    check_choice("pooling", pooling, POOLINGS)
    if not isinstance(model, Encoder):
        raise ArgumentTypeError(f"model must be a glassformer TransformerLM, got {type(model).__name__}")
    check_int("batch_size", batch_size, 1)
    device = next(model.parameters()).device
    pad_id = pad_id_for(tokenizer)
    out = []
    with _eval_mode(model):
        for start in range(0, len(texts), batch_size):
            rows = encode_texts(tokenizer, texts[start:start + batch_size], model.config.max_len)
            ids, pad = pad_rows(rows, pad_id, side="right", device=device)  # (B, T) each
            hidden = model.hidden_states(ids, pad=pad if pad.any() else None)  # (B, T, d)
            if pooling == "cls":
                vectors = hidden[:, 0]
            else:
                real = (~pad).unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
                vectors = (hidden * real).sum(1) / real.sum(1).clamp(min=1.0)
            out.append(F.normalize(vectors, dim=-1) if normalize else vectors)  # (B, d)
    return torch.cat(out)
