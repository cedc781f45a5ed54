"""The two verbs, ``run_with_hooks`` and ``run_with_cache``, and what they are made of: ``hooks`` (attach
functions to hook points for any call: a forward, a training step, a whole generation) and ``record``
(keep every tensor some points produce).

A hook function is called as ``fn(tensor, hook)`` (``hook`` is the :class:`HookPoint`: ``hook.name``,
``hook.layer``) and returns None (keep the tensor, possibly changed in place) or a tensor of the same
shape that the forward goes on with, as in TransformerLens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from ..errors import ArgumentTypeError, GlassformerError
from .points import STACKS, HookPoint, NameSpec, act_name, hook_points, resolve

HookFn = Callable[[torch.Tensor, HookPoint], "torch.Tensor | None"]
HookList = Iterable[tuple[NameSpec, HookFn]] | Mapping[str, HookFn]


class _Attached:
    """What one tap runs while hooks are attached to it: each hook function, in the order attached."""

    def __init__(self, point: HookPoint):
        self.point = point
        self.fns: list[HookFn] = []

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        point = self.point
        for fn in self.fns:
            shown = point.show(x)
            out = fn(shown, point)
            if out is None:
                continue
            if not isinstance(out, torch.Tensor) or out.shape != shown.shape:
                got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                raise GlassformerError(f"the hook on {point.name} returned {got}; it must return None or a "
                                       f"tensor of the shape it was given, {tuple(shown.shape)}")
            x = point.unshow(out, x)
        return x


class Hooks:
    """Hook functions attached to a model's hook points until :meth:`remove` (or the end of a ``with``).

    Made by :func:`hooks`; see there.
    """

    def __init__(self, model: nn.Module, pairs: HookList):
        self.model = model
        self.points = hook_points(model)
        self._attached: list[tuple[HookPoint, HookFn]] = []
        items = pairs.items() if isinstance(pairs, Mapping) else pairs
        try:
            for pair in items:
                if not isinstance(pair, tuple) or len(pair) != 2:
                    raise ArgumentTypeError(f"hooks must be (name or filter, function) pairs, got {pair!r}")
                names, fn = pair
                if not callable(fn):
                    raise ArgumentTypeError(f"the hook for {names!r} must be a function (tensor, hook) -> "
                                            f"tensor or None, got {type(fn).__name__}")
                for point in resolve(self.points, names):
                    self._attach(point, fn)
        except BaseException:
            self.remove()
            raise

    def _attach(self, point: HookPoint, fn: HookFn) -> None:
        module = point.module
        if module.taps is None:
            module.taps = {}
        if point.tap not in module.taps:
            module.taps[point.tap] = _Attached(point)
        module.taps[point.tap].fns.append(fn)
        self._attached.append((point, fn))

    def remove(self) -> None:
        """Detach every function this object attached (others' hooks stay); idempotent."""
        for point, fn in reversed(self._attached):
            module = point.module
            attached = module.taps[point.tap]
            attached.fns.remove(fn)
            if not attached.fns:
                del module.taps[point.tap]
            if not module.taps:
                module.taps = None  # nothing attached: every tap is one attribute test again
        self._attached = []

    def __enter__(self) -> Hooks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def hooks(model: nn.Module, pairs: HookList) -> Hooks:
    """Attach hook functions to ``model`` now; detach them at the end of a ``with`` block or on ``.remove()``.

    Any call made meanwhile fires them: a forward, a backward pass's forward, a training step, or
    ``glassformer.generation.generate`` (with a KV cache each step runs the new position only, so a
    hook sees (B, 1, ...) per step after the prompt's (B, T, ...)).

    Args:
        model: a TransformerLM or EncoderDecoder.
        pairs: [(names, fn), ...] or {name: fn}; ``names`` as :func:`~glassformer.interpret.points.resolve`
            takes them (a full name, a short name for every layer, a list, or a filter function);
            ``fn(tensor, hook) -> tensor | None``.
    Returns:
        A :class:`Hooks` (a context manager). A hook on "attn_scores" or "pattern" moves that layer
        (only) from the fused attention kernel to the explicit softmax while attached.
    """
    return Hooks(model, pairs)


def run_with_hooks(model: nn.Module, *inputs: Any, hooks: HookList = (), **kwargs: Any) -> Any:
    """``model(*inputs, **kwargs)`` with ``hooks`` attached for this one call (see :func:`hooks`)."""
    with Hooks(model, hooks):
        return model(*inputs, **kwargs)


class Recording(Mapping[str, list[torch.Tensor]]):
    """Every tensor some hook points produced while recording: name -> one tensor per call, in order.

    Made by :func:`record`; a context manager that stops recording at its end (or on :meth:`remove`).
    """

    def __init__(self, model: nn.Module, names: NameSpec = None, detach: bool = True):
        self.tensors: dict[str, list[torch.Tensor]] = {}
        self.detach = detach
        self._hooks = Hooks(model, [(names, self._keep)])
        self.points = {p.name: p for p, _ in self._hooks._attached}  # the recorded ones
        self.all_points = self._hooks.points

    def _keep(self, x: torch.Tensor, hook: HookPoint) -> None:
        self.tensors.setdefault(hook.name, []).append(x.detach() if self.detach else x)

    def __getitem__(self, name: str) -> list[torch.Tensor]:
        if name not in self.points:
            raise KeyError(f"{name!r} was not recorded; recorded points: {', '.join(self.points)}")
        return self.tensors.get(name, [])

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    def cat(self, name: str) -> torch.Tensor:
        """The calls' tensors of ``name`` joined along the (query) positions: what one forward over the
        whole sequence gives. Attention scores and patterns grow a key per step; shorter rows are
        filled as the causal mask fills them (-inf scores, 0 weights)."""
        parts, point = self[name], self.points[name]
        if not parts:
            raise GlassformerError(f"{name} never fired while recording")
        if point.kind in ("attn_scores", "pattern"):
            keys = max(p.shape[-1] for p in parts)
            fill = float("-inf") if point.kind == "attn_scores" else 0.0
            parts = [torch.nn.functional.pad(p, (0, keys - p.shape[-1]), value=fill) for p in parts]
        return torch.cat(parts, dim=point.position_axis)

    def remove(self) -> None:
        """Stop recording (what was recorded stays)."""
        self._hooks.remove()

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def record(model: nn.Module, names: NameSpec = None, *, detach: bool = True) -> Recording:
    """Start keeping what the hook points ``names`` produce, call after call, until the ``with`` ends.

    ``with record(model, "resid_post") as rec: generate(model, ids, 8)`` gives ``rec[name]``: the
    prompt's (B, T, d), then one (B, 1, d) per KV-cached step; ``rec.cat(name)`` joins them.

    Args:
        model: a TransformerLM or EncoderDecoder.
        names: what to keep (as :func:`run_with_cache` takes it); None: every point.
        detach: keep detached tensors (no autograd graph).
    """
    return Recording(model, names, detach)


class ActivationCache(Mapping[str, torch.Tensor]):
    """The tensors of one forward, by hook name: ``cache["blocks.0.attn.hook_pattern"]``.

    Also ``cache["pattern", 0]`` (short name, layer) and ``cache["pattern", 0, "decoder"]`` (and stack,
    for an EncoderDecoder), as TransformerLens's cache takes them; :meth:`stack` stacks one kind over layers.
    """

    def __init__(self, tensors: dict[str, torch.Tensor], points: dict[str, HookPoint]):
        self.tensors = tensors
        self.points = points

    def name_of(self, key: str | tuple) -> str:
        """The full name ``key`` stands for: a name, or (short, layer) / (short, layer, stack)."""
        if isinstance(key, str):
            return key
        if not isinstance(key, tuple) or not 1 <= len(key) <= 3:
            raise ArgumentTypeError(f"cache keys are names or (short, layer[, stack]) tuples, got {key!r}")
        short, layer, stack = (*key, None, None)[:3]
        if stack is not None or layer is None:
            return act_name(short, layer, stack or "blocks")
        stacks = sorted({p.stack for p in self.points.values() if p.short == short and p.layer == layer})
        if len(stacks) > 1:
            raise GlassformerError(f"{key!r} is in {' and '.join(map(str, stacks))}: add the stack, e.g. "
                                   f"cache[{short!r}, {layer}, 'decoder']")
        return act_name(short, layer, stacks[0] if stacks else "blocks")

    def __getitem__(self, key: str | tuple) -> torch.Tensor:
        name = self.name_of(key)
        if name not in self.tensors:
            hint = ("it is not a hook point of this model" if name not in self.points
                    else "it was not cached (pass it in names=)")
            raise KeyError(f"{name!r}: {hint}")
        return self.tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    def __repr__(self) -> str:
        return f"ActivationCache({len(self)} tensors: {', '.join(list(self.tensors)[:4])}{', ...' * (len(self) > 4)})"

    def stack(self, short: str, stack: str | None = None) -> torch.Tensor:
        """One kind of tensor from every layer of a stack, stacked: (L, ...); e.g. ``stack("pattern")``."""
        stack = STACKS.get(stack, stack) if stack else None
        names = [n for n, p in self.points.items() if p.short == short and p.layer is not None
                 and (stack is None or p.stack == stack) and n in self.tensors]
        if len({self.points[n].stack for n in names}) > 1:
            raise GlassformerError(f"{short!r} is cached in several stacks: pass stack='encoder' or 'decoder'")
        if not names:
            raise KeyError(f"no {short!r} tensors in this cache")
        return torch.stack([self.tensors[n] for n in names])


def run_with_cache(model: nn.Module, *inputs: Any, names: NameSpec = None, **kwargs: Any,
                   ) -> tuple[Any, ActivationCache]:
    """Run ``model(*inputs, **kwargs)`` once and keep the activations of the hook points ``names``.

    Args:
        model: a TransformerLM (``ids``, and ``pad``, ``prefix_len``, ``cache``... as its forward takes
            them) or an EncoderDecoder (``src, tgt_in``, ...).
        names: None (every point); a full name; a short name for every layer ("pattern"); a list of
            those; or a filter function name -> bool. Caching "pattern"/"attn_scores" puts those layers
            (only) on the explicit attention path; everything else stays on the fused kernel.
    Returns:
        (the model's output, :class:`ActivationCache` of detached tensors in TransformerLens's layouts).
    """
    with Recording(model, names) as rec:
        out = model(*inputs, **kwargs)
    return out, ActivationCache({name: parts[-1] for name, parts in rec.tensors.items()}, rec.all_points)
