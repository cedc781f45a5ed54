"""A linear layer whose product its caller may choose: torch's ``nn.Linear`` with one attribute more."""

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

Product = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters, same numbers): y = x Wᵀ + b, x (..., in) -> (..., out).

    ``product`` is None (``F.linear``) or a function (x, weight, bias) -> the same product computed another
    way, set by a caller that asks for it: generation sets a few-row product while it decodes (a faster
    route for one-token steps, measured per machine, kept outside nn/) and removes it after."""

    product: Product | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in) -> (..., out)."""
        if self.product is None:
            return F.linear(x, self.weight, self.bias)
        return self.product(x, self.weight, self.bias)
