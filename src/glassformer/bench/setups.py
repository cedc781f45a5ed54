"""What is benchmarked: the model sizes, built as a glassformer model and as Hugging Face GPT-2 alike,
and the precisions they run in.

Both sides are the GPT-2 architecture (pre-norm, learned positions, tanh GELU, d_ff = 4d, tied
output layer, init N(0, 0.02²)), random init, dropout 0. ``transformers`` is imported only here and
only when a Hugging Face contender is asked for; the library itself never needs it. nanoGPT's model
is loaded from the user's own copy (:mod:`glassformer.bench.nanogpt`).

Reduced precision is mixed precision, the way people train: float32 weights, gradients and AdamW
state; the forward pass (and the loss) under ``torch.autocast`` to bfloat16 or float16.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import nn

from ..config import ModelConfig
from ..errors import GlassformerError
from ..models import TransformerLM
from ..runtime.precision import DTYPES, autocast, bf16_hardware

T = TypeVar("T")


@dataclass(frozen=True)
class Size:
    """One benchmarked configuration: the model and the training batch it is timed with."""

    name: str
    n_layers: int
    n_heads: int
    d_model: int
    block: int  # context length T of a training batch (and max_len)
    batch: int
    vocab_size: int = 65
    bias: bool = False  # nanoGPT's default (train.py), and its shakespeare_char recipes'

    def config(self) -> ModelConfig:
        """The GPT-2-shaped ModelConfig of this size (d_ff = 4 d, learned positions, tanh GELU, no dropout)."""
        return ModelConfig(vocab_size=self.vocab_size, d_model=self.d_model, n_heads=self.n_heads,
                           n_layers=self.n_layers, d_ff=4 * self.d_model, max_len=self.block, pos="learned",
                           activation="gelu_tanh", scale_embeddings=False, bias=self.bias, dropout=0.0,
                           init_std=0.02)


SIZES = {
    # nanoGPT's CPU shakespeare_char recipe (4 layers, 4 heads, 128 wide, no biases, dropout 0);
    # block 128 and batch 16 instead of its 64 and 12.
    "small": Size("small", n_layers=4, n_heads=4, d_model=128, block=128, batch=16),
    # nanoGPT's "baby GPT" for shakespeare_char (no biases; dropout 0 when benchmarking; batch 8, not 64).
    "baby": Size("baby", n_layers=6, n_heads=6, d_model=384, block=256, batch=8),
}

# The precisions a benchmark row can run in: float32, or autocast to a 16-bit type.
PRECISIONS = DTYPES  # {"float32": torch.float32, "bfloat16": ..., "float16": ...}


def check_precisions(precisions: tuple[str, ...] | str, name: str = "precision",
                     device: torch.device | str = "cpu") -> tuple[str, ...]:
    """``precisions`` (a tuple, or one comma-separated string) without repeats, in order, when each is a
    key of ``PRECISIONS`` or "auto" (the precisions ``precision: auto`` can pick on ``device``: float32,
    and bfloat16 where the device has bfloat16 instructions); else a GlassformerError naming ``name``
    and the first bad value (or none)."""
    if isinstance(precisions, str):
        precisions = tuple(part.strip() for part in precisions.split(",") if part.strip())
    if "auto" in precisions:
        at = precisions.index("auto")
        choices = ("float32", "bfloat16") if bf16_hardware(device)[0] else ("float32",)
        precisions = (*precisions[:at], *choices, *precisions[at + 1:])
    for value in precisions:
        if value not in PRECISIONS:
            raise GlassformerError(f"{name} must be some of auto, {', '.join(PRECISIONS)} (comma-separated), "
                                   f"got {value!r}")
    if not precisions:
        raise GlassformerError(f"{name} must name at least one of {', '.join(PRECISIONS)}, got none")
    return tuple(dict.fromkeys(precisions))


def in_precision(fn: Callable[[], T], precision: str, device: torch.device | str = "cpu") -> Callable[[], T]:
    """``fn`` run under :func:`autocast` to ``precision`` (an inference contender's whole call)."""

    def run() -> T:
        with autocast(precision, device):
            return fn()

    return run


def get_size(name: str) -> Size:
    """The :class:`Size` called ``name`` in ``SIZES``; a ValueError listing them for any other name."""
    if name not in SIZES:
        raise GlassformerError(f"unknown benchmark size {name!r}; available: {sorted(SIZES)}")
    return SIZES[name]


def glass_model(size: Size, device: torch.device | str = "cpu", **changes: object) -> TransformerLM:
    """The glassformer model of ``size`` (config fields in ``changes`` overridden), seeded, float32."""
    torch.manual_seed(0)
    return TransformerLM(size.config().replace(**changes)).to(device)


def hf_model(size: Size, device: torch.device | str = "cpu") -> nn.Module:
    """Hugging Face ``GPT2LMHeadModel`` of the same size with SDPA attention (always has biases, whatever
    ``size.bias`` says: GPT2Config has no switch for them)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=size.vocab_size, n_positions=size.block, n_embd=size.d_model,
                        n_layer=size.n_layers, n_head=size.n_heads, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, bos_token_id=None, eos_token_id=None, pad_token_id=0)
    model = GPT2LMHeadModel._from_config(config, attn_implementation="sdpa")
    return model.to(device)


def train_flops_per_token(size: Size, n_params: int, context: int) -> float:
    """Forward + backward FLOPs per token, as nanoGPT and the PaLM paper count them.

    6 per parameter (2 forward, 4 backward) plus attention's scores and weighted sum,
    6 · 2 · L · T · d (counted over the full T x T square, causal or not).
    """
    return 6 * n_params + 12 * size.n_layers * context * size.d_model
