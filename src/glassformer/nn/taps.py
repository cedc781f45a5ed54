"""Hook points as modules (TransformerLens's ``HookPoint``): ``x = self.hook_q(x)`` marks a place in a forward
where a tensor may be read or replaced.

Each :class:`Tap` is an identity module in the model's tree, so its name (``blocks.0.self_attn.hook_q``) and
order come from ``named_modules()`` (modules register taps in forward order): a part that adds a tap adds it
to every tool, with no list to edit. :mod:`glassformer.interpret` attaches functions under TransformerLens's
names (``blocks.0.attn.hook_q``)."""

from collections.abc import Callable

import torch
from torch import nn


class Tap(nn.Module):
    """An identity on the forward path: ``x = self.hook_q(x)`` returns ``x``, or ``fn(x)`` while a function is
    attached (``fn``, set by :mod:`glassformer.interpret`; a replacement has ``x``'s shape).

    Declared where the tap is made: ``head_axis`` (2 for (B, T, h, hd), 1 for (B, h, Tq, Tk), None) and
    ``position_axis`` in the layout hooks see; ``heads_first``: held as (B, h, T, hd), seen as (B, T, h, hd);
    ``on_demand``: computed only while hooked, so "every point" leaves it out (asked by name). Called
    directly, not through ``nn.Module.__call__``: torch's module hooks on a tap never run."""

    fn: Callable[[torch.Tensor], torch.Tensor] | None = None

    def __init__(self, head_axis: int | None = None, *, position_axis: int = 1, heads_first: bool = False,
                 on_demand: bool = False):
        super().__init__()
        self.head_axis, self.position_axis = head_axis, position_axis
        self.heads_first, self.on_demand = heads_first, on_demand

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x itself, or what the attached function returns for it."""
        return x if self.fn is None else self.fn(x)

    __call__ = forward  # an idle tap costs one attribute test (nn.Module.__call__ costs ~10x that)

    @property
    def hooked(self) -> bool:
        """Whether a function is attached."""
        return self.fn is not None

    @property
    def wants_grad(self) -> bool:
        """Whether the attached function wants this tensor's gradient (its ``backward`` attribute is true)."""
        return bool(getattr(self.fn, "backward", False))

    def extra_repr(self) -> str:
        return "hooked" if self.hooked else ""


class Tapped(nn.Module):
    """An ``nn.Module`` whose child modules (taps and parts) are also plain attributes in its ``__dict__``, so the
    forward reads them without ``nn.Module.__getattr__`` (~0.3 µs a read; a decoding step reads ~40 per block).
    Assigning, deleting and ``add_module`` keep both in step."""

    def __setattr__(self, name: str, value: object) -> None:
        self._unalias(name)
        super().__setattr__(name, value)
        if isinstance(value, nn.Module):
            self.__dict__[name] = value

    def __delattr__(self, name: str) -> None:
        self._unalias(name)
        super().__delattr__(name)

    def add_module(self, name: str, module: nn.Module | None) -> None:
        self._unalias(name)
        super().add_module(name, module)
        if module is not None:
            self.__dict__[name] = module

    def _unalias(self, name: str) -> None:
        if isinstance(self.__dict__.get(name), nn.Module):
            del self.__dict__[name]


class NormTaps(Tapped):
    """A norm's hook points where the model applies it (TransformerLens's ``ln1.hook_scale``...): "scale"
    (..., 1) the divisor and "normalized" (..., d) the vector before gain and bias (only for a LayerNorm or
    RMSNorm, written out only while hooked), and "out" (..., d), the norm's output. The norm keeps its
    parameters where they are; ``taps(norm, x)`` applies it through these points."""

    def __init__(self, statistics: bool = True):
        super().__init__()
        self.statistics = statistics
        if statistics:
            self.hook_scale, self.hook_normalized = Tap(), Tap()
        self.hook_out = Tap()

    def forward(self, norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """``norm(x)`` (..., d) -> (..., d), through the hook points."""
        if self.statistics and (self.hook_scale.fn is not None or self.hook_normalized.fn is not None):
            return self.hook_out(norm.written_out(x, self.hook_scale, self.hook_normalized))
        return self.hook_out(norm(x))

    __call__ = forward  # as Tap: no nn.Module.__call__ on the hot path
