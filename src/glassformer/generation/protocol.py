"""What a model must offer to be generated from: the whole interface generation/ drives.

generation/ never reaches into a model's attributes; it calls only the methods below. Any
``torch.nn.Module`` that has them can be generated from (glassformer's ``TransformerLM`` and
``EncoderDecoder`` have them, and so does every model built by ``glassformer.interop``). The
protocols are ``runtime_checkable``: ``isinstance(model, DecoderOnly)`` checks that the names exist
(not their signatures).

Every model also needs the ``torch.nn.Module`` basics generation uses: ``training``, ``train()``,
``eval()`` and ``parameters()`` (the first parameter's device is where inputs are put), and a
``config`` with ``arch`` ("lm" | "encoder-decoder"), ``attn`` ("causal" | "prefix" |
"bidirectional"), ``vocab_size`` and ``max_len`` (the context window).

Caches are whatever ``new_cache`` returns, passed back unchanged; generation only reads a cache's
``length`` (positions filled) and calls its ``reorder(rows)`` (beam search), as
:class:`glassformer.nn.kv_cache.KVCache` offers.
"""

from __future__ import annotations

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
        ...

    def train(self, mode: bool = True) -> Any:
        """Set training mode (generation restores the caller's mode afterwards)."""
        ...

    def eval(self) -> Any:
        """Set eval mode (no dropout) while generating."""
        ...


@runtime_checkable
class DecoderOnly(Model, Protocol):
    """A decoder-only language model (``config.arch == "lm"``, attn "causal" or "prefix").

    Generation runs ``hidden_states`` on the new tokens with a cache, then ``logits`` on the last
    position's state.
    """

    def new_cache(self, batch: int, max_len: int | None = None, *, preallocate: bool = False) -> list[KVCache]:
        """Empty caches, one per layer, for ``batch`` rows and up to ``max_len`` positions (all allocated
        at once with ``preallocate``)."""
        ...

    def hidden_states(self, ids: torch.Tensor, pad: torch.Tensor | None = None,
                      prefix_len: int | torch.Tensor | None = None, *, positions: torch.Tensor | None = None,
                      cache: list[KVCache] | None = None) -> Any:
        """ids (B, T) -> last-layer states (B, T, d).

        ``pad`` (B, cached + T) bool, True = padding; ``prefix_len`` (B,) for attn="prefix";
        ``positions`` (B, T) of the new tokens; ``cache`` filled as a side effect.
        """
        ...

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """States (B, T, d) -> vocabulary scores (B, T, V)."""
        ...


@runtime_checkable
class EncoderDecoderModel(Model, Protocol):
    """An encoder-decoder (``config.arch == "encoder-decoder"``): the source is encoded once, the
    decoder runs one token per step against that memory."""

    def encode(self, src: torch.Tensor, src_pad: torch.Tensor | None = None) -> torch.Tensor:
        """src (B, S) ids, src_pad (B, S) bool -> memory (B, S, d)."""
        ...

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor | None, src_pad: torch.Tensor | None = None, *,
               cache: list[LayerCache] | None = None) -> torch.Tensor:
        """tgt_in (B, T) -> logits (B, T, V). ``memory`` (B, S, d) may be None once ``cache``'s
        cross-attention part is filled; ``cache`` per layer a :class:`LayerCache`."""
        ...

    def new_cache(self, batch: int, max_len: int | None = None, src_len: int | None = None, *,
                  preallocate: bool = False) -> list[LayerCache]:
        """Empty caches per decoder layer (self- and cross-attention): ``max_len`` target, ``src_len``
        source positions."""
        ...


@runtime_checkable
class Encoder(Model, Protocol):
    """An encoder-only model (``config.attn == "bidirectional"``): fill_mask calls it, sentence
    embeddings pool its ``hidden_states``."""

    def __call__(self, ids: torch.Tensor, pad: torch.Tensor | None = None) -> Any:
        """ids (B, T), pad (B, T) bool -> logits (B, T, V)."""
        ...

    def hidden_states(self, ids: torch.Tensor, pad: torch.Tensor | None = None) -> Any:
        """ids (B, T), pad (B, T) bool -> last-layer states (B, T, d)."""
        ...


Generative = DecoderOnly | EncoderDecoderModel
"""A model :func:`glassformer.generation.generate` continues (decoder-only) or translates with
(encoder-decoder)."""


def check_generative(model: Any) -> Generative:
    """``model`` if it offers :class:`DecoderOnly` or :class:`EncoderDecoderModel`, else a TypeError
    naming what is missing."""
    if isinstance(model, (DecoderOnly, EncoderDecoderModel)):
        return model
    arch = getattr(getattr(model, "config", None), "arch", None)
    wanted = EncoderDecoderModel if arch == "encoder-decoder" else DecoderOnly
    missing = [name for name in _members(wanted) if not hasattr(model, name)]
    raise ArgumentTypeError(f"model must be a glassformer TransformerLM or EncoderDecoder (or offer "
                            f"glassformer.generation.protocol.{wanted.__name__}); {type(model).__name__} lacks "
                            f"{', '.join(missing)}")


def _members(protocol: type) -> list[str]:
    """The public names a protocol (and the protocols it extends) declares."""
    names: dict[str, None] = {}
    for cls in reversed(protocol.__mro__):
        for name in (*vars(cls).get("__annotations__", {}), *vars(cls)):
            if not name.startswith("_"):
                names[name] = None
    return list(names)
