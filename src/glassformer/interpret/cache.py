"""The cache of one forward and its algebra, TransformerLens's ``ActivationCache`` methods on glassformer's
hook names: the residual stream as a stack of what wrote into it (:meth:`ActivationCache.decompose_resid`,
:meth:`~ActivationCache.stack_head_results`), the stream after each layer (:meth:`~ActivationCache.accumulated_resid`),
each part through a norm's cached scale (:meth:`~ActivationCache.apply_ln_to_stack`) and onto the unembedding of
chosen tokens (:meth:`~ActivationCache.logit_attrs`). Same arguments, labels and numbers as TransformerLens
4.x on the same weights (tests/test_tl_parity.py); like TransformerLens without ``fold_ln``, ``apply_ln``
divides by the cached scale and leaves the norm's gain and bias out (docs/interpret.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch
from torch import nn

from ..errors import ArgumentTypeError, GlassformerError, check_int, is_int
from ..nn.norms import LayerNorm, RMSNorm
from .points import STACKS, HookPoint, act_name

SliceInput = int | tuple | slice | list | torch.Tensor | None
SUBLAYER_TYPES = ("attn", "mlp", "a", "m")  # TransformerLens's third key element; the name already says it


def as_index(pos_slice: SliceInput, name: str = "pos_slice") -> int | slice | torch.Tensor:
    """TransformerLens's ``Slice`` input as an index: None -> all; an int -> that one (the axis goes);
    (stop,), (start, stop) or (start, stop, step) -> that slice; a list or 1-D tensor -> those indices."""
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


class ActivationCache(Mapping[str, torch.Tensor]):
    """The tensors of one forward, by hook name: ``cache["blocks.0.attn.hook_pattern"]``.

    Also ``cache["pattern", 0]`` (short name, layer) and ``cache["pattern", 0, "decoder"]`` (and stack,
    for an EncoderDecoder; TransformerLens's "attn"/"mlp" there is accepted and ignored), as TransformerLens's
    cache takes them; :meth:`stack` stacks one kind over layers; gradients (``run_with_cache(...,
    incl_bwd=True)``) under ``name + "_grad"``. The algebra methods (TransformerLens's) need the model,
    which :func:`~glassformer.interpret.run_with_cache` gives, and a TransformerLM.
    """

    def __init__(self, tensors: dict[str, torch.Tensor], points: dict[str, HookPoint], model: nn.Module | None = None):
        self.tensors = tensors
        self.points = points
        self.model = model

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

    # ---------------------------------------------------------------- TransformerLens's cache algebra

    def _lm(self) -> nn.Module:
        """The TransformerLM this cache came from (the algebra reads its norms and unembedding)."""
        from ..models import TransformerLM

        if not isinstance(self.model, TransformerLM):
            raise GlassformerError("this cache method needs the TransformerLM it came from (run_with_cache gives "
                                   f"it); this cache has {type(self.model).__name__}")
        return self.model

    def _layer(self, layer: int | None) -> int:
        """TransformerLens's layer argument: None or -1 mean n_layers (the unembedding), else 0..n_layers."""
        n = len(self._lm().blocks)
        if layer is None or layer == -1:
            return n
        return check_int("layer", layer, low=0, high=n)

    def accumulated_resid(self, layer: int | None = None, incl_mid: bool = False, apply_ln: bool = False,
                          pos_slice: SliceInput = None, mlp_input: bool = False,
                          return_labels: bool = False) -> torch.Tensor | tuple[torch.Tensor, list[str]]:
        """The residual stream as it stood before each layer: the logit lens's input.

        Args:
            layer: stop before this layer's attention (its resid_pre is the last entry); None or -1: all,
                ending with the final stream (``resid_post`` of the last layer, labelled "final_post").
            incl_mid: also each earlier layer's ``resid_mid``; mlp_input: also this layer's.
            apply_ln: through the norm that reads it: at the end, ``ln_final`` itself on each entry (its own
                statistics, gain and bias); before a layer, :meth:`apply_ln_to_stack` (the cached scale).
            pos_slice: positions to keep (TransformerLens's Slice input: int, tuple, list...).
            return_labels: also return labels "0_pre", "0_mid", ..., "final_post".
        Returns:
            (n, B, T, d) stack (T as sliced), and the labels when asked.
        """
        n_layers, layer = len(self._lm().blocks), self._layer(layer)
        index = as_index(pos_slice)
        parts, labels = [], []
        for i in range(layer + 1):
            if i == n_layers:
                parts.append(self["resid_post", n_layers - 1])
                labels.append("final_post")
                continue
            parts.append(self["resid_pre", i])
            labels.append(f"{i}_pre")
            if (incl_mid and i < layer) or (mlp_input and i == layer):
                parts.append(self["resid_mid", i])
                labels.append(f"{i}_mid")
        stack = torch.stack([apply_slice(p, index, -2) for p in parts])
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, mlp_input=mlp_input, pos_slice=pos_slice,
                                           recompute_ln=layer == n_layers)
        return (stack, labels) if return_labels else stack

    def decompose_resid(self, layer: int | None = None, mlp_input: bool = False, mode: str = "all",
                        apply_ln: bool = False, pos_slice: SliceInput = None, incl_embeds: bool = True,
                        return_labels: bool = False) -> torch.Tensor | tuple[torch.Tensor, list[str]]:
        """The residual stream entering ``layer`` as the stack of what wrote into it; the entries sum to it.

        Args:
            layer: None or -1: the final stream; l: the stream entering layer l's attention.
            mlp_input: the stream entering layer l's MLP instead (adds its attention's output).
            mode: "all", "attn" (attention outputs only) or "mlp" (MLP outputs only).
            apply_ln: through :meth:`apply_ln_to_stack` (the cached scale of the norm that reads it).
            pos_slice: positions to keep.
            incl_embeds: start with ``hook_embed`` (and ``hook_pos_embed`` where the model has one).
            return_labels: also return labels "embed", "pos_embed", "0_attn_out", "0_mlp_out", ...
        Returns:
            (n, B, T, d) stack, and the labels when asked.
        """
        model, layer = self._lm(), self._layer(layer)
        if mode not in ("all", "mlp", "attn"):
            raise GlassformerError(f"mode must be one of 'all', 'mlp', 'attn', got {mode!r}")
        if mlp_input and layer == len(model.blocks):
            raise GlassformerError("mlp_input=True needs a layer before the last, not the final stream")
        attn, mlp = mode != "mlp", mode != "attn" and model.blocks[0].ffn is not None
        parts, labels = [], []
        if incl_embeds:
            for name, label in (("hook_embed", "embed"), ("hook_pos_embed", "pos_embed")):
                if name in self.points:
                    parts.append(self[name])
                    labels.append(label)
        for i in range(layer):
            if attn:
                parts.append(self["attn_out", i])
                labels.append(f"{i}_attn_out")
            if mlp:
                parts.append(self["mlp_out", i])
                labels.append(f"{i}_mlp_out")
        if mlp_input and attn:
            parts.append(self["attn_out", layer])
            labels.append(f"{layer}_attn_out")
        if not parts:
            raise GlassformerError("nothing to decompose: no embeddings (incl_embeds=False) and no layer before")
        index = as_index(pos_slice)
        stack = torch.stack([apply_slice(p, index, -2) for p in parts])
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, mlp_input=mlp_input, pos_slice=pos_slice)
        return (stack, labels) if return_labels else stack

    def head_results(self, layer: int) -> torch.Tensor:
        """Each head's write into the stream at ``layer``, (B, T, h, d): ``attn.hook_result`` when cached,
        else computed from the cached ``hook_z`` and ``o_proj`` (TransformerLens's ``compute_head_results``)."""
        name = act_name("result", layer)
        if name not in self.tensors:
            with torch.no_grad():
                self.tensors[name] = self._lm().blocks[layer].self_attn.per_head_output(self["z", layer])
        return self.tensors[name]

    def compute_head_results(self) -> None:
        """Add every layer's ``attn.hook_result`` computed from ``hook_z`` (TransformerLens's method; the
        stacking methods do this themselves when they need it)."""
        for layer in range(len(self._lm().blocks)):
            self.head_results(layer)

    def stack_head_results(self, layer: int | None = -1, return_labels: bool = False, incl_remainder: bool = False,
                           pos_slice: SliceInput = None,
                           apply_ln: bool = False) -> torch.Tensor | tuple[torch.Tensor, list[str]]:
        """Every head's write into the stream, for the layers before ``layer``, stacked head by head.

        Args:
            layer: heads of layers < layer; None or -1: all.
            return_labels: also return labels "L0H0", "L0H1", ...
            incl_remainder: add a last entry, the rest of the stream (``resid_post`` of layer - 1 minus the heads).
            pos_slice: positions to keep.
            apply_ln: through :meth:`apply_ln_to_stack` for the norm entering ``layer``.
        Returns:
            (layer * h [+ 1], B, T, d) stack, and the labels when asked. Needs ``hook_z`` (or ``hook_result``).
        """
        model, layer = self._lm(), self._layer(layer)
        index = as_index(pos_slice)
        labels = [f"L{i}H{h}" for i in range(layer) for h in range(model.blocks[i].self_attn.n_heads)]
        if layer:
            heads = torch.cat([apply_slice(self.head_results(i), index, -3) for i in range(layer)], dim=-2)
            stack = heads.movedim(-2, 0)  # (layer * h, B, T, d)
        else:
            stack = torch.zeros(0, *apply_slice(self["hook_embed"], index, -2).shape,
                                dtype=self["hook_embed"].dtype, device=self["hook_embed"].device)
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
        """One kind of activation ("pattern", "resid_post", "blocks.?" short names) for layers < ``layer``
        (None or -1: all), stacked: (layer, ...). ``sublayer_type`` is TransformerLens's, accepted for
        compatibility (our short names already say the sub-layer)."""
        layer = self._layer(layer)
        return torch.stack([self[(activation_name, i, sublayer_type)] for i in range(layer)])

    def apply_ln_to_stack(self, residual_stack: torch.Tensor, layer: int | None = None, mlp_input: bool = False,
                          pos_slice: SliceInput = None, batch_slice: SliceInput = None, has_batch_dim: bool = True,
                          recompute_ln: bool = False) -> torch.Tensor:
        """Parts of the stream as the norm at ``layer`` sees them: centred (LayerNorm) and divided by the
        scale that norm had on the whole stream in this forward (``ln*.hook_scale``), without its gain and
        bias (TransformerLens's convention: with folded norms those live in the next weights).

        Args:
            residual_stack: (n, B, T, d) (or without B when ``has_batch_dim`` is False; T as ``pos_slice``
                left it).
            layer: the norm before layer's attention (ln1), or its MLP with ``mlp_input`` (ln2); None, -1 or
                n_layers: ``ln_final``.
            pos_slice: the positions the stack holds (applied to the cached scale only).
            batch_slice: rows to keep (applied to the stack and the scale).
            recompute_ln: at ``ln_final`` only, apply the norm itself to each entry (own statistics, gain
                and bias), as the logit lens does.
        Returns:
            The stack, same shape (rows as ``batch_slice`` keeps). A model whose stream has no norm there
            (post-norm) gets the stack back unchanged.
        """
        model, layer = self._lm(), self._layer(layer)
        final = layer == len(model.blocks)
        if mlp_input and final:
            raise GlassformerError("mlp_input=True needs a layer before the last, not ln_final")
        rows = as_index(batch_slice, "batch_slice")
        if has_batch_dim:
            residual_stack = apply_slice(residual_stack, rows, 1)
        norm = model.norm_f if final else (model.blocks[layer].ffn_norm if mlp_input else model.blocks[layer].attn_norm)
        if not isinstance(norm, (LayerNorm, RMSNorm)) or not model.blocks[0].norm_first:
            return residual_stack
        if recompute_ln and final:
            return norm.plain(residual_stack)
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
        """How much each part of the stream pushes the logit of ``tokens`` (minus ``incorrect_tokens``):
        each part through ``ln_final``'s cached scale, dotted with the tokens' unembedding rows.

        Args:
            residual_stack: (n, B, T, d) parts, e.g. from :meth:`decompose_resid` or :meth:`stack_head_results`.
            tokens: an id, or ids (B,) one per row, (T,) one per position, or (B, T).
            incorrect_tokens: the same shape as ``tokens``: attribute the logit difference.
            pos_slice, batch_slice, has_batch_dim: as :meth:`apply_ln_to_stack`.
        Returns:
            (n, B, T) (as sliced) attributions. Without folded norm weights the gain of ``ln_final`` is
            not in them (as in TransformerLens); :func:`~glassformer.interpret.direct_logit_attribution`
            gives the exact shares of one logit.
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
