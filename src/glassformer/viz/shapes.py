"""shape_trace: the shape of every named step of a forward pass, in the order it ran."""

import inspect
from typing import Any

import torch
from torch import nn


def _first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, (tuple, list)):
        return next((t for t in map(_first_tensor, value) if t is not None), None)
    return value if isinstance(value, torch.Tensor) else None


@torch.no_grad()
def shape_trace(model: nn.Module, *inputs: Any, depth: int = 1, **kwargs: Any) -> dict[str, list[int]]:
    """Run ``model(*inputs, **kwargs)``; returns {name: shape} in call order: the tensor inputs, each submodule
    to ``depth`` levels (1: ``blocks.0``...; 2: also ``blocks.0.ffn``...), then ``logits``."""
    params = inspect.signature(model.forward).parameters
    trace = {name: list(value.shape) for name, value in zip(params, inputs) if isinstance(value, torch.Tensor)}
    handles = []
    for name, module in model.named_modules():
        level = sum(1 for part in name.split(".") if not part.isdigit())
        if not name or level > depth or isinstance(module, (nn.ModuleList, nn.ModuleDict)):
            continue

        def hook(_module: nn.Module, _args: Any, output: Any, name: str = name) -> None:
            tensor = _first_tensor(output)
            if tensor is not None:
                key, n = name, 2
                while key in trace:  # a module called twice (e.g. a shared embedding)
                    key, n = f"{name}#{n}", n + 1
                trace[key] = list(tensor.shape)

        handles.append(module.register_forward_hook(hook))
    try:
        output = _first_tensor(model(*inputs, **kwargs))
    finally:
        for handle in handles:
            handle.remove()
    if output is not None:
        trace["logits"] = list(output.shape)
    return trace
