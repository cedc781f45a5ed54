"""glassformer: every Transformer of the lessons, from its parts, that you can see through.

The names of the course's lesson 2 are kept: ``scaled_dot_product_attention``, ``causal_mask``,
``prefix_mask``, ``padding_mask``, ``MultiHeadAttention``, ``FeedForward``, ``TransformerBlock``,
``sinusoidal_positions``, ``TransformerLM``, ``EncoderDecoder`` and ``count_params``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ._version import __version__
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
from .viz.shapes import shape_trace


def load(path: str | Path, map_location: str | torch.device = "cpu") -> tuple[torch.nn.Module, Tokenizer]:
    """``(model, tokenizer)`` from a checkpoint folder written by training (see glassformer.training)."""
    from .training.checkpoint import load as load_checkpoint_folder

    return load_checkpoint_folder(path, map_location)


__all__ = [
    "CausalityReport", "check_causality", "ModelConfig", "PRESETS", "EncoderDecoder", "TransformerLM",
    "build_model", "count_params", "FeedForward", "KVCache", "MultiHeadAttention", "RMSNorm",
    "TransformerBlock", "causal_mask", "padding_mask", "prefix_mask", "scaled_dot_product_attention",
    "sinusoidal_positions", "shape_trace", "__version__",
    "load", "Tokenizer", "CharTokenizer", "ByteTokenizer", "BPETokenizer",
]
