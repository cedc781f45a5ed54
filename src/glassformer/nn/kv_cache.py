"""Key/value caches for generation: :class:`KVCache` for one attention, :class:`LayerCache` for one block."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import GlassformerError


class KVCache:
    """Keys and values of the positions seen so far, in buffers that grow with use.

    Decoding one token at a time only needs the new token's query; its keys and values are written
    into the next free slots (no per-step concatenation) and attention reads the filled part. The
    buffers start small and double when full (a copy per doubling, so appending stays amortised
    O(1)), never beyond ``max_len``: memory follows the positions actually cached, not the limit.
    A caller that knows how many positions it will need passes ``reserve``: the buffers are then
    allocated once at that size (a static cache: fixed addresses, as CUDA graphs need).

    Args:
        batch: rows B.
        n_kv_heads: key/value heads.
        max_len: the most positions the cache will hold (an error beyond it).
        head_dim: width of one head.
        dtype, device: of the buffers.
        static: True for cross-attention (filled once from the encoder output, then only read).
        reserve: positions to allocate at once (default ``min(max_len, INITIAL)``), at most ``max_len``.
    """

    INITIAL = 64  # positions allocated before the first update asks for more

    def __init__(self, batch: int, n_kv_heads: int, max_len: int, head_dim: int, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
                 static: bool = False, reserve: int | None = None):
        self.max_len = max_len
        start = min(max_len, self.INITIAL if reserve is None else max(reserve, 1))
        self.k = torch.zeros(batch, n_kv_heads, start, head_dim, dtype=dtype, device=device)  # (B, kv, cap, hd)
        self.v = torch.zeros_like(self.k)  # (B, kv, cap, hd)
        self.length = 0
        self.static = static

    @property
    def capacity(self) -> int:
        """How many positions the buffers hold now (they grow up to ``max_len``)."""
        return self.k.shape[2]

    def _grow(self, needed: int) -> None:
        """Reallocate the buffers to hold ``needed`` positions (at least double, at most max_len)."""
        size = min(self.max_len, max(needed, 2 * self.capacity))
        B, kv, _, hd = self.k.shape
        k = self.k.new_zeros(B, kv, size, hd)
        v = self.v.new_zeros(B, kv, size, hd)
        k[:, :, :self.length] = self.k[:, :, :self.length]
        v[:, :, :self.length] = self.v[:, :, :self.length]
        self.k, self.v = k, v

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append (B, kv, T, hd) keys/values; return all filled keys/values (B, kv, length, hd)."""
        T = k.shape[2]
        if self.length + T > self.max_len:
            raise GlassformerError(f"KV cache holds {self.max_len} positions; cannot add {T} to {self.length}")
        if self.length + T > self.capacity:
            self._grow(self.length + T)
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


@dataclass
class LayerCache:
    """The caches of one block: its self-attention's and, in an encoder-decoder's decoder, its
    cross-attention's (filled once from the encoder output).

    Attributes:
        self_attn: :class:`KVCache` of the block's own keys/values (B, kv, cached, hd).
        cross_attn: :class:`KVCache` of the memory's keys/values (B, kv, S, hd), or None.
    """

    self_attn: KVCache
    cross_attn: KVCache | None = None

    @property
    def length(self) -> int:
        """Positions in the self-attention cache."""
        return self.self_attn.length

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows ``index`` (B',) of both caches (see :meth:`KVCache.reorder`)."""
        self.self_attn.reorder(index)
        if self.cross_attn is not None:
            self.cross_attn.reorder(index)
