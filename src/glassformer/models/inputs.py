"""A model's tensor inputs, checked once where they enter (the models' forward, generate, the interpret
tools): token ids, padding flags, an encoder's memory, prefix lengths. The blocks trust them."""

from __future__ import annotations

from typing import Any

import torch

from ..errors import ArgumentTypeError, GlassformerError
from ..io.checks import is_int, token_id_error


def check_token_ids(ids: Any, vocab_size: int, name: str = "ids") -> None:
    """Refuse ``ids`` unless a (B, T) long/int32 tensor of ids in [0, vocab_size), naming ``name``."""
    if not isinstance(ids, torch.Tensor):
        raise ArgumentTypeError(f"{name} must be a torch.Tensor of token ids, got {type(ids).__name__}")
    if ids.dtype not in (torch.long, torch.int32):  # what an embedding table takes
        raise ArgumentTypeError(f"{name} must be a tensor of dtype torch.long (or torch.int32), got dtype "
                                f"{ids.dtype}: convert it with ids.long()")
    if ids.dim() != 2:
        raise GlassformerError(f"{name} must have shape (B, T), got {tuple(ids.shape)}")
    if ids.numel() == 0 or torch.compiler.is_compiling():
        return
    low, high = (int(v) for v in torch.aminmax(ids))
    if low < 0 or high >= vocab_size:
        raise GlassformerError(token_id_error(low if low < 0 else high, vocab_size, name))


def check_pad(pad: torch.Tensor | None, batch: int, length: int, name: str = "pad") -> None:
    """Padding flags, when given, must be a bool tensor of shape (batch, length), True = padding."""
    if pad is None:
        return
    if not isinstance(pad, torch.Tensor) or pad.dtype != torch.bool:
        got = pad.dtype if isinstance(pad, torch.Tensor) else type(pad).__name__
        raise ArgumentTypeError(f"{name} must be a bool tensor (True = padding), got {got}")
    if tuple(pad.shape) != (batch, length):
        raise GlassformerError(f"{name} must have shape (B, T) = {(batch, length)}, got {tuple(pad.shape)}")


def check_memory(memory: torch.Tensor | None, src_pad: torch.Tensor | None, batch: int, d_model: int) -> None:
    """A decoder's memory, when given, must be (batch, S, d_model), and its padding flags (batch, S)."""
    if memory is None:
        return
    if memory.dim() != 3 or memory.shape[0] != batch or memory.shape[2] != d_model:
        raise GlassformerError(f"memory must have shape (B={batch}, S, d={d_model}), got {tuple(memory.shape)}")
    check_pad(src_pad, batch, memory.shape[1], name="src_pad")


def check_prefix_len(prefix_len: Any, length: int | torch.Tensor, batch: int | None) -> int | torch.Tensor:
    """``prefix_len`` (an int, or a (B,) integer tensor made long) when in [0, ``length``] (an int or (B,)
    lengths) and, as a tensor, of ``batch`` rows (None: a mask made for any batch, ``make_mask``)."""
    if isinstance(prefix_len, torch.Tensor):
        if prefix_len.dim() != 1 or prefix_len.dtype.is_floating_point or prefix_len.dtype.is_complex \
                or prefix_len.dtype == torch.bool:
            raise ArgumentTypeError(f"prefix_len must be an int or a (B,) integer tensor, got a {prefix_len.dtype} "
                                    f"tensor of shape {tuple(prefix_len.shape)}")
        if batch is not None and prefix_len.shape[0] != batch:
            raise GlassformerError(f"prefix_len must have one length per row: shape ({batch},), "
                                   f"got {tuple(prefix_len.shape)}")
        prefix_len = prefix_len.long()
    elif not is_int(prefix_len):
        raise ArgumentTypeError(f"prefix_len must be an int or a (B,) integer tensor, got {type(prefix_len).__name__}")
    values = torch.as_tensor(prefix_len)
    if bool((values < 0).any()) or bool((values > torch.as_tensor(length, device=values.device)).any()):
        limit = length.tolist() if isinstance(length, torch.Tensor) else length
        raise GlassformerError(f"prefix_len={values.tolist()} is out of range: "
                               f"expected 0 <= prefix_len <= sequence length {limit}")
    return prefix_len
