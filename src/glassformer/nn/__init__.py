"""Building blocks, one concept per module: the model's math alone. Imports only ``config`` and ``errors``."""

from .attention import AttentionInputs, MultiHeadAttention, scaled_dot_product_attention
from .block import TransformerBlock
from .feedforward import FeedForward
from .kv_cache import KVCache, LayerCache
from .masks import causal_mask, padding_mask, prefix_mask
from .norms import RMSNorm
from .positions import LearnedPositions, alibi_bias, alibi_slopes, apply_rope, rope_angles, sinusoidal_positions

__all__ = [
    "scaled_dot_product_attention", "AttentionInputs", "MultiHeadAttention", "TransformerBlock", "FeedForward",
    "KVCache", "LayerCache", "causal_mask", "padding_mask", "prefix_mask", "RMSNorm", "LearnedPositions",
    "alibi_bias", "alibi_slopes", "apply_rope", "rope_angles", "sinusoidal_positions",
]
