"""``generate``: token ids in, token ids out, for decoder-only and encoder-decoder models.

The arguments and the result follow Hugging Face ``model.generate``: a decoder-only model returns
prompt + new tokens (B * num_return_sequences, T + n); an encoder-decoder returns the decoder's
sequence, starting with ``decoder_start_token_id``. Rows that end early are filled with
``pad_token_id``. Prompts of different lengths may be given as a list of lists: they are left-padded
(right-padded for an encoder's source), and each row's result equals generating it alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..data.padding import pad_rows
from ..errors import ArgumentTypeError, GlassformerError, is_int, shown
from ..nn.masks import check_prefix_len
from ..runtime.decode import decoding_attention, few_row_route
from .beam import beam_search
from .config import (
    MAX_LENGTH_PENALTY,
    MAX_NEW_TOKENS,
    MAX_ROWS,
    GenerationConfig,
    check_max_new_tokens,
    generation_config,
)
from .incremental import IncrementalDecoder
from .processors import LogitsProcessorList, VocabLimit
from .protocol import Generative, Model, check_generative
from .search import Step, StoppingCriterion, decode_steps

PromptLike = torch.Tensor | Sequence[int] | Sequence[Sequence[int]]
"""Prompts as :func:`generate` takes them: a (T,) or (B, T) id tensor, a list of ids, or a list of lists."""

__all__ = ["MAX_LENGTH_PENALTY", "MAX_NEW_TOKENS", "MAX_ROWS", "GenerationConfig", "check_max_new_tokens",
           "batch_prompts", "generate", "iter_steps", "setup_generation", "pad_id_for", "special_id"]


def special_id(tokenizer: Any, name: str) -> int | None:
    """A tokenizer's special id ``name`` ("pad", "eos", "bos"): glassformer's ``{name}_id`` or a Hugging
    Face tokenizer's ``{name}_token_id``; None without a tokenizer or without that token."""
    value = getattr(tokenizer, f"{name}_id", None) if tokenizer is not None else None
    if value is None and tokenizer is not None:
        value = getattr(tokenizer, f"{name}_token_id", None)
    return value


def pad_id_for(tokenizer: Any = None, eos_ids: Sequence[int] = ()) -> int:
    """The one rule for the id that fills padding: the tokenizer's pad id, else the first end-of-sequence
    id (Hugging Face's fallback), else 0. Padding is masked, so the id only has to be a valid one."""
    pad = special_id(tokenizer, "pad")
    return pad if pad is not None else (eos_ids[0] if eos_ids else 0)


def _is_seq2seq(model: Model) -> bool:
    return getattr(getattr(model, "config", None), "arch", None) == "encoder-decoder"


def batch_prompts(ids: PromptLike, *, pad: torch.Tensor | None = None,
                  attention_mask: torch.Tensor | None = None, pad_token_id: int = 0, side: str = "left",
                  name: str = "ids",
                  device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Turn prompts into a (B, T) id tensor and a (B, T) padding mask (None when nothing is padded).

    Args:
        ids: a (T,) or (B, T) integer tensor, a list of ids, or a list of lists (padded on ``side``).
        pad: (B, T) bool, True = padding; or ``attention_mask`` (B, T), 1 = real token (Hugging Face).
        pad_token_id: the id written into padded slots of a list of lists.
        side: where padding goes: "left" (prompts to continue) or "right" (an encoder's source).
        name: the argument's name in error messages.
        device: where to put the tensors.
    Returns:
        (ids (B, T) long, pad (B, T) bool or None). Raises ValueError for an empty prompt or padding
        on the wrong side.
    """
    if isinstance(ids, torch.Tensor):
        if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.dim() not in (1, 2):
            raise ArgumentTypeError(f"{name} must be a (T,) or (B, T) integer tensor, got dtype {ids.dtype} "
                                    f"and shape {tuple(ids.shape)}")
        ids = (ids[None] if ids.dim() == 1 else ids).long().to(device)
    else:
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
            raise ArgumentTypeError(f"{name} must be a tensor, a list of ids or a list of lists of ids, "
                                    f"got {type(ids).__name__}")
        rows = list(ids)
        if rows and all(is_int(r) for r in rows):
            rows = [rows]
        if not rows or not all(isinstance(r, (list, tuple)) for r in rows):
            raise ArgumentTypeError(f"{name} must be a tensor, a list of ids or a list of lists of ids, "
                                    f"got {ids!r:.80}")
        if any(len(r) == 0 for r in rows):
            raise GlassformerError(f"{name}: empty prompt; give at least one token per row")
        for value in (v for r in rows for v in r):
            if not is_int(value):
                raise ArgumentTypeError(f"{name} must hold int token ids, got {shown(value)}")
            if not 0 <= value < 2**63:
                raise GlassformerError(f"{name}: token id {shown(value)} is out of range "
                                       "(expected 0 <= id < vocab_size)")
        ids, row_pad = pad_rows(rows, pad_token_id, side=side, device=device)
        if bool(row_pad.any()):
            if pad is not None or attention_mask is not None:
                raise GlassformerError(f"{name}: rows of different lengths are padded for you; "
                                       "do not pass pad/attention_mask")
            pad = row_pad
    B, T = ids.shape
    if T == 0:
        raise GlassformerError(f"{name}: empty prompt; give at least one token per row")
    if attention_mask is not None:
        if pad is not None:
            raise GlassformerError("pass either pad (True = padding) or attention_mask (1 = real token), not both")
        if not isinstance(attention_mask, torch.Tensor) or tuple(attention_mask.shape) != (B, T):
            got = tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else attention_mask
            raise GlassformerError(f"attention_mask must be a (B, T) = {(B, T)} tensor, got {got!r}")
        pad = attention_mask.to(ids.device) == 0
    if pad is None:
        return ids, None
    if not isinstance(pad, torch.Tensor) or pad.dtype != torch.bool or tuple(pad.shape) != (B, T):
        got = f"{pad.dtype} {tuple(pad.shape)}" if isinstance(pad, torch.Tensor) else type(pad).__name__
        raise GlassformerError(f"pad must be a (B, T) = {(B, T)} bool tensor (True = padding), got {got}")
    pad = pad.to(ids.device)
    if bool(pad.all(dim=1).any()):
        raise GlassformerError(f"{name}: a row is all padding (an empty prompt); give at least one token per row")
    edge = pad if side == "left" else pad.flip(1)  # padding must be a run at the start (left) / end (right)
    if bool((edge[:, 1:] & ~edge[:, :-1]).any()):
        why = "prompts to continue are left-padded" if side == "left" else "sources are right-padded"
        raise GlassformerError(f"{name}: padding must be on the {side} of each row ({why})")
    return ids, (pad if bool(pad.any()) else None)


def _no_autograd(device: torch.device) -> contextlib.AbstractContextManager[object]:
    """``torch.inference_mode`` (decoding 5-8% faster than under ``no_grad`` on a CPU), except under
    ``torch.autocast`` for ``device``: there ``torch.no_grad``, the mode in which autocast keeps its 16-bit
    copies of the weights from one step to the next (in inference mode every step cast every weight
    again: bfloat16 decoding ran at half its speed)."""
    try:
        autocast_on = torch.is_autocast_enabled(device.type)
    except TypeError:  # an older torch takes no device type
        autocast_on = torch.is_autocast_enabled() if device.type == "cuda" else torch.is_autocast_cpu_enabled()
    return torch.no_grad() if autocast_on else torch.inference_mode()


@contextlib.contextmanager
def _eval_mode(model: Model) -> Iterator[None]:
    """Dropout off and no autograd while generating, and the decoding speed policy on
    (:mod:`glassformer.runtime.decode`: the few-row route, GPU attention kernels); the model's
    train/eval state is restored afterwards."""
    was_training = model.training
    model.eval()
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    try:
        with _no_autograd(device), few_row_route(model), decoding_attention(device):
            yield
    finally:
        model.train(was_training)


@dataclass
class GenerationSetup:
    """What :func:`setup_generation` built, shared by :func:`generate`, streaming and traces.

    Attributes:
        decoder: the :class:`IncrementalDecoder` holding the (B * copies, T) prompts, copies being
            ``num_beams`` or ``num_return_sequences``.
        config: the :class:`GenerationConfig` of the call.
        processors: the logits processors it asks for (and the tokenizer's vocabulary limit).
        pad_token_id: the filler id (resolved: see :func:`pad_id_for`).
        stopping_criteria: callables (B, L) ids -> (B,) bool (the caller's, then stop_strings').
        generator: the seeded generator for sampling, or None.
        prompt_len: T, the prompt's width in columns (padding included); new tokens start there.
    """

    decoder: IncrementalDecoder
    config: GenerationConfig
    processors: LogitsProcessorList
    pad_token_id: int
    stopping_criteria: list[StoppingCriterion]
    generator: torch.Generator | None
    prompt_len: int


def setup_generation(model: Generative, ids: PromptLike, config: GenerationConfig | None = None, *,
                     prefix_len: int | torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                     pad: torch.Tensor | None = None, stopping_criteria: Sequence[StoppingCriterion] | None = None,
                     tokenizer: Any = None, **options: Any) -> GenerationSetup:
    """Check the call's inputs, encode the source (encoder-decoder) and build the decoder.

    Arguments as :func:`generate` (``options``: :class:`GenerationConfig` fields, applied to ``config``).
    Returns a :class:`GenerationSetup` whose decoder has not run yet; :func:`iter_steps`
    (greedy/sampling) or :func:`glassformer.generation.beam_search` drives it. Call it without
    autograd (``torch.inference_mode()``) with the model in eval mode (as :func:`generate` does).
    """
    check_generative(model)
    gen = generation_config(config, options)
    model_config = model.config
    seq2seq = _is_seq2seq(model)
    if not seq2seq and model_config.attn == "bidirectional":
        raise GlassformerError("an encoder-only model (attn='bidirectional') cannot generate left to right; "
                               "use glassformer.generation.fill_mask")
    gen.check_vocab(model_config.vocab_size)
    eos = list(gen.eos_token_id)
    pad_token_id = gen.pad_token_id if gen.pad_token_id is not None else pad_id_for(tokenizer, eos)
    processors = gen.processors()
    known = getattr(tokenizer, "vocab_size", None)
    if isinstance(known, int) and known < model_config.vocab_size:  # a padded model vocabulary: never the extra ids
        processors.append(VocabLimit(known))
    device = next(model.parameters()).device
    copies = gen.num_beams if gen.num_beams > 1 else gen.num_return_sequences  # rows per prompt
    max_new_tokens = gen.max_new_tokens

    if seq2seq:
        if gen.decoder_start_token_id is None:
            raise GlassformerError("an encoder-decoder model needs decoder_start_token_id "
                                   "(e.g. the tokenizer's bos id)")
        if prefix_len is not None:
            raise GlassformerError("prefix_len is only meaningful for attn='prefix' decoder-only models")
        src, src_pad = batch_prompts(ids, pad=pad, attention_mask=attention_mask, pad_token_id=pad_token_id,
                                     side="right", name="src", device=device)
        _check_length(model_config, src, src_pad, "source")
        memory = model.encode(src, src_pad).repeat_interleave(copies, dim=0)  # (encode checks src's ids)
        src_pad = None if src_pad is None else src_pad.repeat_interleave(copies, dim=0)
        start = torch.full((memory.shape[0], 1), gen.decoder_start_token_id, dtype=torch.long, device=device)
        decoder = IncrementalDecoder(model, start, None, max_new_tokens, use_cache=gen.use_cache,
                                     memory=memory, src_pad=src_pad)
    else:
        ids, pad = batch_prompts(ids, pad=pad, attention_mask=attention_mask, pad_token_id=pad_token_id,
                                 device=device)
        _check_length(model_config, ids, pad, "prompt")
        lengths = ids.shape[1] - (pad.sum(dim=1) if pad is not None else 0)
        if model_config.attn == "prefix":
            prefix_len = _prefix_lengths(prefix_len, ids.shape[0], lengths, device)
        elif prefix_len is not None:
            raise GlassformerError(f"prefix_len is only meaningful with attn='prefix' "
                                   f"(this model has attn={model_config.attn!r})")
        ids = ids.repeat_interleave(copies, dim=0)
        pad = None if pad is None else pad.repeat_interleave(copies, dim=0)
        prefix_len = None if prefix_len is None else prefix_len.repeat_interleave(copies, dim=0)
        decoder = IncrementalDecoder(model, ids, pad, max_new_tokens, use_cache=gen.use_cache,
                                     prefix_len=prefix_len)  # (checks the prompt's ids, once)

    prompt_len = decoder.length
    criteria = list(stopping_criteria or [])
    if gen.stop_strings:
        if tokenizer is None:
            raise GlassformerError("stop_strings need a tokenizer to decode the generated text")
        criteria.append(StopOnStrings(tokenizer, gen.stop_strings, prompt_len))
    generator = None
    if gen.seed is not None:
        generator = torch.Generator(device=device).manual_seed(gen.seed)
    return GenerationSetup(decoder, gen, processors, pad_token_id, criteria, generator, prompt_len)


def _check_length(config: Any, ids: torch.Tensor, pad: torch.Tensor | None, what: str) -> None:
    """An error when the longest real row of ids (B, T) exceeds the model's context ``max_len``."""
    longest = ids.shape[1] - (int(pad.sum(dim=1).min()) if pad is not None else 0)
    if longest > config.max_len:
        raise GlassformerError(f"{what} of {longest} tokens is longer than the model allows "
                               f"(max_len={config.max_len})")


def _prefix_lengths(prefix_len: int | torch.Tensor | None, B: int, lengths: torch.Tensor | int,
                    device: torch.device) -> torch.Tensor:
    """(B,) prefix lengths for a prefix-LM, counted in real tokens; by default the whole prompt.

    ``prefix_len`` (an int or a (B,) integer tensor) is checked by :func:`glassformer.nn.masks.check_prefix_len`
    against each row's real length ``lengths`` (an int or (B,): left padding makes rows shorter).
    """
    lengths = torch.as_tensor(lengths, device=device).expand(B)
    if prefix_len is None:
        return lengths.clone()
    prefix_len = check_prefix_len(prefix_len, lengths, B)
    return torch.as_tensor(prefix_len, device=device).expand(B).clone()


class StopOnStrings:
    """Stop a row once its generated text contains one of ``stop_strings`` (decoded with ``tokenizer``).

    Called with the sequences so far (B, L); returns (B,) bool, True = the text after the first
    ``prompt_len`` columns contains a stop string.
    """

    def __init__(self, tokenizer: Any, stop_strings: Sequence[str], prompt_len: int) -> None:
        if isinstance(stop_strings, str) or not all(isinstance(s, str) and s for s in stop_strings):
            raise GlassformerError(f"stop_strings must be a list of non-empty strings, got {stop_strings!r}")
        self.tokenizer, self.stop_strings, self.prompt_len = tokenizer, list(stop_strings), prompt_len

    def __call__(self, seq: torch.Tensor) -> torch.Tensor:
        texts = [self.tokenizer.decode(row) for row in seq[:, self.prompt_len:].tolist()]
        return torch.tensor([any(s in text for s in self.stop_strings) for text in texts], device=seq.device)


def generate(model: Generative, ids: PromptLike, max_new_tokens: int | None = None, *,
             config: GenerationConfig | None = None, **options: Any) -> torch.Tensor:
    """Continue prompts (decoder-only) or translate sources (encoder-decoder); return token ids.

    Args:
        model: a causal or prefix :class:`TransformerLM`, or an :class:`EncoderDecoder` (any model
            offering :class:`glassformer.generation.protocol.DecoderOnly` or ``EncoderDecoderModel``).
        ids: prompts (decoder-only) or sources (encoder-decoder): a (T,) or (B, T) tensor, a list of
            ids or a list of lists (padded for you). With a tensor, mark padding with ``pad`` (B, T)
            bool or ``attention_mask`` (B, T), 1 = real token.
        max_new_tokens: most tokens to add per row (default: the config's, 20), at most
            :data:`MAX_NEW_TOKENS` (past the model's ``max_len`` the context window slides).
        config: a :class:`GenerationConfig`; the keyword options below build one (or change a copy of it).
        options: the :class:`GenerationConfig` fields, with Hugging Face's names and meanings:
            do_sample, temperature, top_k, top_p, min_p, repetition_penalty, no_repeat_ngram_size,
            num_beams, length_penalty, early_stopping, num_return_sequences, eos_token_id,
            pad_token_id (default: :func:`pad_id_for`), seed, decoder_start_token_id (encoder-decoder:
            required), use_cache, stop_strings (with tokenizer). And the call's inputs:
            pad / attention_mask (see ``ids``), prefix_len (prefix-LM: an int or (B,) tensor; default
            the whole prompt), stopping_criteria (callables (B, L) ids -> (B,) bool), tokenizer (for
            stop_strings; also keeps ids beyond its vocabulary, a model's padded vocabulary, from
            being chosen).
    Returns:
        (B * num_return_sequences, T + n) long tensor: the prompt (as given, padding included) and
        the n <= max_new_tokens new tokens; for an encoder-decoder (B * num_return_sequences, 1 + n).
    """
    if max_new_tokens is not None:
        options["max_new_tokens"] = max_new_tokens
    with _eval_mode(model):
        setup = setup_generation(model, ids, config, **options)
        gen = setup.config
        if gen.num_beams > 1:
            if setup.stopping_criteria:
                raise GlassformerError("stop_strings/stopping_criteria are not supported with beam search")
            sequences, _ = beam_search(
                setup.decoder, gen.num_beams, gen.max_new_tokens, setup.processors,
                eos_token_id=list(gen.eos_token_id), pad_token_id=setup.pad_token_id,
                length_penalty=gen.length_penalty, early_stopping=gen.early_stopping,
                num_return_sequences=gen.num_return_sequences, do_sample=gen.do_sample,
                generator=setup.generator)
        else:
            for _ in iter_steps(setup):
                pass
            sequences = setup.decoder.sequences()
    return sequences.clone()  # cloned outside inference mode: an ordinary tensor, usable with autograd


def iter_steps(setup: GenerationSetup) -> Iterator[Step]:
    """The greedy/sampling steps of a :func:`setup_generation` result: one :class:`Step` per new token
    (tokens (B,), scores (B, V), finished (B,)); see :func:`decode_steps`. Not for beam search."""
    gen = setup.config
    if gen.num_beams > 1:
        raise GlassformerError("step-by-step output (streaming, traces) is not available with beam search "
                               "(num_beams > 1)")
    return decode_steps(setup.decoder, gen.max_new_tokens, setup.processors, do_sample=gen.do_sample,
                        eos_token_id=list(gen.eos_token_id), pad_token_id=setup.pad_token_id,
                        stopping_criteria=setup.stopping_criteria, generator=setup.generator)
