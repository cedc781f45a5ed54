"""``generate``: token ids in, token ids out, with Hugging Face ``model.generate``'s arguments and results."""

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..data.padding import pad_rows
from ..errors import ArgumentTypeError, GlassformerError
from ..io.checks import is_int, shown
from ..models.inputs import check_prefix_len
from ..runtime.decode import decoding_attention, few_row_products
from .beam import beam_search
from .config import MAX_LENGTH_PENALTY, GenerationConfig, generation_config
from .incremental import IncrementalDecoder
from .processors import LogitsProcessorList, VocabLimit
from .protocol import Generative, Model, check_generative
from .search import Step, StoppingCriterion, decode_steps

PromptLike = torch.Tensor | Sequence[int] | Sequence[Sequence[int]]
"""Prompts as :func:`generate` takes them: a (T,) or (B, T) id tensor, a list of ids, or a list of lists."""

__all__ = ["MAX_LENGTH_PENALTY", "GenerationConfig", "batch_prompts", "generate", "iter_steps", "setup_generation",
           "pad_id_for", "special_id"]


def special_id(tokenizer: Any, name: str) -> int | None:
    """A tokenizer's special id ``name`` ("pad", "eos", "bos"): glassformer's ``{name}_id`` or a Hugging
    Face tokenizer's ``{name}_token_id``; None without a tokenizer or without that token."""
    value = getattr(tokenizer, f"{name}_id", None)
    return value if value is not None else getattr(tokenizer, f"{name}_token_id", None)


def pad_id_for(tokenizer: Any = None, eos_ids: Sequence[int] = ()) -> int:
    """The id that fills padding: the tokenizer's pad id, else the first eos id (Hugging Face's
    fallback), else 0. Padding is masked, so the id only has to be a valid one."""
    pad = special_id(tokenizer, "pad")
    return pad if pad is not None else (eos_ids[0] if eos_ids else 0)


def batch_prompts(ids: PromptLike, *, pad: torch.Tensor | None = None,
                  attention_mask: torch.Tensor | None = None, pad_token_id: int = 0, side: str = "left",
                  name: str = "ids",
                  device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Prompts (a (T,) or (B, T) tensor, a list of ids, or a list of lists, padded with ``pad_token_id``
    on ``side``) -> (ids (B, T) long, pad (B, T) bool, True = padding, or None when nothing is padded).

    A tensor's padding comes as ``pad`` or ``attention_mask`` (1 = real token). An empty prompt or
    padding on the wrong side is an error naming ``name``."""
    if isinstance(ids, torch.Tensor):
        if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.dim() not in (1, 2):
            raise ArgumentTypeError(f"{name} must be a (T,) or (B, T) integer tensor, got dtype {ids.dtype} "
                                    f"and shape {tuple(ids.shape)}")
        ids = (ids[None] if ids.dim() == 1 else ids).long().to(device)
    else:
        rows = list(ids) if isinstance(ids, Sequence) and not isinstance(ids, (str, bytes)) else None
        if rows and all(is_int(r) for r in rows):
            rows = [rows]
        if not rows or not all(isinstance(r, (list, tuple)) for r in rows):
            got = type(ids).__name__ if rows is None else f"{ids!r:.80}"
            raise ArgumentTypeError(f"{name} must be a tensor, a list of ids or a list of lists of ids, got {got}")
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


@contextlib.contextmanager
def _eval_mode(model: Model) -> Iterator[None]:
    """Eval mode, no autograd and the decoding choices (:mod:`glassformer.runtime.decode`: the few-row product,
    on a GPU attention kernels off cuDNN) while generating; each module in training mode is put back afterwards
    (a model in eval mode is left untouched)."""
    training = [m for m in model.modules() if m.training]
    if training:
        model.eval()
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    # no autograd: torch.inference_mode (faster), except under autocast: there torch.no_grad, in which autocast
    # keeps its 16-bit weight copies from one step to the next
    no_autograd = torch.no_grad() if torch.is_autocast_enabled(device.type) else torch.inference_mode()
    try:
        with no_autograd, few_row_products(model), decoding_attention(device):
            yield
    finally:
        for m in training:
            m.training = True


@dataclass
class GenerationSetup:
    """What :func:`setup_generation` built: the decoder holding (B * copies, T) prompts (copies: num_beams
    or num_return_sequences), the stopping criteria (the caller's, then stop_strings'), the seeded
    generator or None, and ``prompt_len``, the column where new tokens start."""

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
    """Check the call's inputs, encode the source (encoder-decoder) and build the decoder, not run yet.

    Arguments as :func:`generate`. Call it without autograd, the model in eval mode (as :func:`generate` does)."""
    check_generative(model)
    gen = generation_config(config, options)
    model_config = model.config
    seq2seq = getattr(model_config, "arch", None) == "encoder-decoder"
    if model_config.attn == "bidirectional":
        raise GlassformerError("an encoder-only model (attn='bidirectional') cannot generate left to right; "
                               "use glassformer.generation.fill_mask")
    if seq2seq and gen.decoder_start_token_id is None:
        raise GlassformerError("an encoder-decoder model needs decoder_start_token_id (e.g. the tokenizer's bos id)")
    if prefix_len is not None and model_config.attn != "prefix":  # (an encoder-decoder's attn is "causal")
        raise GlassformerError(f"prefix_len is only meaningful with attn='prefix' "
                               f"(this model has attn={model_config.attn!r})")
    if gen.stop_strings and tokenizer is None:
        raise GlassformerError("stop_strings need a tokenizer to decode the generated text")
    gen.check_vocab(model_config.vocab_size)
    pad_token_id = gen.pad_token_id if gen.pad_token_id is not None else pad_id_for(tokenizer, gen.eos_token_id)
    processors = gen.processors()
    known = getattr(tokenizer, "vocab_size", None)
    if isinstance(known, int) and known < model_config.vocab_size:  # a padded model vocabulary: never the extra ids
        processors.append(VocabLimit(known))
    device = next(model.parameters()).device
    copies = gen.num_beams if gen.num_beams > 1 else gen.num_return_sequences  # rows per prompt
    # prompts are left-padded (each row's last token in the last column), an encoder-decoder's sources right-padded
    ids, pad = batch_prompts(ids, pad=pad, attention_mask=attention_mask, pad_token_id=pad_token_id,
                             side="right" if seq2seq else "left", name="src" if seq2seq else "ids", device=device)
    _check_length(model_config, ids, pad, "source" if seq2seq else "prompt")
    if model_config.attn == "prefix":  # counted in real tokens; by default the whole prompt
        B, n_pad = ids.shape[0], (pad.sum(dim=1) if pad is not None else 0)
        lengths = torch.as_tensor(ids.shape[1] - n_pad, device=device).expand(B)
        prefix_len = lengths if prefix_len is None else check_prefix_len(prefix_len, lengths, B)
        prefix_len = torch.as_tensor(prefix_len, device=device).expand(B)

    def rows(t: torch.Tensor | None) -> torch.Tensor | None:  # (B, ...) -> (B * copies, ...), each row's copies in turn
        return None if t is None else t.repeat_interleave(copies, dim=0)

    if seq2seq:
        memory = rows(model.encode(ids, pad))  # (encode checks the source's ids)
        start = torch.full((memory.shape[0], 1), gen.decoder_start_token_id, dtype=torch.long, device=device)
        decoder = IncrementalDecoder(model, start, None, gen.max_new_tokens, use_cache=gen.use_cache,
                                     memory=memory, src_pad=rows(pad))
    else:  # (the decoder checks the prompt's ids, once)
        decoder = IncrementalDecoder(model, rows(ids), rows(pad), gen.max_new_tokens, use_cache=gen.use_cache,
                                     prefix_len=rows(prefix_len), compile=gen.compile)

    prompt_len = decoder.length

    def stop_strings_found(seq: torch.Tensor) -> torch.Tensor:  # (B, L) -> (B,): a row's new text holds a stop string
        texts = [tokenizer.decode(row) for row in seq[:, prompt_len:].tolist()]
        return torch.tensor([any(s in text for s in gen.stop_strings) for text in texts], device=seq.device)

    criteria = list(stopping_criteria or [])
    if gen.stop_strings:
        criteria.append(stop_strings_found)
    generator = None if gen.seed is None else torch.Generator(device=device).manual_seed(gen.seed)
    return GenerationSetup(decoder, gen, processors, pad_token_id, criteria, generator, prompt_len)


def _check_length(config: Any, ids: torch.Tensor, pad: torch.Tensor | None, what: str) -> None:
    """An error when the longest real row of ids (B, T) exceeds the model's ``max_len``."""
    longest = ids.shape[1] - (int(pad.sum(dim=1).min()) if pad is not None else 0)
    if longest > config.max_len:
        raise GlassformerError(f"{what} of {longest} tokens is longer than the model allows "
                               f"(max_len={config.max_len})")


def generate(model: Generative, ids: PromptLike, max_new_tokens: int | None = None, *,
             config: GenerationConfig | None = None, **options: Any) -> torch.Tensor:
    """Continue prompts (decoder-only) or translate sources (encoder-decoder); return token ids.

    Args:
        ids: prompts or sources, as :func:`batch_prompts` takes them (lists of different lengths are
            padded for you; each row's result equals generating it alone).
        max_new_tokens: default 20; past the model's ``max_len`` the context window slides.
        config: a :class:`GenerationConfig`; keyword options build one (or change a copy of it).
        options: :class:`GenerationConfig` fields, and the call's inputs: pad / attention_mask,
            prefix_len (prefix-LM: an int or (B,) tensor; default the whole prompt), stopping_criteria
            (callables (B, L) ids -> (B,) bool), tokenizer (for stop_strings and its vocabulary size).
    Returns:
        (B * num_return_sequences, T + n) long: the prompt as given and n <= max_new_tokens new
        tokens; for an encoder-decoder (B * num_return_sequences, 1 + n)."""
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
    """The greedy/sampling steps of a :func:`setup_generation` result, one :class:`Step` per new token
    (see :func:`decode_steps`). Not for beam search."""
    gen = setup.config
    if gen.num_beams > 1:
        raise GlassformerError("step-by-step output (streaming, traces) is not available with beam search "
                               "(num_beams > 1)")
    return decode_steps(setup.decoder, gen.max_new_tokens, setup.processors, do_sample=gen.do_sample,
                        eos_token_id=list(gen.eos_token_id), pad_token_id=setup.pad_token_id,
                        stopping_criteria=setup.stopping_criteria, generator=setup.generator)
