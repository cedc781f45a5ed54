"""Translating many sentences with an encoder-decoder, and scoring them with sacreBLEU."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ArgumentTypeError, GlassformerError
from ..io.checks import check_int
from .api import generate
from .config import GenerationConfig, check_max_new_tokens
from .protocol import EncoderDecoderModel

if TYPE_CHECKING:
    from ..tokenizers import Tokenizer


def translate(model: EncoderDecoderModel, tokenizer: Tokenizer, sources: Sequence[str], *, batch_size: int = 64,
              num_beams: int = 1, length_penalty: float = 1.0, max_new_tokens: int | None = None) -> list[str]:
    """Translate N ``sources`` with an EncoderDecoder, in batches of similar length; N strings come back
    in input order, each equal to translating it alone (greedy, or beam search with ``num_beams``).
    ``max_new_tokens`` defaults to ``min(max_len, 2 x longest source in the batch + 10)``."""
    if getattr(getattr(model, "config", None), "arch", None) != "encoder-decoder":
        raise GlassformerError("translate needs an encoder-decoder checkpoint "
                               "(a model trained with objective 'seq2seq')")
    if isinstance(sources, str):
        raise ArgumentTypeError("sources must be a list of sentences, got a single str")
    bos, eos, pad = tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id
    if bos is None or eos is None:
        raise GlassformerError("translate needs a tokenizer with 'bos' and 'eos' special tokens")
    check_int("batch_size", batch_size, 1)
    if max_new_tokens is not None:
        check_max_new_tokens(max_new_tokens, model.config)
    config = GenerationConfig(num_beams=num_beams, length_penalty=length_penalty, decoder_start_token_id=bos,
                              eos_token_id=eos, pad_token_id=pad if pad is not None else eos)  # checked here, once
    max_len = model.config.max_len
    encoded = [(tokenizer.encode(s, add_special_tokens=False) + [eos])[:max_len] for s in sources]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    out: list[str] = [""] * len(encoded)
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        batch = [encoded[i] for i in rows]
        limit = max_new_tokens or min(max_len, 2 * max(len(r) for r in batch) + 10)
        ids = generate(model, batch, limit, config=config, tokenizer=tokenizer)  # (B, 1 + n)
        for i, row in zip(rows, ids[:, 1:].tolist(), strict=True):
            out[i] = tokenizer.decode(row[:row.index(eos)] if eos in row else row).strip()
    return out


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> Any:
    """sacreBLEU's corpus BLEU (the standard WMT score) of N hypotheses against N references, in
    order; the score object's ``.score`` is in [0, 100], its ``str()`` the full line."""
    if len(hypotheses) != len(references):
        raise GlassformerError(f"{len(hypotheses)} hypotheses but {len(references)} references; they must pair up")
    try:
        import sacrebleu
    except ImportError:
        raise ImportError("BLEU needs sacrebleu: pip install sacrebleu (or the 'dev' extra)") from None
    return sacrebleu.corpus_bleu(list(hypotheses), [list(references)])
