"""The position-wise feed-forward network: attention moves information, this transforms it."""

import torch
import torch.nn.functional as F

from ..config import ACTIVATIONS
from ..validate import check_choice
from .linear import Linear
from .taps import Tap, Tapped


def activate(name: str, x: torch.Tensor) -> torch.Tensor:
    """Apply the non-linearity ``name``; a gated name ("swiglu", "geglu") gives its gate's function."""
    if name == "relu":
        return F.relu(x)
    if name in ("gelu", "geglu"):
        return F.gelu(x)
    if name == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    if name in ("silu", "swiglu"):
        return F.silu(x)
    check_choice("activation", name, ACTIVATIONS)  # an unknown name stops here; a known one returned above
    raise AssertionError(f"activation {name!r} is in config.ACTIVATIONS but not implemented here")


class FeedForward(Tapped):
    """Two linear maps with a non-linearity between: d -> d_ff -> d, applied to each position alone.

    The original Transformer uses ReLU with d_ff = 4d, GPT-2 GELU (tanh approximation), BERT exact
    GELU, and Llama SwiGLU (Shazeer 2020): ``down(silu(gate(x)) * up(x))``, with a third matrix.
    Hook points: ``hook_pre`` (..., d_ff) before the activation (the gate's, when gated), ``hook_pre_linear``
    (gated only: ``up(x)``), ``hook_post`` (..., d_ff) what ``down`` reads."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "gelu", bias: bool = True):
        super().__init__()
        self.activation = check_choice("activation", activation, ACTIVATIONS)
        self.gated = activation in ("swiglu", "geglu")
        self.up = Linear(d_model, d_ff, bias=bias)
        self.gate = Linear(d_model, d_ff, bias=bias) if self.gated else None
        self.down = Linear(d_ff, d_model, bias=bias)
        self.hook_pre = Tap()
        if self.gated:
            self.hook_pre_linear = Tap()
        self.hook_post = Tap()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d) -> (..., d)."""
        if self.gate is not None:
            hidden = activate(self.activation, self.hook_pre(self.gate(x))) * self.hook_pre_linear(self.up(x))
        else:
            hidden = activate(self.activation, self.hook_pre(self.up(x)))  # (..., d_ff)
        return self.down(self.hook_post(hidden))  # (..., d)
