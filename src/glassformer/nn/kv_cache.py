"""Key/value caches for generation: :class:`KVCache` for one attention, :class:`LayerCache` for one block."""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..errors import GlassformerError


class KVCache:
    """Keys and values of the positions seen so far: a decoding step computes only the new token's, written
    into the next free slots. The buffers double when full, up to ``max_len``; ``reserve`` allocates
    that many positions at once (fixed addresses, as CUDA graphs need). ``static``: cross-attention's,
    filled once from the encoder output."""

    INITIAL = 64  # positions allocated before the first update asks for more

    def __init__(self, batch: int, n_kv_heads: int, max_len: int, head_dim: int, *, dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None, static: bool = False, reserve: int | None = None):
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

    def update(self, k: torch.Tensor, v: torch.Tensor,
               slot: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Append (B, kv, T, hd) keys/values; return all filled keys/values (B, kv, length, hd).

        ``slot`` (1,) (fixed shapes, a buffer allocated at full size): write the one new position there and
        return the whole buffers (B, kv, capacity, hd), ``length`` left to the caller; attention masks the
        unfilled slots."""
        if slot is not None:
            self.k.index_copy_(2, slot, k.to(self.k.dtype))  # autocast: bfloat16 -> the cache's dtype
            self.v.index_copy_(2, slot, v.to(self.v.dtype))
            return self.k, self.v
        T = k.shape[2]
        if self.length + T > self.max_len:
            raise GlassformerError(f"KV cache holds {self.max_len} positions; cannot add {T} to {self.length}")
        if self.length + T > self.capacity:  # reallocate: at least double, at most max_len
            size = min(self.max_len, max(self.length + T, 2 * self.capacity))
            room = (0, 0, 0, size - self.length)  # zero positions after the filled ones
            self.k = F.pad(self.k[:, :, :self.length], room)
            self.v = F.pad(self.v[:, :, :self.length], room)
        self.k[:, :, self.length:self.length + T] = k
        self.v[:, :, self.length:self.length + T] = v
        self.length += T
        return self.k[:, :, :self.length], self.v[:, :, :self.length]  # (B, kv, length, hd)

    def keys(self) -> torch.Tensor:
        """The filled keys, (B, kv, length, hd) (a view of the buffer)."""
        return self.k[:, :, :self.length]

    def values(self) -> torch.Tensor:
        """The filled values, (B, kv, length, hd) (a view of the buffer)."""
        return self.v[:, :, :self.length]

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows ``index`` (B',) of the batch (beam search's surviving beams)."""
        self.k = self.k.index_select(0, index)
        self.v = self.v.index_select(0, index)


@dataclass
class LayerCache:
    """The caches of one block: its self-attention's (B, kv, cached, hd) and, in an encoder-decoder's
    decoder, its cross-attention's (B, kv, S, hd), filled once from the encoder output."""

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
