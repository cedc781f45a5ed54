"""Interventions: activation patching (a corrupted run with chosen activations from a clean run's cache),
head ablation (``hook_z`` set to zero or its mean), and attention weights of chosen layers only.
"""

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ArgumentTypeError, GlassformerError
from ..io.checks import check_int, is_int
from ..models import TransformerLM
from ..validate import check_choice
from .hooks import ActivationCache, HookFn, run_with_cache, run_with_hooks
from .points import HookPoint, NameSpec, act_name, hook_points, resolve

Inputs = torch.Tensor | Sequence[torch.Tensor]
Metric = Callable[[torch.Tensor], torch.Tensor | float]
HeadSpec = Sequence[tuple[int | str, int]]


def _as_tuple(inputs: Inputs) -> tuple[torch.Tensor, ...]:
    """One input tensor or a sequence of them (an EncoderDecoder's (src, tgt_in)) as a tuple."""
    return (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)


def _chosen(point: HookPoint, shape: torch.Size, positions: Any, heads: Any,
            device: torch.device) -> torch.Tensor | None:
    """A bool tensor broadcastable to ``shape``: True where ``positions`` x ``heads`` lie (None: everywhere)."""
    if positions is None and heads is None:
        return None
    where = torch.ones([1] * len(shape), dtype=torch.bool, device=device)
    tap = point.module
    for axis, picked, what in ((tap.position_axis, positions, "positions"), (tap.head_axis, heads, "heads")):
        if picked is None:
            continue
        if axis is None:
            raise GlassformerError(f"heads= applies to per-head hook points (q, k, v, z, attn_scores, pattern), "
                                   f"not {point.name}")
        line = torch.zeros(shape[axis], dtype=torch.bool, device=device)
        try:
            line[torch.as_tensor(picked, dtype=torch.long, device=device)] = True
        except IndexError as error:
            raise GlassformerError(f"{what}={picked!r} out of range for {point.name}, whose axis {axis} "
                                   f"has {shape[axis]} entries") from error
        where = where & line.view(-1, *[1] * (len(shape) - axis - 1))  # (n, 1, ...): broadcast along axis
    return where


def patch_hooks(cache: ActivationCache, names: NameSpec, *, positions: int | Sequence[int] | None = None,
                heads: int | Sequence[int] | None = None) -> list[tuple[str, HookFn]]:
    """Hooks that put the clean ``cache``'s values of the points ``names`` into a run, at only these (query)
    ``positions`` and ``heads`` (per-head points only) when given."""
    points = resolve(cache.points, names)
    missing = [p.name for p in points if p.name not in cache]
    if missing:
        raise GlassformerError(f"the clean cache lacks {', '.join(missing)}: cache them (names=...) first")

    def patch(x: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        clean = cache[hook.name].to(x.device, x.dtype)
        if clean.shape != x.shape:
            raise GlassformerError(f"{hook.name} is {tuple(clean.shape)} in the clean run but {tuple(x.shape)} "
                                   "here: patch between inputs of the same shape")
        where = _chosen(hook, x.shape, positions, heads, x.device)
        return clean.clone() if where is None else torch.where(where, clean, x)

    return [(p.name, patch) for p in points]


def run_with_patch(model: nn.Module, *inputs: torch.Tensor, cache: ActivationCache, names: NameSpec,
                   positions: int | Sequence[int] | None = None, heads: int | Sequence[int] | None = None,
                   **kwargs: Any) -> Any:
    """Run on (corrupted) ``inputs`` with the activations ``names`` from a clean ``cache`` (:func:`patch_hooks`)."""
    return run_with_hooks(model, *inputs, hooks=patch_hooks(cache, names, positions=positions, heads=heads),
                          **kwargs)


@torch.no_grad()
def patching_effects(model: nn.Module, clean: Inputs, corrupted: Inputs, metric: Metric, *,
                     what: str = "resid_pre", per: str = "position", **kwargs: Any) -> torch.Tensor:
    """Patch one activation at a time from the clean run into the corrupted one (inputs of one shape: a
    tensor or a tuple): every layer's ``what`` point, one position (or head, ``per="head"``) at a time.
    Returns (layers, positions or heads): metric(patched) - metric(corrupted), positive where the activation
    carries the clean behaviour (docs/interpret.md, "One sign")."""
    check_choice("per", per, ("position", "head"))
    clean, corrupted = _as_tuple(clean), _as_tuple(corrupted)
    _, cache = run_with_cache(model, *clean, names=what, **kwargs)
    points = resolve(cache.points, what)
    first = cache[points[0].name]
    axis = points[0].module.position_axis if per == "position" else points[0].module.head_axis
    if axis is None:
        raise GlassformerError(f"per='head' needs a per-head point (z, q, k, v, pattern...), not {what!r}")
    corrupted_metric = float(metric(model(*corrupted, **kwargs)))
    effects = torch.empty(len(points), first.shape[axis])
    for row, point in enumerate(points):
        for col in range(first.shape[axis]):
            where = {"positions": [col]} if per == "position" else {"heads": [col]}
            out = run_with_patch(model, *corrupted, cache=cache, names=point.name, **where, **kwargs)
            effects[row, col] = float(metric(out)) - corrupted_metric
    return effects


def _z_points(model: nn.Module, heads: HeadSpec) -> dict[str, list[int]]:
    """{hook_z name: [head, ...]} for (layer, head) pairs; a layer is a block index or an attention's name."""
    points = hook_points(model)
    chosen: dict[str, list[int]] = {}
    if isinstance(heads, tuple) and len(heads) == 2 and isinstance(heads[1], int):
        heads = [heads]  # one (layer, head) pair
    for pair in heads:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ArgumentTypeError(f"heads must be (layer, head) pairs, got {pair!r}")
        layer, head = pair
        if is_int(layer):
            if not isinstance(model, TransformerLM):
                raise GlassformerError("in an EncoderDecoder name the attention: ('encoder_blocks.0.attn', h), "
                                       "('decoder_blocks.0.self_attn', h) or ('decoder_blocks.0.cross_attn', h)")
            name = act_name("z", layer)
        elif isinstance(layer, str):
            name = layer if layer.endswith(".hook_z") else f"{layer}.hook_z"
        else:
            raise ArgumentTypeError(f"a head's layer must be an int or an attention's name, got {layer!r}")
        if name not in points:
            raise GlassformerError(f"no attention {name.removesuffix('.hook_z')!r} in this model")
        check_int(f"head of {name.removesuffix('.hook_z')}", head, 0, points[name].owner.n_heads - 1)
        chosen.setdefault(name, []).append(head)
    return chosen


def ablation_hooks(model: nn.Module, heads: HeadSpec, *, mode: str = "zero",
                   cache: ActivationCache | None = None) -> list[tuple[str, HookFn]]:
    """Hooks that remove the ``heads`` ((layer, head) pairs, as :func:`ablate_heads`) from a run: ``mode``
    "zero" (the head writes nothing) or "mean" (its ``hook_z`` replaced by its mean over ``cache``)."""
    check_choice("mode", mode, ("zero", "mean"))
    chosen = _z_points(model, heads)
    means: dict[str, torch.Tensor] = {}
    if mode == "mean":
        if cache is None or any(name not in cache for name in chosen):
            raise GlassformerError("mode='mean' needs a reference cache holding the heads' hook_z")
        means = {name: cache[name].float().mean(dim=(0, 1)) for name in chosen}  # (h, hd)

    def ablate(z: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        z = z.clone()  # (B, T, h, hd)
        for head in chosen[hook.name]:
            z[:, :, head] = 0.0 if mode == "zero" else means[hook.name][head].to(z.dtype)
        return z

    return [(name, ablate) for name in chosen]


def ablate_heads(model: nn.Module, *inputs: torch.Tensor, heads: HeadSpec, mode: str = "zero",
                 reference: Inputs | None = None, **kwargs: Any) -> Any:
    """``model(*inputs, **kwargs)`` without the ``heads``: (layer, head) pairs, e.g. ``[(1, 3)]`` (in an
    EncoderDecoder the layer is the attention's name, ``("decoder_blocks.0.cross_attn", 2)``). ``mode``:
    "zero" or "mean" (over ``reference``, default ``inputs``)."""
    cache = None
    if mode == "mean":
        names = list(_z_points(model, heads))
        with torch.no_grad():
            _, cache = run_with_cache(model, *(_as_tuple(reference) if reference is not None else inputs),
                                      names=names, **kwargs)
    return run_with_hooks(model, *inputs, hooks=ablation_hooks(model, heads, mode=mode, cache=cache), **kwargs)


def next_token_loss(logits: torch.Tensor, ids: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Mean cross-entropy of predicting ``ids[:, 1:]`` from ``logits[:, :-1]`` (a causal LM's loss);
    ``reduction="none"``: each one, (B, T - 1), [:, i] predicting position i + 1."""
    loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten(), reduction=reduction)
    return loss.view(ids.shape[0], -1) if reduction == "none" else loss


@torch.no_grad()
def head_ablation_effects(model: nn.Module, *inputs: torch.Tensor, metric: Metric | None = None,
                          mode: str = "zero", attention: str = "attn", **kwargs: Any) -> torch.Tensor:
    """How much ``metric`` (default: a causal LM's next-token loss) changes when each head alone is
    ablated (``mode`` "zero" or "mean"): (layers, heads), ablated - intact. ``attention``: "attn" (a
    TransformerLM), "encoder_blocks.attn", "decoder_blocks.self_attn" or "decoder_blocks.cross_attn"."""
    if metric is None:
        if not isinstance(model, TransformerLM) or model.config.attn != "causal":
            raise GlassformerError("pass metric=: the default (next-token loss) is for causal TransformerLMs")
        ids = inputs[0]

        def metric(logits: torch.Tensor) -> torch.Tensor:
            return next_token_loss(logits, ids)
    stack, _, attn = attention.rpartition(".")
    z_names = [name for name, p in hook_points(model).items() if p.short == ("cross_z" if attn == "cross_attn" else "z")
               and (not stack or p.stack == stack)]
    if not z_names:
        raise GlassformerError(f"no attention {attention!r} in this model")
    base = float(metric(model(*inputs, **kwargs)))
    cache = None
    if mode == "mean":
        _, cache = run_with_cache(model, *inputs, names=z_names, **kwargs)
    n_heads = hook_points(model)[z_names[0]].owner.n_heads
    effects = torch.empty(len(z_names), n_heads)
    for row, name in enumerate(z_names):
        for head in range(n_heads):
            hooks = ablation_hooks(model, [(name, head)], mode=mode, cache=cache)
            effects[row, head] = float(metric(run_with_hooks(model, *inputs, hooks=hooks, **kwargs))) - base
    return effects


def attention_weights(model: nn.Module, *inputs: torch.Tensor, layers: int | Sequence[int] | NameSpec = None,
                      heads: int | Sequence[int] | None = None, **kwargs: Any) -> tuple[Any, dict]:
    """(the model's output, {layer or name: (B, heads, Tq, Tk) weights}) of the ``layers`` (block indices or
    hook names; None: every self-attention) and ``heads`` (None: all) chosen; the rest keep the fused kernel."""
    ints = isinstance(layers, int) or (isinstance(layers, (list, tuple)) and layers
                                       and all(isinstance(i, int) for i in layers))
    if ints:
        keys = [layers] if isinstance(layers, int) else list(layers)
        names = [act_name("pattern", i) for i in keys]
    else:
        names = "pattern" if layers is None else layers
    out, cache = run_with_cache(model, *inputs, names=names, **kwargs)
    if not ints:
        keys = names = list(cache)
    picked = None if heads is None else torch.as_tensor([heads] if isinstance(heads, int) else list(heads))
    return out, {key: cache[name] if picked is None else cache[name][:, picked] for key, name in zip(keys, names)}
