"""Hook points: ``x = self.tap("q", x)`` marks a place in a forward where a tensor may be read or replaced.

Nothing is attached by default, and then a tap returns its tensor after one attribute test.
:mod:`glassformer.interpret` attaches functions under TransformerLens's names (``blocks.0.attn.hook_q``)."""

from collections.abc import Callable

import torch
from torch import nn


class Tapped(nn.Module):
    """An ``nn.Module`` whose forward has named hook points (taps).

    ``taps`` is None (the default) or {tap name: function}; the function gets the tensor and returns
    the one the forward goes on with (itself, or a replacement of the same shape)."""

    taps: dict[str, Callable[[torch.Tensor], torch.Tensor]] | None = None

    def tap(self, name: str, x: torch.Tensor) -> torch.Tensor:
        """``x`` itself, or what the function attached under ``name`` returns for it."""
        if self.taps is None or name not in self.taps:
            return x
        return self.taps[name](x)

    def tapped(self, *names: str) -> bool:
        """Whether a function is attached under any of ``names``."""
        return self.taps is not None and any(name in self.taps for name in names)

    def tapped_backward(self, *names: str) -> bool:
        """Whether a function attached under any of ``names`` wants that tensor's gradient (its ``backward``
        attribute is true)."""
        return self.taps is not None and any(getattr(self.taps.get(name), "backward", False) for name in names)
