"""What is benchmarked: the sizes, as glassformer and Hugging Face GPT-2 models alike (random init, dropout
0), and the precisions (float32, or float32 weights with the forward pass under ``torch.autocast``)."""

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


SIZES = {  # nanoGPT's shakespeare_char shapes: its CPU recipe (block 128, batch 16 here) and its "baby GPT"
    "small": Size("small", n_layers=4, n_heads=4, d_model=128, block=128, batch=16),
    "baby": Size("baby", n_layers=6, n_heads=6, d_model=384, block=256, batch=8),
}
PRECISIONS = DTYPES  # a row runs in float32, or under autocast to a 16-bit type


def check_precisions(precisions: tuple[str, ...] | str, device: torch.device | str = "cpu") -> tuple[str, ...]:
    """``precisions`` (a tuple or a comma-separated string) in order without repeats, "auto" standing for
    what ``precision: auto`` can pick on ``device`` (float32, and bfloat16 where it has bfloat16
    instructions); a GlassformerError for an unknown value or none."""
    if isinstance(precisions, str):
        precisions = tuple(part.strip() for part in precisions.split(",") if part.strip())
    if "auto" in precisions:
        at = precisions.index("auto")
        choices = ("float32", "bfloat16") if bf16_hardware(device)[0] else ("float32",)
        precisions = (*precisions[:at], *choices, *precisions[at + 1:])
    for value in precisions:
        if value not in PRECISIONS:
            raise GlassformerError(f"precision must be some of auto, {', '.join(PRECISIONS)} (comma-separated), "
                                   f"got {value!r}")
    if not precisions:
        raise GlassformerError(f"precision must name at least one of {', '.join(PRECISIONS)}, got none")
    return tuple(dict.fromkeys(precisions))


def in_precision(fn: Callable[[], T], precision: str, device: torch.device | str = "cpu") -> Callable[[], T]:
    """``fn`` run under :func:`autocast` to ``precision`` (an inference contender's whole call)."""

    def run() -> T:
        with autocast(precision, device):
            return fn()

    return run


def get_size(name: str) -> Size:
    """The :class:`Size` called ``name`` in ``SIZES``; a GlassformerError listing them for any other name."""
    if name not in SIZES:
        raise GlassformerError(f"unknown benchmark size {name!r}; available: {sorted(SIZES)}")
    return SIZES[name]


def seeded_batch(size: Size, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, targets), (batch, block) each: random ids from a generator seeded 0 (the same on every call)."""
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randint(0, size.vocab_size, (size.batch, size.block), generator=g).to(device)
                 for _ in range(2))


def glass_model(size: Size, device: torch.device | str = "cpu", **changes: object) -> TransformerLM:
    """The glassformer model of ``size`` (config fields in ``changes`` overridden), seeded, float32."""
    torch.manual_seed(0)
    return TransformerLM(size.config().replace(**changes)).to(device)


def hf_model(size: Size, device: torch.device | str = "cpu") -> nn.Module:
    """Hugging Face ``GPT2LMHeadModel`` of the same size with SDPA attention (always with biases: GPT2Config
    has no switch for them)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=size.vocab_size, n_positions=size.block, n_embd=size.d_model,
                        n_layer=size.n_layers, n_head=size.n_heads, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, bos_token_id=None, eos_token_id=None, pad_token_id=0)
    return GPT2LMHeadModel._from_config(config, attn_implementation="sdpa").to(device)


def train_flops_per_token(size: Size, n_params: int, context: int) -> float:
    """Forward + backward FLOPs per token as nanoGPT and PaLM count them: 6 per parameter plus attention's
    6 · 2 · L · T · d (over the full T x T square)."""
    return 6 * n_params + 12 * size.n_layers * context * size.d_model
