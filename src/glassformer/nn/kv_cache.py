"""A preallocated key/value cache for one attention layer (used by generation)."""

from __future__ import annotations

import torch

from ..errors import GlassformerError


class KVCache:
    """Keys and values of the positions seen so far, in buffers allocated once.

    Decoding one token at a time only needs the new token's query; its keys and values are written
    into the next free slots (no per-step concatenation) and attention reads the filled part.

    Args:
        batch: rows B.
        n_kv_heads: key/value heads.
        max_len: capacity in positions.
        head_dim: width of one head.
        dtype, device: of the buffers.
        static: True for cross-attention (filled once from the encoder output, then only read).
    """

    def __init__(self, batch: int, n_kv_heads: int, max_len: int, head_dim: int, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
                 static: bool = False):
        self.k = torch.zeros(batch, n_kv_heads, max_len, head_dim, dtype=dtype, device=device)  # (B, kv, max_len, hd)
        self.v = torch.zeros_like(self.k)  # (B, kv, max_len, hd)
        self.length = 0
        self.static = static

    @property
    def capacity(self) -> int:
        """How many positions the buffers hold."""
        return self.k.shape[2]

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append (B, kv, T, hd) keys/values; return all filled keys/values (B, kv, length, hd)."""
        T = k.shape[2]
        if self.length + T > self.capacity:
            raise GlassformerError(f"KV cache holds {self.capacity} positions; cannot add {T} to {self.length}")
        self.k[:, :, self.length:self.length + T] = k
        self.v[:, :, self.length:self.length + T] = v
        self.length += T
        return self.keys(), self.values()

    def keys(self) -> torch.Tensor:
        """The filled keys, (B, kv, length, hd) (a view of the buffer)."""
        return self.k[:, :, :self.length]

    def values(self) -> torch.Tensor:
        """The filled values, (B, kv, length, hd) (a view of the buffer)."""
        return self.v[:, :, :self.length]

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows ``index`` (B',) of the batch, e.g. the surviving beams in beam search: buffers become (B', ...)."""
        self.k = self.k.index_select(0, index)
        self.v = self.v.index_select(0, index)
