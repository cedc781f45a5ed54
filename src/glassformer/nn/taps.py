"""Hook points as modules (TransformerLens's ``HookPoint``): ``x = self.hook_q(x)`` marks a place in a forward
where a tensor may be read or replaced.

Each :class:`Tap` is an identity module in the model's tree, so its name (``blocks.0.self_attn.hook_q``) and
its place in the order come from ``named_modules()``: a part that adds a tap adds it to every tool, with no list
to edit. Modules register their taps in the order their forward reaches them. Nothing is attached by default,
and then a tap returns its tensor after one attribute test. :mod:`glassformer.interpret` attaches functions
under TransformerLens's names (``blocks.0.attn.hook_q``)."""

from collections.abc import Callable

import torch
from torch import nn


class Tap(nn.Module):
    """An identity on the forward path: ``x = self.hook_q(x)`` returns ``x``, or ``fn(x)`` while a function is
    attached (``fn``, set by :mod:`glassformer.interpret`; a replacement has ``x``'s shape).

    What tools need to read the tensor, declared where the tap is made: ``head_axis`` (2 for (B, T, h, hd), 1
    for (B, h, Tq, Tk), None without heads) and ``position_axis`` (the query positions) in the layout hooks
    see; ``heads_first``: the forward holds it as (B, h, T, hd) and hooks see (B, T, h, hd); ``on_demand``:
    the forward computes this tensor only while it is hooked, so "every point" leaves it out (asked by name).
    Called directly, not through ``nn.Module.__call__``: torch's module hooks registered on a tap never run
    (attach functions with ``glassformer.interpret.hooks``)."""

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
    """An ``nn.Module`` that holds taps: ``self.hook_q = Tap()`` registers the tap as a submodule (so the tree
    names it) and also keeps it as a plain attribute, so the forward reads it without ``nn.Module.__getattr__``
    (~0.3 µs a read; a decoding step reads some 30 taps per block)."""

    def __setattr__(self, name: str, value: object) -> None:
        if isinstance(self.__dict__.get(name), (Tap, NormTaps)):
            del self.__dict__[name]  # replaced: the registered value alone stays
        super().__setattr__(name, value)
        if isinstance(value, (Tap, NormTaps)):
            self.__dict__[name] = value

    def __delattr__(self, name: str) -> None:
        if isinstance(self.__dict__.get(name), (Tap, NormTaps)):
            del self.__dict__[name]
        super().__delattr__(name)


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
