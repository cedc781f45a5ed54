"""Text-level generation: prompts as strings, results as strings, and streaming that never breaks a character.

Decoding token by token is not enough to stream text: a byte-level token may hold half of a UTF-8
character, and a BPE/WordPiece token may change how the text before it decodes (a leading space, a
"##" continuation). :class:`TextStream` therefore re-decodes a short window of recent tokens and
emits only text that is final: it holds back output that ends in an incomplete character (decoded
as U+FFFD) or that changed the already-emitted text (the incremental detokenisation of Hugging Face
text-generation-inference).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import ArgumentTypeError, GlassformerError
from .api import GenerationSetup, _eval_mode, generate, iter_steps, setup_generation
from .protocol import Generative
from .search import Step
from .trace import trace_generation

REPLACEMENT = "\ufffd"  # what a decoder writes for bytes that are not (yet) a whole character


class TextStream:
    """Turn a growing list of token ids into text pieces that are safe to print.

    ``push(token_id)`` returns the newly final text ("" when it must wait); ``flush()`` returns the
    rest at the end. The concatenation of everything returned equals ``tokenizer.decode(all_ids)``.
    """

    def __init__(self, tokenizer: Any, skip_special_tokens: bool = True) -> None:
        self.tokenizer, self.skip = tokenizer, skip_special_tokens
        self.ids: list[int] = []
        self.prefix_offset = 0  # start of the window re-decoded for context
        self.read_offset = 0  # tokens up to here have been emitted

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=self.skip)

    def push(self, token_id: int) -> str:
        """Add one id; return the text that became final with it ("" while it must wait)."""
        self.ids.append(int(token_id))
        before = self._decode(self.ids[self.prefix_offset:self.read_offset])
        now = self._decode(self.ids[self.prefix_offset:])
        if len(now) > len(before) and now.startswith(before) and not now.endswith(REPLACEMENT):
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            return now[len(before):]
        return ""

    def flush(self) -> str:
        """Whatever is still held back (possibly ending in U+FFFD if the ids end mid-character)."""
        before = self._decode(self.ids[self.prefix_offset:self.read_offset])
        now = self._decode(self.ids[self.prefix_offset:])
        self.prefix_offset = self.read_offset = len(self.ids)
        return now[len(before):] if now.startswith(before) else now


def _encode_prompt(tokenizer: Any, prompt: str) -> list[int]:
    if not isinstance(prompt, str):
        raise ArgumentTypeError(f"prompt must be a str, got {type(prompt).__name__}")
    ids = tokenizer.encode(prompt, add_special_tokens=False)  # a prompt to continue: no eos after it
    if not ids:
        raise GlassformerError("prompt is empty: give at least one character")
    return ids


def _text_options(tokenizer: Any, options: dict[str, Any]) -> dict[str, Any]:
    """The default eos id from the tokenizer, and the tokenizer itself: for stop strings, for its pad id
    (``api.pad_id_for``), and so that ids of a padded model vocabulary beyond the tokenizer's are never
    generated."""
    options = dict(options)
    if options.get("eos_token_id") is None and tokenizer.eos_id is not None:
        options["eos_token_id"] = tokenizer.eos_id
    options["tokenizer"] = tokenizer
    return options


def _cut_at_stop(text: str, stop_strings: Sequence[str] | None) -> str:
    cut = min((text.find(s) for s in stop_strings or [] if s in text), default=-1)
    return text if cut < 0 else text[:cut]


def _source_and_start(model: Generative, tokenizer: Any, prompt: str, options: dict[str, Any]) -> list[int]:
    """The prompt's ids. For an encoder-decoder: the source as glassformer.data.seq2seq builds it
    (ids + [eos]), and ``decoder_start_token_id`` defaulting to the tokenizer's bos id."""
    ids = _encode_prompt(tokenizer, prompt)
    if getattr(model.config, "arch", "") != "encoder-decoder":
        return ids
    if options.get("decoder_start_token_id") is None:
        if tokenizer.bos_id is None:
            raise GlassformerError("an encoder-decoder needs decoder_start_token_id; "
                                   "this tokenizer has no bos token")
        options["decoder_start_token_id"] = tokenizer.bos_id
    return ids + ([tokenizer.eos_id] if tokenizer.eos_id is not None else [])


def generate_text(model: Generative, tokenizer: Any, prompt: str | Sequence[str], max_new_tokens: int = 50,
                  **options: Any) -> str | list[str]:
    """Continue (or translate) ``prompt`` and return only the new text.

    Args:
        model, tokenizer: a decoder-only model or an encoder-decoder, and the tokenizer it was trained with.
        prompt: a string, or a list of strings (batched with left padding).
        max_new_tokens, options: as :func:`glassformer.generation.generate`; eos/pad ids default to
            the tokenizer's; ``stop_strings`` end a row and are cut from the returned text.
    Returns:
        The new text (a list of strings for a list of prompts; num_return_sequences per prompt).
    """
    options = _text_options(tokenizer, options)
    prompts = [prompt] if isinstance(prompt, str) else list(prompt)
    ids = [_source_and_start(model, tokenizer, p, options) for p in prompts]
    out = generate(model, ids, max_new_tokens, **options)
    start = 1 if getattr(model.config, "arch", "") == "encoder-decoder" else max(len(i) for i in ids)
    stops = options.get("stop_strings")
    texts = [_cut_at_stop(tokenizer.decode(row), stops) for row in out[:, start:].tolist()]
    return texts[0] if isinstance(prompt, str) and len(texts) == 1 else texts


def stream_text(model: Generative, tokenizer: Any, prompt: str, max_new_tokens: int = 50,
                **options: Any) -> Iterator[str]:
    """Yield the new text of one prompt piece by piece, as soon as each piece is final.

    Greedy or sampled (not beam search). Options as :func:`generate_text`. Text that might be the
    start of a stop string is held back until it is not; a stop string ends the stream and is not
    yielded. The model runs in eval/inference mode only inside each step, not between yields.
    """
    options = _text_options(tokenizer, options)
    ids = _source_and_start(model, tokenizer, prompt, options)
    stops = list(options.get("stop_strings") or [])
    with _eval_mode(model):
        setup = setup_generation(model, ids, max_new_tokens=max_new_tokens, **options)
    if setup.decoder.tokens.shape[0] != 1:
        raise GlassformerError("stream_text streams one sequence; use num_return_sequences=1")
    stream, pending = TextStream(tokenizer), ""
    for step in _steps_in_eval_mode(model, setup):
        pending += stream.push(int(step.tokens[0]))
        if any(s in pending for s in stops):
            break
        hold = _partial_stop(pending, stops)
        if len(pending) > hold:
            yield pending[:len(pending) - hold]
            pending = pending[len(pending) - hold:]
    else:
        pending += stream.flush()
    pending = _cut_at_stop(pending, stops)
    if pending:
        yield pending


def _steps_in_eval_mode(model: Generative, setup: GenerationSetup) -> Iterator[Step]:
    steps = iter_steps(setup)
    while True:
        with _eval_mode(model):
            step = next(steps, None)
        if step is None:
            return
        yield step


def _partial_stop(text: str, stops: Sequence[str]) -> int:
    """Length of the longest end of ``text`` that could still grow into a stop string."""
    return max((k for s in stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)


def trace_text(model: Generative, tokenizer: Any, prompt: str, max_new_tokens: int = 12, top_k: int = 4,
               **options: Any) -> list[dict[str, Any]]:
    """:func:`glassformer.generation.trace_generation` for a text prompt: records carry the text
    of the context, the choice and the candidates (``context_text``, ``chosen_text``, ``top_k_text``)."""
    options = _text_options(tokenizer, options)
    ids = _source_and_start(model, tokenizer, prompt, options)
    options.pop("tokenizer")  # trace_generation takes it as its own argument
    return trace_generation(model, ids, max_new_tokens, top_k, tokenizer=tokenizer, **options)
