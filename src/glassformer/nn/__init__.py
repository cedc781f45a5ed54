"""Building blocks, one concept per module. Imports nothing from the rest of glassformer but its error types."""

from ..runtime.linear import Linear, linear, set_batched_matvec
from .attention import MultiHeadAttention, scaled_dot_product_attention
from .block import TransformerBlock
from .feedforward import FeedForward
from .kv_cache import KVCache
from .masks import causal_mask, padding_mask, prefix_mask
from .norms import RMSNorm
from .positions import (
    LearnedPositions,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    rope_angles,
    sinusoidal_positions,
)

__all__ = [
    "scaled_dot_product_attention", "MultiHeadAttention", "TransformerBlock", "FeedForward", "KVCache",
    "Linear", "linear", "set_batched_matvec",
    "causal_mask", "padding_mask", "prefix_mask", "RMSNorm", "LearnedPositions",
    "alibi_bias", "alibi_slopes", "apply_rope", "rope_angles", "sinusoidal_positions",
]
