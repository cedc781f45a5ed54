"""The models: TransformerLM (causal / bidirectional / prefix) and EncoderDecoder."""

from ..config import ModelConfig
from .common import count_params
from .encdec import EncoderDecoder, EncoderDecoderOutput
from .head import OutputHead
from .legacy import upgrade_state_dict
from .lm import HiddenStates, LMOutput, TransformerLM


def build_model(config: ModelConfig) -> TransformerLM | EncoderDecoder:
    """The model class ``config.arch`` names, built from ``config``: a :class:`TransformerLM`
    ("lm") or an :class:`EncoderDecoder` ("encoder-decoder")."""
    return EncoderDecoder(config) if config.arch == "encoder-decoder" else TransformerLM(config)


__all__ = ["TransformerLM", "EncoderDecoder", "build_model", "count_params", "LMOutput", "HiddenStates",
           "EncoderDecoderOutput", "OutputHead", "upgrade_state_dict"]
