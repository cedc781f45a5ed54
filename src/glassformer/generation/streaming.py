"""Text-level generation: prompts as strings, results as strings, and streaming that never breaks a character.

A byte-level token may hold half a UTF-8 character, and a BPE/WordPiece token may change how the text
before it decodes, so :class:`TextStream` re-decodes a short window of recent tokens and emits only
final text (Hugging Face text-generation-inference's incremental detokenisation)."""

from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import ArgumentTypeError, GlassformerError
from .api import _eval_mode, generate, iter_steps, setup_generation
from .protocol import Generative
from .trace import trace_generation

REPLACEMENT = "\ufffd"  # what a decoder writes for bytes that are not (yet) a whole character


class TextStream:
    """Turn a growing list of token ids into text pieces that are safe to print: the concatenation of
    everything ``push`` and ``flush`` return equals ``tokenizer.decode(all_ids)``."""

    def __init__(self, tokenizer: Any, skip_special_tokens: bool = True) -> None:
        self.tokenizer, self.skip = tokenizer, skip_special_tokens
        self.ids: list[int] = []
        self.prefix_offset = 0  # start of the window re-decoded for context
        self.read_offset = 0  # tokens up to here have been emitted

    def _texts(self) -> tuple[str, str]:
        """The window's text without and with the tokens not emitted yet."""
        decode = self.tokenizer.decode
        return (decode(self.ids[self.prefix_offset:self.read_offset], skip_special_tokens=self.skip),
                decode(self.ids[self.prefix_offset:], skip_special_tokens=self.skip))

    def push(self, token_id: int) -> str:
        """Add one id; return the text that became final with it ("" while it must wait: an incomplete
        character (U+FFFD) or a change to the text already emitted)."""
        self.ids.append(int(token_id))
        before, now = self._texts()
        if len(now) > len(before) and now.startswith(before) and not now.endswith(REPLACEMENT):
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            return now[len(before):]
        return ""

    def flush(self) -> str:
        """Whatever is still held back (possibly ending in U+FFFD if the ids end mid-character)."""
        before, now = self._texts()
        self.prefix_offset = self.read_offset = len(self.ids)
        return now[len(before):] if now.startswith(before) else now


def _text_options(tokenizer: Any, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with the tokenizer's eos id by default."""
    options = dict(options)
    if options.get("eos_token_id") is None and tokenizer.eos_id is not None:
        options["eos_token_id"] = tokenizer.eos_id
    return options


def _cut_at_stop(text: str, stop_strings: Sequence[str] | None) -> str:
    cut = min((text.find(s) for s in stop_strings or [] if s in text), default=-1)
    return text if cut < 0 else text[:cut]


def _source_and_start(model: Generative, tokenizer: Any, prompt: str, options: dict[str, Any]) -> list[int]:
    """The prompt's ids; for an encoder-decoder the source as data.seq2seq builds it (ids + [eos]), and
    ``decoder_start_token_id`` defaulting to the tokenizer's bos id."""
    if not isinstance(prompt, str):
        raise ArgumentTypeError(f"prompt must be a str, got {type(prompt).__name__}")
    ids = tokenizer.encode(prompt, add_special_tokens=False)  # a prompt to continue: no eos after it
    if not ids:
        raise GlassformerError("prompt is empty: give at least one character")
    if getattr(model.config, "arch", "") != "encoder-decoder":
        return ids
    if options.get("decoder_start_token_id") is None:  # (None without a bos token: setup_generation refuses it)
        options["decoder_start_token_id"] = tokenizer.bos_id
    return ids + ([tokenizer.eos_id] if tokenizer.eos_id is not None else [])


def generate_text(model: Generative, tokenizer: Any, prompt: str | Sequence[str], max_new_tokens: int = 50,
                  **options: Any) -> str | list[str]:
    """Continue (or translate) ``prompt``, a string or a list of them, and return only the new text (a
    list for a list of prompts). Options as :func:`glassformer.generation.generate`; eos/pad ids default
    to the tokenizer's; ``stop_strings`` end a row and are cut from the returned text."""
    options = _text_options(tokenizer, options)
    prompts = [prompt] if isinstance(prompt, str) else list(prompt)
    ids = [_source_and_start(model, tokenizer, p, options) for p in prompts]
    out = generate(model, ids, max_new_tokens, tokenizer=tokenizer, **options)
    start = 1 if getattr(model.config, "arch", "") == "encoder-decoder" else max(len(i) for i in ids)
    stops = options.get("stop_strings")
    texts = [_cut_at_stop(tokenizer.decode(row), stops) for row in out[:, start:].tolist()]
    return texts[0] if isinstance(prompt, str) and len(texts) == 1 else texts


def stream_text(model: Generative, tokenizer: Any, prompt: str, max_new_tokens: int = 50,
                **options: Any) -> Iterator[str]:
    """Yield the new text of one prompt piece by piece, as soon as each piece is final (greedy or sampled).

    Options as :func:`generate_text`. Text that might start a stop string is held back until it does
    not; a stop string ends the stream, unyielded. The model is in eval mode only inside each step."""
    options = _text_options(tokenizer, options)
    ids = _source_and_start(model, tokenizer, prompt, options)
    stops = list(options.get("stop_strings") or [])
    with _eval_mode(model):
        setup = setup_generation(model, ids, max_new_tokens=max_new_tokens, tokenizer=tokenizer, **options)
    if setup.decoder.tokens.shape[0] != 1:
        raise GlassformerError("stream_text streams one sequence; use num_return_sequences=1")
    steps, stream, pending = iter_steps(setup), TextStream(tokenizer), ""
    while True:
        with _eval_mode(model):
            step = next(steps, None)
        if step is None:
            pending += stream.flush()
            break
        pending += stream.push(int(step.tokens[0]))
        if any(s in pending for s in stops):
            break
        # hold back the longest end of the text that could still grow into a stop string
        hold = max((k for s in stops for k in range(1, len(s)) if pending.endswith(s[:k])), default=0)
        if len(pending) > hold:
            yield pending[:len(pending) - hold]
            pending = pending[len(pending) - hold:]
    pending = _cut_at_stop(pending, stops)
    if pending:
        yield pending


def trace_text(model: Generative, tokenizer: Any, prompt: str, max_new_tokens: int = 12, top_k: int = 4,
               **options: Any) -> list[dict[str, Any]]:
    """:func:`glassformer.generation.trace_generation` for a text prompt (records with ``*_text`` fields)."""
    options = _text_options(tokenizer, options)
    ids = _source_and_start(model, tokenizer, prompt, options)
    return trace_generation(model, ids, max_new_tokens, top_k, tokenizer=tokenizer, **options)
