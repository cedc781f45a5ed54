"""glassformer: every Transformer of the lessons, from its parts, that you can see through.

The names of the course's lesson 2 are kept: ``scaled_dot_product_attention``, ``causal_mask``,
``prefix_mask``, ``padding_mask``, ``MultiHeadAttention``, ``FeedForward``, ``TransformerBlock``,
``sinusoidal_positions``, ``TransformerLM``, ``EncoderDecoder`` and ``count_params``.
"""

# ruff: noqa: E402  (the imports below come after the thread policy is set, before torch loads)
from __future__ import annotations

from pathlib import Path

from .runtime import threads as _threads

_threads.prepare()  # before torch loads OpenMP: its wait policy is read once (runtime/threads.py)

import torch

_threads.apply()  # one thread per free CPU when the machine is busy now (else torch's choice)

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
