"""Hook points: ``x = self.tap("q", x)`` marks a place in a forward where a tensor may be read or replaced.

The models call ``tap`` at every intermediate an interpretability reader asks about (queries, attention
pattern, each sub-layer's output, the residual stream between sub-layers...). Nothing is attached by
default, and then a tap returns its tensor after one attribute test: no copy, no slower kernel.
:mod:`glassformer.interpret` attaches functions under TransformerLens's names (``blocks.0.attn.hook_q``)
and builds ``run_with_cache``, ``run_with_hooks``, patching and ablation on them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


class Tapped(nn.Module):
    """An ``nn.Module`` whose forward has named hook points (taps).

    ``taps`` is None (nothing attached, the default) or {tap name: function}; the function gets the
    tensor and returns the tensor the forward goes on with (itself, or a replacement of the same shape).
    Only :mod:`glassformer.interpret` sets it.
    """

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
        attribute is true): then the tensor must be on the path autograd takes."""
        return self.taps is not None and any(getattr(self.taps.get(name), "backward", False) for name in names)
