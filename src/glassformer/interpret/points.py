"""The hook points of a model, under TransformerLens's names.

Each model part marks its intermediates with ``self.tap(name, x)`` (:class:`glassformer.nn.taps.Tapped`);
this module gives every such tap its full name, the one TransformerLens gives the same tensor:

    hook_embed, hook_pos_embed                         embeddings (TransformerLM), (B, T, d) each
    embed_ln.hook_scale / hook_normalized / hook_out   the embedding norm (BERT), as every norm below
    blocks.{i}.hook_resid_pre                          the residual stream entering block i
    blocks.{i}.ln1.hook_scale                          the attention's norm: its divisor (B, T, 1),
    blocks.{i}.ln1.hook_normalized                     the input divided by it, before gain and bias,
    blocks.{i}.ln1.hook_out                            and its output (after gain and bias)
    blocks.{i}.hook_attn_in                            (B, T, h, d): the stream copied per head, then
    blocks.{i}.hook_q_input / hook_k_input / hook_v_input   each head's copy (kv heads for k, v), before ln1
    blocks.{i}.attn.hook_q / hook_k / hook_v           (B, T, heads, hd)
    blocks.{i}.attn.hook_rot_q / hook_rot_k            after RoPE, (B, T, heads, hd)
    blocks.{i}.attn.hook_attn_scores / hook_pattern    (B, h, Tq, Tk), before / after the softmax
    blocks.{i}.attn.hook_z                             (B, T, h, hd), each head's output
    blocks.{i}.attn.hook_result                        (B, T, h, d), each head's write into the stream
    blocks.{i}.hook_attn_out, hook_resid_mid           attention's output; the stream after it
    blocks.{i}.hook_mlp_in                             (B, T, d), a copy of the stream the MLP reads
    blocks.{i}.ln2.hook_scale / hook_normalized / hook_out, mlp.hook_pre, mlp.hook_pre_linear, mlp.hook_post
    blocks.{i}.hook_mlp_out, hook_resid_post
    ln_final.hook_scale / hook_normalized / hook_out

An :class:`~glassformer.models.EncoderDecoder` has ``encoder_blocks.{i}.*`` (attention ``attn``) and
``decoder_blocks.{i}.*`` (``self_attn``, then ``ln2``, ``cross_attn.*``, ``hook_cross_attn_out``,
``hook_resid_mid2``, then ``ln3`` and the MLP), and ``encoder_ln_final`` / ``decoder_ln_final``, as
TransformerLens's bridge names BART and T5. Every point also has a short name (``"pattern"``,
``"resid_pre"``, ``"cross_z"``, ``"ln1"`` for ``ln1.hook_normalized``, ``"ln1_scale"``, ``"ln1_out"``, ...)
that selects it in every layer.

The per-head points (``attn.hook_result``, ``hook_attn_in``, ``hook_q_input``...) cost nothing unless
hooked: only a hooked layer computes its attention per head (TransformerLens's ``use_attn_result`` /
``use_split_qkv_input``, switched on by the hook itself).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

from ..errors import ArgumentTypeError, GlassformerError
from ..models import EncoderDecoder, TransformerLM
from ..nn.attention import MultiHeadAttention
from ..nn.block import TransformerBlock
from ..nn.feedforward import FeedForward
from ..nn.norms import LayerNorm, RMSNorm
from ..nn.taps import Tapped

ATTENTION_TAPS = MultiHeadAttention.TAPS  # declared where the model taps them
MLP_TAPS = FeedForward.TAPS
HEAD_INPUT_TAPS = TransformerBlock.HEAD_INPUT_TAPS
HEAD_SHAPED = ("q", "k", "v", "rot_q", "rot_k", "z", "result", *HEAD_INPUT_TAPS)  # (B, T, heads, ...)
ON_DEMAND = ("result", "cross_result", *HEAD_INPUT_TAPS)  # per-head forms: selected by name only, never by None
SCORE_SHAPED = ("attn_scores", "pattern")  # (B, h, Tq, Tk)
NORMS = ("ln1", "ln2", "ln3", "ln_final", "encoder_ln_final", "decoder_ln_final", "embed_ln")
STACKS = {"blocks": "blocks", "encoder": "encoder_blocks", "decoder": "decoder_blocks",
          "encoder_blocks": "encoder_blocks", "decoder_blocks": "decoder_blocks"}

NameSpec = str | Iterable[str] | Callable[[str], bool] | None


class LayerIndex(int):
    """A block's index that is also callable, ``hook.layer() == hook.layer``, as TransformerLens has it."""

    def __call__(self) -> int:
        return int(self)


@dataclass(frozen=True, eq=False)
class HookPoint:
    """One place in a model where a hook may read or replace a tensor; hook functions receive it.

    Attributes:
        name: the full name, e.g. "blocks.0.attn.hook_pattern".
        short: the kind, e.g. "pattern" (cross-attention's are "cross_pattern", ...).
        layer: the block's index (an int that is also callable: ``hook.layer()``, TransformerLens's
            spelling), or None (embeddings, final norms).
        stack: "blocks", "encoder_blocks", "decoder_blocks", or None.
        module, tap: the module whose forward calls ``self.tap(tap, x)``.
    """

    name: str
    short: str
    layer: int | None
    stack: str | None
    module: Tapped
    tap: str

    @property
    def kind(self) -> str:
        """The short name without "cross_": "pattern" for self- and cross-attention alike."""
        return self.short.removeprefix("cross_")

    @property
    def head_axis(self) -> int | None:
        """The heads' axis in the tensor hooks see: 2 for q/k/v/z, 1 for scores/pattern, else None."""
        return 2 if self.kind in HEAD_SHAPED else 1 if self.kind in SCORE_SHAPED else None

    @property
    def position_axis(self) -> int:
        """The (query) positions' axis in the tensor hooks see."""
        return 2 if self.kind in SCORE_SHAPED else 1

    def show(self, x: torch.Tensor) -> torch.Tensor:
        """The model's tensor in the layout hooks see (TransformerLens's): RoPE'd q/k as (B, T, h, hd)."""
        return x.transpose(1, 2) if self.tap in ("rot_q", "rot_k") else x

    def unshow(self, x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """Back from :meth:`show`'s layout to the model's (``like`` is the model's tensor)."""
        return x.transpose(1, 2) if self.tap in ("rot_q", "rot_k") else x

    def __repr__(self) -> str:
        return f"HookPoint({self.name!r})"


def act_name(short: str, layer: int | None = None, stack: str = "blocks") -> str:
    """The full hook name of a short one, as TransformerLens's ``utils.get_act_name`` gives it.

    ``act_name("pattern", 0)`` -> "blocks.0.attn.hook_pattern"; ``act_name("ln3", 1, "decoder")`` ->
    "decoder_blocks.1.ln3.hook_normalized"; ``act_name("embed")`` -> "hook_embed". Whether the model
    has that point is checked where the name is used.
    """
    if short in ("embed", "pos_embed", "token_type_embed"):
        return f"hook_{short}"
    norm, part = _norm_part(short)
    if norm in ("ln_final", "encoder_ln_final", "decoder_ln_final", "embed_ln"):
        return f"{norm}.hook_{part}"
    if stack not in STACKS:
        raise GlassformerError(f"stack must be one of {sorted(STACKS)}, got {stack!r}")
    if layer is None:
        raise GlassformerError(f"{short!r} is a per-layer hook point: give its layer")
    prefix = f"{STACKS[stack]}.{layer}"
    attn = "self_attn" if STACKS[stack] == "decoder_blocks" else "attn"
    if short in ATTENTION_TAPS:
        return f"{prefix}.{attn}.hook_{short}"
    if short.startswith("cross_") and short.removeprefix("cross_") in ATTENTION_TAPS:
        return f"{prefix}.cross_attn.hook_{short.removeprefix('cross_')}"
    if short in MLP_TAPS:
        return f"{prefix}.mlp.hook_{short}"
    if norm in ("ln1", "ln2", "ln3"):
        return f"{prefix}.{norm}.hook_{part}"
    return f"{prefix}.hook_{short}"


def _norm_part(short: str) -> tuple[str | None, str | None]:
    """("ln1", "scale") for "ln1_scale", ("ln1", "normalized") for "ln1"; (None, None) for other names."""
    if short in NORMS:
        return short, "normalized"
    norm, _, part = short.rpartition("_")
    return (norm, part) if norm in NORMS and part in ("scale", "out") else (None, None)


def _norm_points(short: str, norm: nn.Module, out: tuple[Tapped, str], layer: int | None,
                 stack: str | None) -> list[HookPoint]:
    """A norm's points: ``hook_scale`` and ``hook_normalized`` (the norm's own taps; none for a norm that
    is the identity) and ``hook_out`` (``out``: the (module, tap) that sees its output)."""
    def point(suffix: str, module: Tapped, tap: str) -> HookPoint:
        name = act_name(short + suffix, layer, stack or "blocks")
        return HookPoint(name, short + suffix, None if layer is None else LayerIndex(layer), stack, module, tap)

    points = []
    if isinstance(norm, (LayerNorm, RMSNorm)):
        points += [point("_scale", norm, "scale"), point("", norm, "normalized")]
    return points + [point("_out", *out)]


def _named(declared: list[tuple[str, nn.Module, str, nn.Module | None]], layer: int | None,
           stack: str | None) -> list[HookPoint]:
    """Hook points from what a part declares (:meth:`TransformerBlock.hook_points`,
    :meth:`Embeddings.hook_points`): (short, module, tap, the norm whose output it is or None) each."""
    points = []
    for short, module, tap, norm in declared:
        if norm is not None:
            points += _norm_points(short, norm, (module, tap), layer, stack)
        else:
            index = None if layer is None else LayerIndex(layer)
            points.append(HookPoint(act_name(short, layer, stack or "blocks"), short, index, stack, module, tap))
    return points


def hook_points(model: nn.Module) -> dict[str, HookPoint]:
    """Every hook point of a glassformer model, by full name, in the order a forward reaches them.

    Args:
        model: a :class:`~glassformer.models.TransformerLM` or :class:`~glassformer.models.EncoderDecoder`
            (trained, loaded from a checkpoint, or imported from Hugging Face).
    Returns:
        {name: :class:`HookPoint`}; points that a configuration does not have (RoPE's ``hook_rot_q``
        without RoPE, ``hook_pos_embed`` without absolute positions, ``mlp.*`` in an attention-only
        model) are absent.
    """
    if isinstance(model, TransformerLM):
        points = _named(model.embeddings.hook_points(), None, None)
        for i, block in enumerate(model.blocks):
            points += _named(block.hook_points(rope=model.config.pos == "rope"), i, "blocks")
        points += _norm_points("ln_final", model.norm_f, (model, "ln_final"), None, None)
    elif isinstance(model, EncoderDecoder):
        points = []
        for i, block in enumerate(model.enc):
            points += _named(block.hook_points(rope=model.config.pos == "rope"), i, "encoder_blocks")
        points += _norm_points("encoder_ln_final", model.enc_norm, (model, "encoder_ln_final"), None, None)
        for i, block in enumerate(model.dec):
            points += _named(block.hook_points(rope=model.config.pos == "rope"), i, "decoder_blocks")
        points += _norm_points("decoder_ln_final", model.dec_norm, (model, "decoder_ln_final"), None, None)
    else:
        raise ArgumentTypeError(f"model must be a glassformer TransformerLM or EncoderDecoder, got "
                                f"{type(model).__name__}")
    return {p.name: p for p in points}


def resolve(points: dict[str, HookPoint], names: NameSpec) -> list[HookPoint]:
    """The hook points that ``names`` selects, in forward order.

    Args:
        points: from :func:`hook_points`.
        names: None (all but the per-head forms ``ON_DEMAND``: ``attn.hook_result``, ``hook_attn_in``,
            ``hook_q_input``..., which make a layer compute its attention head by head, so only asking for
            them by name does, as TransformerLens's flags); a full name ("blocks.0.attn.hook_z"); a short
            name selecting that point in every layer ("pattern", "resid_post", "cross_z", "result"); a list
            of those; or a function name -> bool (TransformerLens's ``names_filter``).
    Raises:
        GlassformerError naming an unknown name and the closest known ones.
    """
    if names is None:
        return [p for p in points.values() if p.short not in ON_DEMAND]
    if callable(names):
        return [p for name, p in points.items() if names(name)]
    wanted = [names] if isinstance(names, str) else list(names)
    chosen: set[str] = set()
    for name in wanted:
        if not isinstance(name, str):
            raise ArgumentTypeError(f"hook names must be strings, got {type(name).__name__}")
        if name in points:
            chosen.add(name)
            continue
        matches = [p.name for p in points.values() if p.short == name]
        if not matches:
            shorts = sorted({p.short for p in points.values()})
            close = difflib.get_close_matches(name, list(points) + shorts, n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise GlassformerError(f"{name!r} is not a hook point of this model{hint} (short names: "
                                   f"{', '.join(shorts)}; glassformer.interpret.hook_points(model) lists all)")
        chosen.update(matches)
    return [p for name, p in points.items() if name in chosen]
