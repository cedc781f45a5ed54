"""``GenerationConfig``: how :func:`glassformer.generation.generate` chooses tokens, checked once, when made;
what belongs to one call (padding, prefix lengths, a tokenizer, stopping callables) stays its argument."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ArgumentTypeError, GlassformerError
from ..io.checks import MAX_SEED, check_int, check_token_id, is_int
from ..validate import check_fields, option
from .processors import LogitsProcessorList, make_processors

MAX_NEW_TOKENS = 1_000_000  # per row and call: the window slides past max_len, but a mistyped 1e9 would run for days
MAX_LENGTH_PENALTY = 10.0  # beam search divides by length ** length_penalty; beyond +-10 that overflows a float
MAX_ROWS = 4096  # the most copies of each prompt (num_beams, num_return_sequences): a bound on memory


def check_max_new_tokens(value: Any, config: Any = None, name: str = "max_new_tokens") -> int:
    """``value`` if it is an int in [1, :data:`MAX_NEW_TOKENS`], else a one-line error naming ``name``."""
    if is_int(value) and value > MAX_NEW_TOKENS:
        context = f"; past the model's context (max_len={config.max_len}) the window slides" if config else ""
        raise GlassformerError(f"{name}={value} is more than glassformer generates in one call "
                               f"(at most {MAX_NEW_TOKENS:,} new tokens per row{context}); ask for fewer")
    return check_int(name, value, 1, MAX_NEW_TOKENS)


@dataclass(frozen=True)
class GenerationConfig:
    """How to choose tokens, with Hugging Face's option names and meanings; valid from construction, immutable.

    temperature, top_k (0/None: off), top_p and min_p apply only with ``do_sample`` (checked always);
    ``num_beams`` > 1 is beam search. ``eos_token_id`` (an int or a sequence) and ``stop_strings`` are
    kept as tuples. ``pad_token_id`` None: the tokenizer's pad id, else the first eos id, else 0.
    ``seed`` seeds a private generator. ``compile`` (glassformer's own): one-token steps of an unpadded
    decoder-only batch through the model's forward compiled by ``torch.compile`` on a static cache, the same
    tokens; True, False (the default) or "auto" (only where it measured faster, or for enough tokens to pay
    for compiling: :func:`glassformer.runtime.decode.wants_compiled`). Token ids are checked against a
    vocabulary by :meth:`check_vocab`."""

    max_new_tokens: int = 20
    do_sample: bool = False
    temperature: float = option(1.0, gt=0)
    top_k: int | None = option(None, ge=0)
    top_p: float | None = option(None, gt=0, le=1)
    min_p: float | None = option(None, ge=0, le=1)
    repetition_penalty: float | None = option(None, gt=0)
    no_repeat_ngram_size: int | None = option(None, ge=0)
    num_beams: int = option(1, ge=1, le=MAX_ROWS)
    length_penalty: float = option(1.0, ge=-MAX_LENGTH_PENALTY, le=MAX_LENGTH_PENALTY)
    early_stopping: bool | str = False
    eos_token_id: int | Sequence[int] | None = ()
    pad_token_id: int | None = option(None, ge=0)
    num_return_sequences: int = option(1, ge=1, le=MAX_ROWS)
    seed: int | None = option(None, ge=0, le=MAX_SEED)
    decoder_start_token_id: int | None = option(None, ge=0)
    use_cache: bool = True
    stop_strings: Sequence[str] | None = ()
    compile: bool | str = False

    def __post_init__(self) -> None:
        check_max_new_tokens(self.max_new_tokens)  # its own message for a too large count
        for name, word in (("compile", "auto"), ("early_stopping", "never")):  # True, False or that word
            value = getattr(self, name)
            if not isinstance(value, bool) and value != word:
                raise GlassformerError(f"{name} must be True, False or {word!r}, got {value!r:.60}")
        check_fields(self)  # types and ranges, temperature to seed
        beams, copies = self.num_beams, self.num_return_sequences
        if beams == 1 and not self.do_sample and copies != 1:
            raise GlassformerError(f"greedy decoding gives one sequence per prompt; num_return_sequences="
                                   f"{copies} needs do_sample=True or num_beams >= num_return_sequences")
        if beams > 1 and copies > beams:
            raise GlassformerError(f"num_return_sequences={copies} must be <= num_beams={beams}")
        eos = self.eos_token_id
        if eos is not None and not is_int(eos) and not isinstance(eos, (list, tuple)):
            raise ArgumentTypeError(f"eos_token_id must be an id or a list of ids, got {type(eos).__name__}")
        eos = (eos,) if is_int(eos) else tuple(eos or ())
        for value in eos:
            check_int("eos_token_id", value, 0)
        stops = self.stop_strings
        if isinstance(stops, str) or not isinstance(stops, (list, tuple, type(None))) or \
                not all(isinstance(s, str) and s for s in stops or ()):
            raise GlassformerError(f"stop_strings must be a list of non-empty strings, got {stops!r:.80}")
        object.__setattr__(self, "eos_token_id", eos)  # normalising fields of a frozen instance while it is made
        object.__setattr__(self, "stop_strings", tuple(stops or ()))

    def replace(self, **changes: Any) -> GenerationConfig:
        """A copy with ``changes`` (checked like a new config)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """The fields' names: the options ``generate`` accepts as keywords besides its call inputs."""
        return tuple(f.name for f in dataclasses.fields(cls))

    def processors(self) -> LogitsProcessorList:
        """The logits processors these options ask for (see :func:`make_processors`)."""
        return make_processors(
            do_sample=self.do_sample, temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
            min_p=self.min_p, repetition_penalty=self.repetition_penalty,
            no_repeat_ngram_size=self.no_repeat_ngram_size,
            min_tokens_to_keep=len(self.eos_token_id) + 1 if self.num_beams > 1 else 1)

    def check_vocab(self, vocab_size: int) -> None:
        """An error naming the option when a token id (eos, pad, decoder start) is not in [0, vocab_size)."""
        for value in self.eos_token_id:
            check_token_id("eos_token_id", value, vocab_size)
        for name in ("pad_token_id", "decoder_start_token_id"):
            if getattr(self, name) is not None:
                check_token_id(name, getattr(self, name), vocab_size)


def generation_config(config: GenerationConfig | None, options: dict[str, Any]) -> GenerationConfig:
    """``config`` with ``options`` (keyword options of ``generate``) applied, or a new config from them."""
    unknown = sorted(set(options) - set(GenerationConfig.option_names()))
    if unknown:
        raise ArgumentTypeError(f"unknown generation option(s) {', '.join(unknown)}; known: "
                                f"{', '.join(GenerationConfig.option_names())}, and the call inputs prefix_len, "
                                "attention_mask, pad, stopping_criteria, tokenizer")
    if config is None:
        return GenerationConfig(**options)
    if not isinstance(config, GenerationConfig):
        raise ArgumentTypeError(f"config must be a GenerationConfig, got {type(config).__name__}")
    return config.replace(**options) if options else config
