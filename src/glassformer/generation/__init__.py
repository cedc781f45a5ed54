"""Generation: KV-cached decoding, logits processors, sampling, beam search, streaming, traces.

    generate(model, ids, max_new_tokens, ...)        token ids in, token ids out (Hugging Face semantics)
    GenerationConfig(do_sample=..., ...)             generate's options, checked once (frozen)
    generate_text / stream_text(model, tokenizer, prompt, ...)   strings in, strings out
    trace_generation(model, ids, ...) / trace_text   per-step top-k candidates and choices
    fill_mask(model, ids, mask_token_id, ...)        encoder-only models' candidates per mask
    translate(model, tokenizer, sources) / bleu      batched translation with an encoder-decoder, sacreBLEU
    sentence_embeddings(model, tokenizer, texts)     pooled encoder states, one vector per text

What a model must offer to be generated from is declared in :mod:`glassformer.generation.protocol`
(``DecoderOnly``, ``EncoderDecoderModel``, ``Encoder``). See docs/generation.md.
"""

from .api import (
    MAX_NEW_TOKENS,
    GenerationSetup,
    batch_prompts,
    check_max_new_tokens,
    generate,
    iter_steps,
    setup_generation,
)
from .beam import beam_search
from .config import GenerationConfig
from .embeddings import sentence_embeddings
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
from .protocol import DecoderOnly, Encoder, EncoderDecoderModel, Generative
from .search import Step, decode_steps
from .streaming import TextStream, generate_text, stream_text, trace_text
from .trace import format_trace, trace_generation
from .translation import bleu, translate

__all__ = [
    "generate", "generate_text", "stream_text", "trace_generation", "trace_text", "format_trace", "fill_mask",
    "translate", "bleu", "sentence_embeddings", "TextStream", "batch_prompts", "setup_generation",
    "GenerationSetup", "iter_steps", "beam_search", "decode_steps", "Step", "IncrementalDecoder",
    "left_pad_positions", "LogitsProcessorList", "make_processors", "Temperature", "TopK", "TopP", "MinP",
    "RepetitionPenalty", "NoRepeatNGram", "DecoderOnly", "EncoderDecoderModel", "Encoder", "Generative",
    "MAX_NEW_TOKENS", "check_max_new_tokens", "GenerationConfig",
]
