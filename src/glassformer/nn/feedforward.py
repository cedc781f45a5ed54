"""The position-wise feed-forward network: attention moves information, this transforms it."""

from functools import partial

import torch
import torch.nn.functional as F

from .linear import Linear
from .taps import Tap, Tapped

# Each of config.ACTIVATIONS and its function; a gated name ("swiglu", "geglu") maps to its gate's function.
ACTIVATION_FUNCTIONS = {"relu": F.relu, "gelu": F.gelu, "geglu": F.gelu,
                        "gelu_tanh": partial(F.gelu, approximate="tanh"), "silu": F.silu, "swiglu": F.silu}


def activate(name: str, x: torch.Tensor) -> torch.Tensor:
    """Apply the non-linearity ``name`` (one of ``config.ACTIVATIONS``, checked by the config)."""
    return ACTIVATION_FUNCTIONS[name](x)


class FeedForward(Tapped):
    """Two linear maps with a non-linearity between: d -> d_ff -> d, applied to each position alone.

    The original Transformer uses ReLU with d_ff = 4d, GPT-2 GELU (tanh approximation), BERT exact
    GELU, and Llama SwiGLU (Shazeer 2020): ``down(silu(gate(x)) * up(x))``, with a third matrix.
    Hook points: ``hook_pre`` (..., d_ff) before the activation (the gate's, when gated), ``hook_pre_linear``
    (gated only: ``up(x)``), ``hook_post`` (..., d_ff) what ``down`` reads."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "gelu", bias: bool = True):
        super().__init__()
        self.activation = activation
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
