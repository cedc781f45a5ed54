"""Generation: KV-cached decoding, logits processors, sampling, beam search, streaming, traces,
fill-mask, translation and sentence embeddings. What a model must offer is declared in
:mod:`glassformer.generation.protocol`. See docs/generation.md."""

from .api import GenerationSetup, batch_prompts, generate, iter_steps, setup_generation
from .beam import beam_search
from .config import MAX_NEW_TOKENS, GenerationConfig, check_max_new_tokens
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
