"""The cache of one forward and its algebra: TransformerLens 4.x's ``ActivationCache`` methods (same
arguments, labels and numbers) on glassformer's hook names. As in TransformerLens without ``fold_ln``,
``apply_ln`` divides by the cached scale and leaves the norm's gain and bias out (docs/interpret.md).
"""

from collections.abc import Iterator, Mapping

import torch
from torch import nn

from ..errors import ArgumentTypeError, GlassformerError
from ..io.checks import check_int, is_int
from ..nn.norms import LayerNorm, RMSNorm
from ..validate import check_choice
from .points import STACKS, HookPoint, act_name

SliceInput = int | tuple | slice | list | torch.Tensor | None
SUBLAYER_TYPES = ("attn", "mlp", "a", "m")  # TransformerLens's third key element; the name already says it


def as_index(pos_slice: SliceInput, name: str = "pos_slice") -> int | slice | torch.Tensor:
    """TransformerLens's ``Slice`` input as an index: None (all), an int (the axis goes), a (start, stop[, step])
    tuple, a slice, or a list or 1-D tensor of indices."""
    if pos_slice is None:
        return slice(None)
    if is_int(pos_slice) or isinstance(pos_slice, slice):
        return pos_slice
    if isinstance(pos_slice, tuple) and 1 <= len(pos_slice) <= 3:
        return slice(*pos_slice)
    if isinstance(pos_slice, (list, torch.Tensor)):
        return torch.as_tensor(pos_slice, dtype=torch.long).flatten()
    raise ArgumentTypeError(f"{name} must be None, an int, a (start, stop[, step]) tuple, a slice or a list of "
                            f"indices, got {pos_slice!r}")


def apply_slice(x: torch.Tensor, index: int | slice | torch.Tensor, dim: int) -> torch.Tensor:
    """``x`` indexed by ``index`` along ``dim`` (negative counts from the end)."""
    dim = dim % x.dim()
    return x[(slice(None),) * dim + (index,)]


def _stacked(parts: list[tuple[str, torch.Tensor]], pos_slice: SliceInput) -> tuple[torch.Tensor, list[str]]:
    """(label, tensor) parts as one stack, sliced at ``pos_slice``, and their labels."""
    index = as_index(pos_slice)
    return torch.stack([apply_slice(t, index, -2) for _, t in parts]), [label for label, _ in parts]


class ActivationCache(Mapping[str, torch.Tensor]):
    """The tensors of one forward, by hook name (``cache["blocks.0.attn.hook_pattern"]``), or by
    (short name, layer[, stack]) as TransformerLens takes them (``cache["pattern", 0, "decoder"]``);
    gradients under ``name + "_grad"``. The algebra methods need the TransformerLM it came from.
    """

    def __init__(self, tensors: dict[str, torch.Tensor], points: dict[str, HookPoint], model: nn.Module | None = None):
        self.tensors, self.points, self.model = tensors, points, model

    def name_of(self, key: str | tuple) -> str:
        """The full name ``key`` stands for: a name, or (short, layer) / (short, layer, stack)."""
        if isinstance(key, str):
            return key
        if not isinstance(key, tuple) or not 1 <= len(key) <= 3:
            raise ArgumentTypeError(f"cache keys are names or (short, layer[, stack]) tuples, got {key!r}")
        short, layer, stack = (*key, None, None)[:3]
        if stack in SUBLAYER_TYPES:
            stack = None
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

    def _lm(self) -> nn.Module:
        """The TransformerLM this cache came from."""
        from ..models import TransformerLM

        if not isinstance(self.model, TransformerLM):
            raise GlassformerError("this cache method needs the TransformerLM it came from (run_with_cache gives "
                                   f"it); this cache has {type(self.model).__name__}")
        return self.model

    def _layer(self, layer: int | None, mlp_input: bool = False) -> int:
        """TransformerLens's layer argument: None or -1 mean n_layers, else 0..n_layers (before the last, for the
        MLP's input with ``mlp_input``)."""
        n = len(self._lm().blocks)
        layer = n if layer is None or layer == -1 else check_int("layer", layer, low=0, high=n)
        if mlp_input and layer == n:
            raise GlassformerError("mlp_input=True needs a layer before the last, not the final stream")
        return layer

    def accumulated_resid(self, layer: int | None = None, incl_mid: bool = False, apply_ln: bool = False,
                          pos_slice: SliceInput = None, mlp_input: bool = False,
                          return_labels: bool = False) -> torch.Tensor | tuple[torch.Tensor, list[str]]:
        """The residual stream before each layer up to ``layer`` (None or -1: all, then the final stream):
        (n, B, T, d), and the labels "0_pre", "0_mid", ..., "final_post" when ``return_labels``. ``apply_ln``:
        at the end, ``ln_final`` itself on each entry; before a layer, :meth:`apply_ln_to_stack`."""
        n_layers, layer = len(self._lm().blocks), self._layer(layer)
        parts = []
        for i in range(layer + 1):
            if i == n_layers:
                parts.append(("final_post", self["resid_post", n_layers - 1]))
                continue
            parts.append((f"{i}_pre", self["resid_pre", i]))
            if (incl_mid and i < layer) or (mlp_input and i == layer):
                parts.append((f"{i}_mid", self["resid_mid", i]))
        stack, labels = _stacked(parts, pos_slice)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, mlp_input=mlp_input, pos_slice=pos_slice,
                                           recompute_ln=layer == n_layers)
        return (stack, labels) if return_labels else stack

    def decompose_resid(self, layer: int | None = None, mlp_input: bool = False, mode: str = "all",
                        apply_ln: bool = False, pos_slice: SliceInput = None, incl_embeds: bool = True,
                        return_labels: bool = False) -> torch.Tensor | tuple[torch.Tensor, list[str]]:
        """The residual stream entering ``layer`` (None or -1: the final one; its MLP with ``mlp_input``) as the
        (n, B, T, d) stack of what wrote into it, and the labels "embed", "pos_embed", "0_attn_out", ... when
        ``return_labels``. ``mode``: "all", "attn" or "mlp" outputs."""
        model, layer = self._lm(), self._layer(layer, mlp_input)
        check_choice("mode", mode, ("all", "mlp", "attn"))
        attn, mlp = mode != "mlp", mode != "attn" and model.blocks[0].ffn is not None
        parts = [(label, self[name]) for name, label in (("hook_embed", "embed"), ("hook_pos_embed", "pos_embed"))
                 if incl_embeds and name in self.points]
        for i in range(layer):
            parts += [(f"{i}_{kind}", self[kind, i]) for kind, on in (("attn_out", attn), ("mlp_out", mlp)) if on]
        if mlp_input and attn:
            parts.append((f"{layer}_attn_out", self["attn_out", layer]))
        if not parts:
            raise GlassformerError("nothing to decompose: no embeddings (incl_embeds=False) and no layer before")
        stack, labels = _stacked(parts, pos_slice)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, mlp_input=mlp_input, pos_slice=pos_slice)
        return (stack, labels) if return_labels else stack

    def head_results(self, layer: int) -> torch.Tensor:
        """Each head's write into the stream at ``layer``, (B, T, h, d), cached or computed from ``hook_z``."""
        name = act_name("result", layer)
        if name not in self.tensors:
            with torch.no_grad():
                self.tensors[name] = self._lm().blocks[layer].self_attn.per_head_output(self["z", layer])
        return self.tensors[name]

    def compute_head_results(self) -> None:
        """Add every layer's ``attn.hook_result`` computed from ``hook_z``."""
        for layer in range(len(self._lm().blocks)):
            self.head_results(layer)

    def stack_head_results(self, layer: int | None = -1, return_labels: bool = False, incl_remainder: bool = False,
                           pos_slice: SliceInput = None,
                           apply_ln: bool = False) -> torch.Tensor | tuple[torch.Tensor, list[str]]:
        """Every head's write into the stream for the layers before ``layer`` (None or -1: all), stacked head
        by head: (layer * h [+ 1], B, T, d), and the labels "L0H0", "L0H1", ... when ``return_labels``.
        ``incl_remainder`` adds the rest of the stream (``resid_post`` of layer - 1 minus the heads).
        Needs ``hook_z`` (or ``hook_result``)."""
        model, layer = self._lm(), self._layer(layer)
        index = as_index(pos_slice)
        labels = [f"L{i}H{h}" for i in range(layer) for h in range(model.blocks[i].self_attn.n_heads)]
        if layer:
            heads = torch.cat([apply_slice(self.head_results(i), index, -3) for i in range(layer)], dim=-2)
            stack = heads.movedim(-2, 0)  # (layer * h, B, T, d)
        else:
            stack = self["hook_embed"].new_zeros(0, *apply_slice(self["hook_embed"], index, -2).shape)  # no heads
        if incl_remainder:
            if layer == 0:
                raise GlassformerError("incl_remainder needs layer >= 1: the remainder is resid_post of layer - 1")
            rest = apply_slice(self["resid_post", layer - 1], index, -2) - stack.sum(0)
            stack = torch.cat([stack, rest[None]])
            labels.append("remainder")
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, pos_slice=pos_slice)
        return (stack, labels) if return_labels else stack

    def stack_activation(self, activation_name: str, layer: int | None = -1,
                         sublayer_type: str | None = None) -> torch.Tensor:
        """One kind of activation (a short name) for layers < ``layer`` (None or -1: all), stacked: (layer, ...).
        ``sublayer_type`` is accepted for TransformerLens's sake and ignored."""
        return torch.stack([self[(activation_name, i, sublayer_type)] for i in range(self._layer(layer))])

    def apply_ln_to_stack(self, residual_stack: torch.Tensor, layer: int | None = None, mlp_input: bool = False,
                          pos_slice: SliceInput = None, batch_slice: SliceInput = None, has_batch_dim: bool = True,
                          recompute_ln: bool = False) -> torch.Tensor:
        """An (n, B, T, d) stack as the norm at ``layer`` (ln1, ln2 with ``mlp_input``; None or -1: ``ln_final``)
        sees it: centred (LayerNorm) and divided by its cached scale, without gain and bias; unchanged in a
        post-norm model. ``pos_slice``: the positions the stack holds; ``batch_slice``: rows to keep;
        ``recompute_ln``: at ``ln_final``, the norm itself on each entry."""
        model, layer = self._lm(), self._layer(layer, mlp_input)
        final = layer == len(model.blocks)
        rows = as_index(batch_slice, "batch_slice")
        if has_batch_dim:
            residual_stack = apply_slice(residual_stack, rows, 1)
        norm = model.norm_f if final else (model.blocks[layer].ffn_norm if mlp_input else model.blocks[layer].attn_norm)
        if not isinstance(norm, (LayerNorm, RMSNorm)) or not model.blocks[0].norm_first:
            return residual_stack
        if recompute_ln and final:
            return norm(residual_stack)
        if isinstance(norm, LayerNorm):
            residual_stack = residual_stack - residual_stack.mean(-1, keepdim=True)
        key = "ln_final.hook_scale" if final else act_name("ln2_scale" if mlp_input else "ln1_scale", layer)
        scale = apply_slice(self[key], as_index(pos_slice), -2)
        if has_batch_dim:
            scale = apply_slice(scale, rows, 0)
        return residual_stack / scale

    def logit_attrs(self, residual_stack: torch.Tensor, tokens: int | torch.Tensor,
                    incorrect_tokens: int | torch.Tensor | None = None, pos_slice: SliceInput = None,
                    batch_slice: SliceInput = None, has_batch_dim: bool = True) -> torch.Tensor:
        """How much each part of an (n, B, T, d) stack pushes the logit of ``tokens`` (minus
        ``incorrect_tokens``, same shape): each part through ``ln_final``'s cached scale, dotted with the
        tokens' unembedding rows. ``tokens``: an id, or ids (B,), (T,) or (B, T). Returns (n, B, T).
        """
        directions = self._directions(tokens, "tokens")
        if incorrect_tokens is not None:
            wrong = self._directions(incorrect_tokens, "incorrect_tokens")
            if wrong.shape != directions.shape:
                raise GlassformerError(f"tokens and incorrect_tokens must have the same shape, got "
                                       f"{tuple(directions.shape[:-1])} and {tuple(wrong.shape[:-1])}")
            directions = directions - wrong
        scaled = self.apply_ln_to_stack(residual_stack, -1, pos_slice=pos_slice, batch_slice=batch_slice,
                                        has_batch_dim=has_batch_dim)
        if (has_batch_dim and not is_int(batch_slice) and scaled.dim() == 4 and directions.dim() == 2
                and directions.shape[0] == scaled.shape[1]):
            directions = directions.unsqueeze(-2)  # one token per row: the same for all its positions
        return (scaled * directions).sum(-1)

    def _directions(self, tokens: int | torch.Tensor, name: str) -> torch.Tensor:
        """The unembedding rows of ``tokens``: (..., d)."""
        model = self._lm()
        weight = model.emb.weight if model.head.weight is None else model.head.weight  # (V, d)
        if not (is_int(tokens) or (isinstance(tokens, torch.Tensor) and not tokens.is_floating_point())):
            raise ArgumentTypeError(f"{name} must be a token id or a tensor of ids, got {type(tokens).__name__}")
        ids = torch.as_tensor(tokens, device=weight.device)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= weight.shape[0]):
            raise GlassformerError(f"{name} must be ids in [0, {weight.shape[0]}), got {ids.min()}..{ids.max()}")
        return weight[ids]
