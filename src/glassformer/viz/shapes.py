"""shape_trace: the shape of every named step of a forward pass, in the order it ran.

(Named ``shapes`` so that ``trace`` means one thing: the generation trace of glassformer.generation.trace.)
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn


def _first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        for item in value:
            found = _first_tensor(item)
            if found is not None:
                return found
    return None


@torch.no_grad()
def shape_trace(model: nn.Module, *inputs: Any, depth: int = 1, **kwargs: Any) -> dict[str, list[int]]:
    """Run ``model(*inputs, **kwargs)`` and record the output shape of each submodule.

    Args:
        model: any module; inputs and kwargs are passed to its forward.
        depth: how deep to look: 1 = the model's parts (``embeddings``, ``blocks.0``, ``norm_f``),
            2 also their parts (``blocks.0.self_attn``, ``blocks.0.ffn``), and so on. An item of a
            module list counts as one level with its list.
    Returns:
        {name: shape} in call order, starting with the tensor inputs (named after the forward's
        arguments, e.g. ``ids``) and ending with ``logits``.
    """
    trace: dict[str, list[int]] = {}
    params = list(inspect.signature(model.forward).parameters)
    for name, value in zip(params, inputs):
        if isinstance(value, torch.Tensor):
            trace[name] = list(value.shape)
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
