"""Speed policy while a model generates, applied from outside: the few-row route, and on a GPU the attention kernels.

A decoding step multiplies one row per sequence by every weight matrix; :func:`.linear.linear` may
do that faster on this CPU (measured, see :mod:`.linear`). :func:`few_row_route` makes a model's
projections use it for the length of a ``with`` block, by giving each ``nn.Linear`` (and the output
layer) an instance ``forward`` that computes the same product; on leaving, the classes' own
``forward`` is back. Parameters, state dict and hook points are untouched, and so are the results
(up to float32 rounding, and only on the rows the route takes).

On a GPU, :func:`decoding_attention` keeps ``F.scaled_dot_product_attention`` off cuDNN's backend while
generating: cuDNN builds an execution plan for every new key length, so each decoding step of a first
generation paid tens of milliseconds (an H200, torch 2.11: 128 new tokens of GPT-2 small took 7.5 s
instead of 0.8 s); flash and memory-efficient attention take any length as it comes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import partial

import torch
from torch import nn

from ..models.head import OutputHead
from .linear import MIN_WEIGHT, linear, route_pays


def _is_step(x: torch.Tensor) -> bool:
    """Whether ``x`` (B, T, d) is a decoding step's input: one new position per row."""
    return x.dim() == 3 and x.shape[1] == 1


def _routed_linear(module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``module(x)`` through :func:`.linear.linear`; at a decoding step the route does not take (too many
    rows, or measured slower here), the module gets its class's own ``forward`` back for the rest of the
    generation (every step has the same rows), so it pays no per-call check."""
    if _is_step(x) and not route_pays(x, module.weight):
        del module.forward
    return linear(x, module.weight, module.bias)


def _routed_head(head: OutputHead, hidden: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
    """``head(hidden, embedding)`` through :func:`.linear.linear` (unwrapped like :func:`_routed_linear`)."""
    weight = embedding if head.weight is None else head.weight
    if _is_step(hidden) and not route_pays(hidden, weight):
        del head.forward
    return linear(hidden, weight, head.bias)


def _may_route(weight: torch.Tensor | None) -> bool:
    """The route's fixed conditions on a weight (float32 on the CPU, big enough); the rest is checked per call."""
    return (weight is not None and weight.dim() == 2 and weight.device.type == "cpu"
            and weight.dtype == torch.float32 and weight.numel() >= MIN_WEIGHT)


def _has_compiled_methods(model: nn.Module) -> bool:
    """Whether a method of ``model`` was replaced by its ``torch.compile``'d self (``model.hidden_states =
    torch.compile(model.hidden_states)``): compiled code guards on the modules' attributes, so the
    route's instance ``forward``s would make it recompile at every generation."""
    return any(hasattr(value, "_torchdynamo_orig_callable") for value in vars(model).values())


@contextlib.contextmanager
def few_row_route(model: nn.Module) -> Iterator[None]:
    """Within the block, ``model``'s projections and output layer take the few-row route where it pays.

    Args:
        model: any module; its ``nn.Linear`` sub-modules and plain :class:`OutputHead` are routed
            (a module that already has its own instance ``forward`` is left alone; a model with a
            compiled method is not routed at all: the compiler makes its own kernels).
    """
    if _has_compiled_methods(model):
        yield
        return
    routed = []
    embedding = getattr(getattr(model, "embeddings", None), "tok", None)
    for module in model.modules():
        if "forward" in module.__dict__:
            continue
        if isinstance(module, nn.Linear) and _may_route(module.weight):
            module.forward = partial(_routed_linear, module)
        elif type(module) is OutputHead and _may_route(module.weight if module.weight is not None
                                                        else getattr(embedding, "weight", None)):
            module.forward = partial(_routed_head, module)
        else:
            continue
        routed.append(module)
    try:
        yield
    finally:
        for module in routed:
            if "forward" in module.__dict__:  # (one that did not pay has it back already)
                del module.forward


def decoding_attention(device: torch.device | str) -> contextlib.AbstractContextManager[object]:
    """A ``with`` block in which fused attention on ``device`` avoids cuDNN's backend (CUDA only).

    Args:
        device: where the model generates; on anything but CUDA nothing changes.
    Returns:
        ``torch.nn.attention.sdpa_kernel`` with flash, memory-efficient and math attention (the
        previous choice is back on leaving), or a context that does nothing.
    """
    if torch.device(device).type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])
