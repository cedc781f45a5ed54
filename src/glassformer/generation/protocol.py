"""What a model must offer to be generated from: the whole interface generation/ drives.

Any ``torch.nn.Module`` with these methods and a ``config`` (``arch``, ``attn``, ``vocab_size``,
``max_len``) can be generated from. A cache is whatever ``new_cache`` returns; generation only reads its
``length`` and calls ``reorder(rows)`` (beam search)."""

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import torch

from ..config import ModelConfig
from ..errors import ArgumentTypeError
from ..nn.kv_cache import KVCache, LayerCache


@runtime_checkable
class Model(Protocol):
    """The ``nn.Module`` basics every generated-from model has, and its ``config``."""

    config: ModelConfig
    training: bool

    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]:
        """The weights; the first one's device is where generation puts its inputs."""

    def train(self, mode: bool = True) -> Any:
        """Set training mode (generation restores the caller's mode afterwards)."""

    def eval(self) -> Any:
        """Set eval mode (no dropout) while generating."""


@runtime_checkable
class DecoderOnly(Model, Protocol):
    """A decoder-only language model (``config.arch == "lm"``, attn "causal" or "prefix"): generation
    runs ``hidden_states`` on the new tokens with a cache, then ``logits`` on the last state."""

    def new_cache(self, batch: int, max_len: int | None = None, *, preallocate: bool = False) -> list[KVCache]:
        """Empty caches, one per layer, for ``batch`` rows and up to ``max_len`` positions."""

    def hidden_states(self, ids: torch.Tensor, pad: torch.Tensor | None = None,
                      prefix_len: int | torch.Tensor | None = None, *, positions: torch.Tensor | None = None,
                      cache: list[KVCache] | None = None) -> Any:
        """ids (B, T) -> last-layer states (B, T, d); ``pad`` (B, cached + T), ``positions`` (B, T)."""

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """States (B, T, d) -> vocabulary scores (B, T, V)."""


@runtime_checkable
class EncoderDecoderModel(Model, Protocol):
    """An encoder-decoder (``config.arch == "encoder-decoder"``): the source is encoded once, the
    decoder runs one token per step against that memory."""

    def encode(self, src: torch.Tensor, src_pad: torch.Tensor | None = None) -> torch.Tensor:
        """src (B, S) ids, src_pad (B, S) bool -> memory (B, S, d)."""

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor | None, src_pad: torch.Tensor | None = None, *,
               cache: list[LayerCache] | None = None) -> torch.Tensor:
        """tgt_in (B, T) -> logits (B, T, V); ``memory`` may be None once the cross-attention cache is filled."""

    def new_cache(self, batch: int, max_len: int | None = None, src_len: int | None = None, *,
                  preallocate: bool = False) -> list[LayerCache]:
        """Empty caches per decoder layer: ``max_len`` target, ``src_len`` source positions."""


@runtime_checkable
class Encoder(Model, Protocol):
    """An encoder-only model (``config.attn == "bidirectional"``), for fill_mask and sentence embeddings."""

    def __call__(self, ids: torch.Tensor, pad: torch.Tensor | None = None) -> Any:
        """ids (B, T), pad (B, T) bool -> logits (B, T, V)."""

    def hidden_states(self, ids: torch.Tensor, pad: torch.Tensor | None = None) -> Any:
        """ids (B, T), pad (B, T) bool -> last-layer states (B, T, d)."""


Generative = DecoderOnly | EncoderDecoderModel
"""A model :func:`glassformer.generation.generate` continues (decoder-only) or translates with."""


def check_generative(model: Any) -> Generative:
    """``model`` if it offers :class:`DecoderOnly` or :class:`EncoderDecoderModel`, else a TypeError
    naming what is missing."""
    if isinstance(model, (DecoderOnly, EncoderDecoderModel)):
        return model
    arch = getattr(getattr(model, "config", None), "arch", None)
    wanted = EncoderDecoderModel if arch == "encoder-decoder" else DecoderOnly
    members = dict.fromkeys(name for cls in reversed(wanted.__mro__)
                            for name in (*vars(cls).get("__annotations__", {}), *vars(cls)) if not name.startswith("_"))
    missing = [name for name in members if not hasattr(model, name)]
    raise ArgumentTypeError(f"model must be a glassformer TransformerLM or EncoderDecoder (or offer "
                            f"glassformer.generation.protocol.{wanted.__name__}); {type(model).__name__} lacks "
                            f"{', '.join(missing)}")
