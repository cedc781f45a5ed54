"""Speed policy applied from outside while a model generates: the few-row route, attention kernels off cuDNN,
and one decoding step with little Python (:class:`LeanStep`) or fixed shapes (:class:`StaticSteps`)."""

import contextlib
from collections.abc import Iterator
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from ..models.head import OutputHead
from ..nn.taps import Tap
from .linear import MIN_WEIGHT, route_pays, routed, streams


def _routed(module: nn.Module, x: torch.Tensor, embedding: torch.Tensor | None = None, *,
            streamed: bool = False) -> torch.Tensor:
    """``module(x)`` (a Linear, or an OutputHead with its tied ``embedding``) as :func:`.linear.linear` computes it,
    the route asked about once per call; at a decoding step where it does not pay, the module gets its class's
    ``forward`` back for good."""
    weight = embedding if module.weight is None else module.weight
    pays = route_pays(x, weight, streamed)  # None: not a few-row product
    if pays:
        return routed(x, weight, module.bias)
    if x.dim() == 3 and x.shape[1] == 1:  # a decoding step where the route does not pay (or cannot apply)
        del module.forward
    return F.linear(x, weight, module.bias)


def _may_route(weight: torch.Tensor | None) -> bool:
    """The route's fixed conditions on a weight (float32 on the CPU, big enough); the rest is checked per call."""
    return (weight is not None and weight.dim() == 2 and weight.device.type == "cpu"
            and weight.dtype == torch.float32 and weight.numel() >= MIN_WEIGHT)


@contextlib.contextmanager
def few_row_route(model: nn.Module) -> Iterator[None]:
    """Within the block, ``model``'s ``nn.Linear`` and plain :class:`OutputHead` take the few-row route where it pays.

    Results equal the model's up to float32 rounding. Modules with their own instance ``forward`` are left
    alone; a model with a ``torch.compile``'d method is not routed at all (it would recompile each time).
    """
    if any(hasattr(value, "_torchdynamo_orig_callable") for value in vars(model).values()):
        yield
        return
    routed, streamed = [], streams(model)
    embedding = getattr(getattr(model, "embeddings", None), "tok", None)
    for module in model.modules():
        if "forward" in module.__dict__ or not (isinstance(module, nn.Linear) or type(module) is OutputHead):
            continue
        weight = module.weight if module.weight is not None else getattr(embedding, "weight", None)
        if _may_route(weight):
            module.forward = partial(_routed, module, streamed=streamed)
            routed.append(module)
    try:
        yield
    finally:
        for module in routed:
            if "forward" in module.__dict__:  # (one that did not pay has it back already)
                del module.forward


def decoding_attention(device: torch.device | str) -> contextlib.AbstractContextManager[object]:
    """A ``with`` block in which fused attention on a CUDA ``device`` uses flash, memory-efficient or math
    attention, not cuDNN; elsewhere a context that does nothing."""
    if torch.device(device).type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


_LEAN_STEP = [True]  # switched by set_lean_step (the defaults check times the model's own forward)


def set_lean_step(on: bool) -> bool:
    """Let decoders use :class:`LeanStep` (on, the default) or always the model's forward; returns the previous."""
    previous, _LEAN_STEP[0] = _LEAN_STEP[0], bool(on)
    return previous


class LeanStep:
    """One cached decoding step of a TransformerLM (``LeanStep.supports(model)``) with little Python.

    The model's kernels in the same order, so the same numbers, without its ~0.3 ms of Python per layer
    (docs/generation.md). Used only while :meth:`usable` (nobody watches), so hooks still fire.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        streamed = streams(model)  # the route is timed as this model's steps read the weights
        self.layers = [_LeanLayer(block, streamed) for block in model.blocks]
        self.rows = 0  # the batch the projections were chosen for
        self.watched = list(model.modules())  # checked at each step for module hooks ...
        self.tapped = [m for m in self.watched if isinstance(m, Tap)]  # ... and hook points
        self.embeddings, self.norm_f = model.embeddings, model.norm_f
        c = model.config
        self.n_heads, self.n_kv_heads, self.head_dim = c.n_heads, c.kv_heads, c.head_dim
        self.scale = self.head_dim ** -0.5

    @staticmethod
    def supports(model: nn.Module) -> bool:
        """Whether ``model`` is a decoder-only TransformerLM of plain blocks, Linears and glassformer norms."""
        from ..models.lm import TransformerLM
        from ..nn.attention import MultiHeadAttention
        from ..nn.block import TransformerBlock
        from ..nn.feedforward import FeedForward
        from ..nn.norms import LayerNorm, RMSNorm

        if type(model) is not TransformerLM or model.config.attn not in ("causal", "prefix"):
            return False
        norms = (LayerNorm, RMSNorm)
        for block in model.blocks:
            if type(block) is not TransformerBlock or block.cross_attn is not None:
                return False
            attn, ffn = block.self_attn, block.ffn
            if type(attn) is not MultiHeadAttention or type(block.attn_norm) not in norms:
                return False
            linears = [attn.qkv, attn.o_proj]
            if ffn is not None:
                if type(ffn) is not FeedForward or type(block.ffn_norm) not in norms:
                    return False
                linears += [ffn.up, ffn.down] + ([ffn.gate] if ffn.gate is not None else [])
            if any(type(layer) is not nn.Linear for layer in linears):
                return False
        return type(model.norm_f) in (*norms, nn.Identity)

    def usable(self) -> bool:
        """Whether the step may run now: allowed (:func:`set_lean_step`), eval mode, no hook point or hook set."""
        from torch.nn.modules import module as torch_module

        if not _LEAN_STEP[0] or self.model.training:
            return False
        if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
            return False
        return not (any(m.hooked for m in self.tapped) or any(m._forward_hooks or m._forward_pre_hooks
                                                             for m in self.watched))

    def __call__(self, ids: torch.Tensor, positions: torch.Tensor, end: int, cache: list,
                 mask: torch.Tensor | None, slot: torch.Tensor | None = None) -> torch.Tensor:
        """The last layer's normalised states (B, 1, d) for ``ids`` (B, 1), as ``model.hidden_states``.

        ``positions``: (1,) or (B, 1), ``end`` one more than the largest; ``mask``: (B, 1, 1, length + 1) bool,
        True = may attend, or None. ``slot`` (:class:`StaticSteps`): a (1,) tensor, the cache slot written
        (``length`` is left to the caller); attention then reads every slot under ``mask`` (B or 1, 1, 1, capacity).
        """
        from ..nn.attention import fused_attention
        from ..nn.feedforward import activate
        from ..nn.positions import apply_rope

        h, kv, hd = self.n_heads, self.n_kv_heads, self.head_dim
        B = ids.shape[0]
        if self.rows != B:  # each projection: F.linear, or the few-row route where it pays here
            for layer in self.layers:
                layer.choose(B)
            self.rows = B
        n_keys = cache[0].length + 1 if slot is None else cache[0].capacity
        x = self.embeddings(ids, positions, end)  # (B, 1, d)
        rope, score_bias = self.embeddings.attention_inputs(positions, n_queries=1, n_keys=n_keys, end=end)
        for p, layer_cache in zip(self.layers, cache):
            y = p.attn_norm(x) if p.norm_first else x
            qkv = p.qkv(y).view(B, h + 2 * kv, 1, hd)  # T = 1: heads first, no transpose
            q, k, v = qkv[:, :h], qkv[:, h:h + kv], qkv[:, h + kv:]  # (B, h, 1, hd), (B, kv, 1, hd) x 2
            if rope is not None:
                q, k = apply_rope(q, *rope), apply_rope(k, *rope)
            if slot is None:
                k, v = layer_cache.update(k, v)  # (B, kv, length + 1, hd)
            else:  # fixed shapes: write at the slot, read the whole buffers (the mask hides unfilled slots)
                layer_cache.k.index_copy_(2, slot, k.to(layer_cache.k.dtype))  # autocast: bfloat16 -> the cache's
                layer_cache.v.index_copy_(2, slot, v.to(layer_cache.v.dtype))
                k, v = layer_cache.k, layer_cache.v  # (B, kv, capacity, hd)
            if kv != h:
                k, v = k.repeat_interleave(h // kv, dim=1), v.repeat_interleave(h // kv, dim=1)
            out = fused_attention(q, k, v, mask, is_causal=False, score_bias=score_bias, dropout_p=0.0,
                                  scale=self.scale)  # (B, h, 1, hd)
            out = p.o_proj(out.reshape(B, 1, h * hd))  # (B, 1, d)
            x = x + out if p.norm_first else p.attn_norm(x + out)
            if p.up is None:  # attention-only blocks
                continue
            y = p.ffn_norm(x) if p.norm_first else x
            if p.gate is None:
                hidden = activate(p.activation, p.up(y))  # (B, 1, d_ff)
            else:
                hidden = activate(p.activation, p.gate(y)) * p.up(y)  # (B, 1, d_ff)
            out = p.down(hidden)  # (B, 1, d)
            x = x + out if p.norm_first else p.ffn_norm(x + out)
        return x if type(self.norm_f) is nn.Identity else self.norm_f(x)


_STATIC_STEPS = ["off"]


def set_static_steps(mode: str) -> str:
    """How decoders run a one-token step of an unpadded batch: "off" (the default, :class:`LeanStep`), "static"
    (:class:`StaticSteps`) or "graphs" (on CUDA, those captured once as a CUDA graph); returns the previous mode."""
    from ..errors import GlassformerError

    if mode not in ("off", "static", "graphs"):
        raise GlassformerError(f"mode must be 'off', 'static' or 'graphs', got {mode!r}")
    previous, _STATIC_STEPS[0] = _STATIC_STEPS[0], mode
    return previous


def static_mode() -> str:
    """The mode :func:`set_static_steps` set: "off", "static" or "graphs"."""
    return _STATIC_STEPS[0]


class StaticSteps:
    """One-token decoding steps whose shapes never change, so a CUDA graph (``graphs``, CUDA only) can replay them.

    :class:`LeanStep` with ``slot``: fixed buffers, keys and values written into the preallocated ``cache``,
    attention over all ``capacity`` slots with unfilled ones masked (the same numbers).
    """

    captured = 0  # CUDA graphs captured in this process

    def __init__(self, lean: LeanStep, cache: list, batch: int, *, graphs: bool) -> None:
        self.lean, self.cache = lean, cache
        device = cache[0].k.device
        self.capacity = cache[0].capacity
        self.ids = torch.zeros(batch, 1, dtype=torch.long, device=device)  # (B, 1)
        self.slot = torch.zeros(1, dtype=torch.long, device=device)  # (1,)
        self.key_slots = torch.arange(self.capacity, device=device)  # (capacity,)
        self.graphs = graphs and device.type == "cuda"
        self.graph: torch.cuda.CUDAGraph | None = None
        self.out: torch.Tensor | None = None
        self.steps = 0  # steps taken (tests count them)

    @staticmethod
    def applies(lean: LeanStep | None, cache: list | None, pad: torch.Tensor | None) -> bool:
        """Whether a decoder's step may take fixed shapes now: mode on, lean step usable, no padding, a cache
        allocated at full size, no ALiBi."""
        if _STATIC_STEPS[0] == "off" or lean is None or cache is None or pad is not None:
            return False
        full = all(layer.capacity == layer.max_len for layer in cache)
        return full and lean.embeddings.scheme != "alibi" and lean.usable()

    def _run(self) -> torch.Tensor:
        mask = (self.key_slots <= self.slot).view(1, 1, 1, self.capacity)  # slots filled so far, this one included
        hidden = self.lean(self.ids, self.slot, self.capacity, self.cache, mask, slot=self.slot)  # (B, 1, d)
        return self.lean.model.logits(hidden)[:, 0].float()  # (B, V)

    def __call__(self, ids: torch.Tensor, slot: int) -> torch.Tensor:
        """Logits (B, V) after feeding ``ids`` (B, 1) at cache slot ``slot`` (the cache's ``length``)."""
        self.ids.copy_(ids)
        self.slot.fill_(slot)
        if self.graphs:
            if self.graph is None:
                self._capture()
            self.graph.replay()
        out = self.out if self.graphs else self._run()
        for layer in self.cache:
            layer.length = slot + 1
        self.steps += 1
        return out.clone()  # the graph's output buffer is overwritten by the next replay

    def _capture(self) -> None:
        """Warm up on a side stream (kernels chosen, workspaces allocated), then record one step."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # each run writes this slot's keys and values again: the same numbers
                self._run()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self._run()
        StaticSteps.captured += 1


class _LeanLayer:
    """One block as :class:`LeanStep` reads it: norms' ``plain`` and projections as functions of its parameters."""

    def __init__(self, block: nn.Module, streamed: bool) -> None:
        attn, ffn = block.self_attn, block.ffn
        self.streamed = streamed  # the model's weights exceed the last cache: the route is timed on them from memory
        self.norm_first = block.norm_first
        self.attn_norm = block.attn_norm
        self.ffn_norm = block.ffn_norm if ffn is not None else None
        self.activation = ffn.activation if ffn is not None else None
        self.modules = {"qkv": attn.qkv, "o_proj": attn.o_proj, "up": ffn and ffn.up, "gate": ffn and ffn.gate,
                        "down": ffn and ffn.down}
        self.qkv = self.o_proj = self.up = self.gate = self.down = None  # set by choose()

    def choose(self, rows: int) -> None:
        """Make each projection ``F.linear``, or :func:`.linear.routed` where the route pays for ``rows`` rows
        (a step then runs no check: rows, grad mode and autocast do not change within one generation)."""
        for name, module in self.modules.items():
            if module is None:
                continue
            weight, bias = module.weight, module.bias
            probe = torch.empty(rows, 1, weight.shape[1], dtype=weight.dtype, device=weight.device)
            if _may_route(weight) and route_pays(probe, weight, self.streamed):
                setattr(self, name, partial(routed, weight=weight, bias=bias))  # checked once, here
            else:
                setattr(self, name, partial(F.linear, weight=weight, bias=bias))
