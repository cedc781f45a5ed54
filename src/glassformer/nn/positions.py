"""Position information. Attention is blind to order (permuting the inputs permutes the outputs), so:

- sinusoidal (Vaswani et al. 2017) and learned (GPT-2, BERT) vectors added to the token embeddings;
- RoPE (Su et al. 2021): rotate q and k by an angle proportional to the position, so that q·k depends
  only on the relative offset (Llama);
- ALiBi (Press et al. 2022): add ``-slope_h * |i - j|`` to the attention scores (BLOOM)."""

import math

import torch
from torch import nn

from ..errors import GlassformerError


def sinusoidal_positions(T: int, d_model: int) -> torch.Tensor:
    """The original Transformer's fixed position encodings, (T, d_model) float32 (d_model even).

    ``PE[p, 2i] = sin(p / 10000^(2i/d))`` and ``PE[p, 2i+1] = cos(p / 10000^(2i/d))``: each pair of
    dimensions is a clock hand turning at its own speed, and ``PE[p + k]`` is a rotation of ``PE[p]``
    that depends only on k."""
    pos = torch.arange(T, dtype=torch.float32)[:, None]  # (T, 1)
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)  # (d/2,)
    pe = torch.zeros(T, d_model)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)
    return pe


class LearnedPositions(nn.Module):
    """A trainable vector per position (GPT-2, BERT); positions beyond ``max_len`` do not exist."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.max_len = max_len
        self.weight = nn.Parameter(torch.empty(max_len, d_model))  # (max_len, d)
        nn.init.normal_(self.weight, std=0.02)

    def check_length(self, end: int) -> None:
        """A sequence reaching position ``end`` - 1 must fit in the table (``end <= max_len``)."""
        if end > self.max_len:
            raise GlassformerError(f"sequence of {end} positions is longer than max_len={self.max_len} "
                                   "(learned positions exist only up to max_len)")

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """positions: (T,) or (B, T) integer tensor -> (T, d) or (B, T, d)."""
        return self.weight[positions]


def rope_angles(positions: torch.Tensor, head_dim: int, theta: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosines and sines of the RoPE rotation angles ``p * theta^(-2i/hd)`` for positions (T,) or (B, T).

    Returns (cos, sin), each (..., T, head_dim) float32, laid out as two halves (Hugging Face's
    "rotate_half" convention), ready for :func:`apply_rope`."""
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim)
    angles = positions.to(torch.float32)[..., None] * inv_freq  # (..., T, hd/2)
    angles = torch.cat([angles, angles], dim=-1)  # (..., T, hd)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x[i], x[i + hd/2]) of queries or keys x (B, h, T, hd) by its angle;
    cos, sin: (T, hd) or (B, T, hd) from :func:`rope_angles`."""
    if cos.dim() == 3:  # per-row positions: (B, T, hd) -> (B, 1, T, hd) to broadcast over heads
        cos, sin = cos[:, None], sin[:, None]
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x * cos + rotated * sin).to(x.dtype)


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi's (n_heads,) per-head slopes: a geometric sequence starting at ``2^(-8/n)``. For a head
    count that is not a power of two, the paper's rule: the slopes of the nearest lower power of two,
    then every other slope of the next power of two."""
    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_heads).is_integer():
        slopes = power_of_two(n_heads)
    else:
        lower = 2 ** math.floor(math.log2(n_heads))
        slopes = power_of_two(lower) + power_of_two(2 * lower)[0::2][: n_heads - lower]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(slopes: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """ALiBi's additive attention bias ``-slope_h * |i - j|``: (h, Tq, Tk) or (B, h, Tq, Tk) float32
    from slopes (h,) and positions q_pos (Tq,) or (B, Tq), k_pos (Tk,) or (B, Tk). The symmetric
    distance serves causal models (where it equals the paper's ``j - i``) and bidirectional ones."""
    distance = (q_pos[..., :, None] - k_pos[..., None, :]).abs().to(torch.float32)  # (..., Tq, Tk)
    return -slopes.to(distance.device)[:, None, None] * distance.unsqueeze(-3)
