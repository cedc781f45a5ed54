"""The models: TransformerLM (causal / bidirectional / prefix) and EncoderDecoder."""

from __future__ import annotations

from torch import nn

from ..config import ModelConfig
from .common import count_params
from .encdec import EncoderDecoder
from .lm import TransformerLM


def build_model(config: ModelConfig) -> nn.Module:
    """The model class ``config.arch`` names, built from ``config``."""
    config.validate()
    return EncoderDecoder(config) if config.arch == "encoder-decoder" else TransformerLM(config)


__all__ = ["TransformerLM", "EncoderDecoder", "build_model", "count_params"]
