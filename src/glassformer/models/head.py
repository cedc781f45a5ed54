"""The output layer: hidden states -> a score for every vocabulary entry."""

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from ..nn.linear import Product


class OutputHead(nn.Module):
    """``logits = h Wᵀ + b``, for both models.

    W is the token embedding matrix when ``config.tie`` (Press & Wolf 2017), else a (V, d) ``weight``
    of its own (initialised as ``nn.Linear`` does); b is ``bias`` (V,) when ``config.head_bias``
    (BERT's MLM decoder, BART's final_logits_bias), zero at the start when tied. ``product``: as
    :class:`glassformer.nn.linear.Linear`'s, chosen by a caller (None: ``F.linear``)."""

    product: Product | None = None

    def __init__(self, config: ModelConfig):
        super().__init__()
        V, d = config.vocab_size, config.d_model
        if config.tie:
            weight, bias = None, (nn.Parameter(torch.zeros(V)) if config.head_bias else None)
        else:
            untied = nn.Linear(d, V, bias=config.head_bias)
            weight, bias = untied.weight, untied.bias  # (V, d), (V,) or None
        self.register_parameter("weight", weight)
        self.register_parameter("bias", bias)

    def forward(self, hidden: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
        """hidden (..., d) -> logits (..., V); ``embedding`` (V, d) is the output weight when tied."""
        weight = embedding if self.weight is None else self.weight  # (V, d)
        if self.product is None:
            return F.linear(hidden, weight, self.bias)  # (..., V)
        return self.product(hidden, weight, self.bias)
