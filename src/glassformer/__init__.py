"""glassformer: every Transformer of the lessons, from its parts, that you can see through. Importing it is
light and changes nothing: no torch until a name that needs it is first used (PEP 562)."""

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .checks import CausalityReport, check_causality
    from .config import PRESETS, ModelConfig
    from .models import EncoderDecoder, TransformerLM, build_model, count_params
    from .nn import (
        FeedForward,
        KVCache,
        MultiHeadAttention,
        RMSNorm,
        TransformerBlock,
        causal_mask,
        padding_mask,
        prefix_mask,
        scaled_dot_product_attention,
        sinusoidal_positions,
    )
    from .tokenizers import BPETokenizer, ByteTokenizer, CharTokenizer, Tokenizer
    from .training.checkpoint import load
    from .viz.shapes import shape_trace

_PUBLIC = {  # public name -> the module that defines it, imported on first use
    "CausalityReport": ".checks", "check_causality": ".checks", "PRESETS": ".config", "ModelConfig": ".config",
    "EncoderDecoder": ".models", "TransformerLM": ".models", "build_model": ".models", "count_params": ".models",
    "FeedForward": ".nn", "KVCache": ".nn", "MultiHeadAttention": ".nn", "RMSNorm": ".nn", "TransformerBlock": ".nn",
    "causal_mask": ".nn", "padding_mask": ".nn", "prefix_mask": ".nn", "scaled_dot_product_attention": ".nn",
    "sinusoidal_positions": ".nn", "BPETokenizer": ".tokenizers", "ByteTokenizer": ".tokenizers",
    "CharTokenizer": ".tokenizers", "Tokenizer": ".tokenizers", "shape_trace": ".viz.shapes",
    "load": ".training.checkpoint",  # (model, tokenizer) from a checkpoint folder written by training
}


def __getattr__(name: str) -> Any:
    """The public name ``name``, imported from its module the first time it is asked for (then cached)."""
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'glassformer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names, the lazily imported public ones included."""
    return sorted({*globals(), *_PUBLIC})


__all__ = [
    "CausalityReport", "check_causality", "ModelConfig", "PRESETS", "EncoderDecoder", "TransformerLM", "build_model",
    "count_params", "FeedForward", "KVCache", "MultiHeadAttention", "RMSNorm", "TransformerBlock", "causal_mask",
    "padding_mask", "prefix_mask", "scaled_dot_product_attention", "sinusoidal_positions", "shape_trace", "__version__",
    "load", "Tokenizer", "CharTokenizer", "ByteTokenizer", "BPETokenizer"
]
