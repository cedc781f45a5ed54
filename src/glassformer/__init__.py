"""glassformer: every Transformer of the lessons, from its parts, that you can see through.

The names of the course's lesson 2 are kept: ``scaled_dot_product_attention``, ``causal_mask``,
``prefix_mask``, ``padding_mask``, ``MultiHeadAttention``, ``FeedForward``, ``TransformerBlock``,
``sinusoidal_positions``, ``TransformerLM``, ``EncoderDecoder`` and ``count_params``.
"""

# ruff: noqa: E402  (the imports below come after the thread policy is set, before torch loads)
from __future__ import annotations

import os as _os
import signal as _signal
import sys as _sys
from pathlib import Path


def _interrupted_while_starting(signum: int, frame: object) -> None:
    """Ctrl-C while the ``glassformer`` command is still importing (torch takes seconds): one line, exit 130."""
    _sys.stderr.write("glassformer: interrupted\n")
    _os._exit(130)


if _sys.argv and _os.path.basename(_sys.argv[0]) in ("glassformer", "-m"):  # the command, python -m glassformer
    try:  # the command only (cli.main puts Python's own handler back); never a library's importer
        if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
            _signal.signal(_signal.SIGINT, _interrupted_while_starting)
    except ValueError:  # not the main thread
        pass

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
