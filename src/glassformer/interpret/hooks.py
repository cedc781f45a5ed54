"""``hooks`` (attach functions to hook points for any call), ``record`` (keep what some points produce),
and the two verbs made of them, ``run_with_hooks`` and ``run_with_cache``.

A hook is called as ``fn(tensor, hook)`` (``hook``: the :class:`HookPoint`) and returns None (keep the
tensor) or a tensor of the same shape, as in TransformerLens; a backward hook as ``fn(grad, hook)``.
"""

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from ..errors import ArgumentTypeError, GlassformerError
from .cache import ActivationCache
from .points import HookPoint, NameSpec, hook_points, resolve

HookFn = Callable[[torch.Tensor, HookPoint], "torch.Tensor | None"]
HookList = Iterable[tuple[NameSpec, HookFn]] | Mapping[str, HookFn]


class _Attached:
    """What one tap runs while hooks are attached to it: the forward hooks, then the backward ones."""

    def __init__(self, point: HookPoint):
        self.point = point
        self.fns: list[tuple[HookFn, bool]] = []  # (fn, backward)

    @property
    def backward(self) -> bool:
        """Whether a backward hook is attached here (see ``Tap.wants_grad``)."""
        return any(backward for _, backward in self.fns)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = self._run([fn for fn, backward in self.fns if not backward], x, "hook")
        backward_fns = [fn for fn, backward in self.fns if backward]
        if backward_fns and x.requires_grad:
            x.register_hook(lambda grad: self._run(backward_fns, grad, "backward hook"))
        return x

    def _run(self, fns: list[HookFn], x: torch.Tensor, what: str) -> torch.Tensor:
        """``x`` through each of ``fns``: what a hook returns, a tensor of the shape it was given, replaces it
        (None keeps it)."""
        for fn in fns:
            given = self.point.show(x)
            out = fn(given, self.point)
            if out is None:
                out = given
            elif not isinstance(out, torch.Tensor) or out.shape != given.shape:
                got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                raise GlassformerError(f"the {what} on {self.point.name} returned {got}; it must return None or a "
                                       f"tensor of the shape it was given, {tuple(given.shape)}")
            x = self.point.show(out)
        return x


class Hooks:
    """Hook functions attached to a model's hook points until :meth:`remove`; made by :func:`hooks`."""

    def __init__(self, model: nn.Module, pairs: HookList, bwd_pairs: HookList = ()):
        self.model = model
        self.points = hook_points(model)
        chosen: list[tuple[HookPoint, tuple[HookFn, bool]]] = []  # every pair is checked before any is attached
        for backward, given in ((False, pairs), (True, bwd_pairs)):
            for pair in given.items() if isinstance(given, Mapping) else given:
                if not isinstance(pair, tuple) or len(pair) != 2:
                    raise ArgumentTypeError(f"hooks must be (name or filter, function) pairs, got {pair!r}")
                names, fn = pair
                if not callable(fn):
                    raise ArgumentTypeError(f"the hook for {names!r} must be a function (tensor, hook) -> "
                                            f"tensor or None, got {type(fn).__name__}")
                chosen += [(point, (fn, backward)) for point in resolve(self.points, names)]
        for point, entry in chosen:
            tap = point.module
            if tap.fn is None:
                tap.fn = _Attached(point)
            tap.fn.fns.append(entry)
        self._attached = chosen

    def remove(self) -> None:
        """Detach every function this object attached (others' hooks stay); idempotent."""
        for point, entry in reversed(self._attached):
            tap = point.module
            tap.fn.fns.remove(entry)
            if not tap.fn.fns:
                tap.fn = None  # nothing attached: the tap is one attribute test again
        self._attached = []

    def __enter__(self) -> "Hooks":
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def hooks(model: nn.Module, pairs: HookList = (), *, bwd_hooks: HookList = ()) -> Hooks:
    """Attach ``pairs`` ([(names, fn), ...] or {name: fn}, names as :func:`~glassformer.interpret.points.resolve`
    takes them) and ``bwd_hooks`` to ``model`` until the end of a ``with`` block or ``.remove()``; any call
    meanwhile fires them (a KV-cached generation: (B, 1, ...) per step). Returns a :class:`Hooks`."""
    return Hooks(model, pairs, bwd_hooks)


def run_with_hooks(model: nn.Module, *inputs: Any, hooks: HookList = (), fwd_hooks: HookList = (),
                   bwd_hooks: HookList = (), metric: Callable[[Any], torch.Tensor] | None = None,
                   **kwargs: Any) -> Any:
    """``model(*inputs, **kwargs)`` with ``hooks`` (and ``fwd_hooks``, TransformerLens's name) attached for
    this one call. With ``bwd_hooks``, a backward pass from ``metric(output)`` (default: the output, a
    scalar) runs inside the call. Returns the model's output.
    """
    with Hooks(model, hooks, bwd_hooks), Hooks(model, fwd_hooks):
        return _call(model, inputs, kwargs, bool(bwd_hooks), metric)


def _call(model: nn.Module, inputs: tuple, kwargs: dict[str, Any], backward: bool,
          metric: Callable[[Any], torch.Tensor] | None) -> Any:
    """``model(*inputs, **kwargs)``; with ``backward``, then a backward pass from ``metric(output)`` (default: the
    output), which must be a scalar that requires grad."""
    out = model(*inputs, **kwargs)
    if backward:
        value = out if metric is None else metric(out)
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise GlassformerError(f"a backward pass needs a scalar: pass metric=, a function of the model's output "
                                   f"returning one (e.g. the loss); got {got}")
        if not value.requires_grad:
            raise GlassformerError("the metric does not require grad: run with gradients enabled (not under "
                                   "torch.no_grad or inference_mode)")
        value.backward()
    return out


class Recording(Hooks, Mapping[str, list[torch.Tensor]]):
    """What some hook points produced while recording: name -> one tensor per call; made by :func:`record`. The
    hooks that keep them are attached until :meth:`remove` or the ``with`` block's end (what was recorded stays)."""

    def __init__(self, model: nn.Module, names: NameSpec = None, detach: bool = True, incl_bwd: bool = False):
        self.tensors: dict[str, list[torch.Tensor]] = {}
        self.detach = detach
        super().__init__(model, [(names, self._keep)], [(names, self._keep_grad)] if incl_bwd else ())
        self.all_points = self.points  # every point of the model; ``points``: the recorded ones
        self.points = {p.name: p for p, (_, backward) in self._attached if not backward}

    def _keep(self, x: torch.Tensor, hook: HookPoint) -> None:
        self.tensors.setdefault(hook.name, []).append(x.detach() if self.detach else x)

    def _keep_grad(self, grad: torch.Tensor, hook: HookPoint) -> None:
        self.tensors.setdefault(hook.name + "_grad", []).append(grad.detach())

    def __getitem__(self, name: str) -> list[torch.Tensor]:
        if name not in self.points:
            raise KeyError(f"{name!r} was not recorded; recorded points: {', '.join(self.points)}")
        return self.tensors.get(name, [])

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    def cat(self, name: str) -> torch.Tensor:
        """The calls' tensors of ``name`` joined along the (query) positions, as one forward gives them
        (shorter attention rows filled as the causal mask fills them)."""
        parts, point = self[name], self.points[name]
        if not parts:
            raise GlassformerError(f"{name} never fired while recording")
        if point.kind in ("attn_scores", "pattern"):
            keys = max(p.shape[-1] for p in parts)
            fill = float("-inf") if point.kind == "attn_scores" else 0.0
            parts = [torch.nn.functional.pad(p, (0, keys - p.shape[-1]), value=fill) for p in parts]
        return torch.cat(parts, dim=point.module.position_axis)


def record(model: nn.Module, names: NameSpec = None, *, detach: bool = True) -> Recording:
    """Keep what the hook points ``names`` (None: every point) produce, call after call, until the ``with``
    ends: ``rec[name]`` is the prompt's (B, T, d), then one (B, 1, d) per KV-cached step."""
    return Recording(model, names, detach)


def run_with_cache(model: nn.Module, *inputs: Any, names: NameSpec = None, names_filter: NameSpec = None,
                   incl_bwd: bool = False, metric: Callable[[Any], torch.Tensor] | None = None, **kwargs: Any,
                   ) -> tuple[Any, ActivationCache]:
    """Run ``model(*inputs, **kwargs)`` once; return its output and an :class:`ActivationCache` of the hook
    points ``names`` (or ``names_filter``), as :func:`~glassformer.interpret.points.resolve` takes them.
    ``incl_bwd``: also backward from ``metric(output)`` (default: the output) and keep ``name + "_grad"``."""
    if names is not None and names_filter is not None:
        raise ArgumentTypeError("give names= or names_filter= (TransformerLens's name for it), not both")
    names = names_filter if names is None else names
    with Recording(model, names, incl_bwd=incl_bwd) as rec:
        out = _call(model, inputs, kwargs, incl_bwd, metric)
    return out, ActivationCache({name: parts[-1] for name, parts in rec.tensors.items()}, rec.all_points, model)
