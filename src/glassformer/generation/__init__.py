"""Generation: KV-cached decoding, logits processors, sampling, beam search, streaming, traces.

    generate(model, ids, max_new_tokens, ...)        token ids in, token ids out (Hugging Face semantics)
    generate_text / stream_text(model, tokenizer, prompt, ...)   strings in, strings out
    trace_generation(model, ids, ...) / trace_text   per-step top-k candidates and choices
    fill_mask(model, ids, mask_token_id, ...)        encoder-only models' candidates per mask

See docs/generation.md.
"""

from .api import batch_prompts, generate
from .beam import beam_search
from .fill_mask import fill_mask
from .incremental import IncrementalDecoder, left_pad_positions
from .processors import (
    LogitsProcessorList,
    MinP,
    NoRepeatNGram,
    RepetitionPenalty,
    Temperature,
    TopK,
    TopP,
    make_processors,
)
from .search import Step, decode_steps
from .streaming import TextStream, generate_text, stream_text, trace_text
from .trace import format_trace, trace_generation

__all__ = [
    "generate", "generate_text", "stream_text", "trace_generation", "trace_text", "format_trace", "fill_mask",
    "TextStream", "batch_prompts", "beam_search", "decode_steps", "Step", "IncrementalDecoder",
    "left_pad_positions", "LogitsProcessorList", "make_processors", "Temperature", "TopK", "TopP", "MinP",
    "RepetitionPenalty", "NoRepeatNGram",
]
