"""The hook points of a model: every ``self.tap(name, x)`` of its parts under the full name TransformerLens
gives the same tensor ("blocks.0.attn.hook_z") and a short name for every layer ("z") (docs/interpret.md).
"""

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
    """One place in a model where a hook may read or replace a tensor; hook functions receive it. ``layer``:
    the block's index (also callable) or None; ``module`` calls ``self.tap(tap, x)`` there."""

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
        """The model's tensor in the layout hooks see (TransformerLens's): RoPE'd q/k as (B, T, h, hd), and
        back (the swap is its own inverse)."""
        return x.transpose(1, 2) if self.tap in ("rot_q", "rot_k") else x

    def __repr__(self) -> str:
        return f"HookPoint({self.name!r})"


def act_name(short: str, layer: int | None = None, stack: str = "blocks") -> str:
    """The full hook name of a short one, as TransformerLens's ``utils.get_act_name`` gives it:
    ``act_name("pattern", 0)`` -> "blocks.0.attn.hook_pattern"; ``act_name("embed")`` -> "hook_embed"."""
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
    """A norm's points: ``hook_scale`` and ``hook_normalized`` (none for an identity norm) and ``hook_out``
    (``out``: the (module, tap) that sees its output)."""
    def point(suffix: str, module: Tapped, tap: str) -> HookPoint:
        name = act_name(short + suffix, layer, stack or "blocks")
        return HookPoint(name, short + suffix, None if layer is None else LayerIndex(layer), stack, module, tap)

    points = []
    if isinstance(norm, (LayerNorm, RMSNorm)):
        points += [point("_scale", norm, "scale"), point("", norm, "normalized")]
    return points + [point("_out", *out)]


def _named(declared: list[tuple[str, nn.Module, str, nn.Module | None]], layer: int | None,
           stack: str | None) -> list[HookPoint]:
    """Hook points from what a part declares: (short, module, tap, the norm whose output it is or None)."""
    points = []
    for short, module, tap, norm in declared:
        if norm is not None:
            points += _norm_points(short, norm, (module, tap), layer, stack)
        else:
            index = None if layer is None else LayerIndex(layer)
            points.append(HookPoint(act_name(short, layer, stack or "blocks"), short, index, stack, module, tap))
    return points


def hook_points(model: nn.Module) -> dict[str, HookPoint]:
    """Every hook point of a TransformerLM or EncoderDecoder, {full name: :class:`HookPoint`}, in the order
    a forward reaches them; points a configuration lacks (``hook_rot_q`` without RoPE...) are absent."""
    if isinstance(model, TransformerLM):
        points = _named(model.embeddings.hook_points(), None, None)
        for i, block in enumerate(model.blocks):
            points += _named(block.hook_points(rope=model.config.pos == "rope"), i, "blocks")
        points += _norm_points("ln_final", model.norm_f, (model, "ln_final"), None, None)
    elif isinstance(model, EncoderDecoder):
        points = []
        for side, blocks, norm in (("encoder", model.enc, model.enc_norm), ("decoder", model.dec, model.dec_norm)):
            for i, block in enumerate(blocks):
                points += _named(block.hook_points(rope=model.config.pos == "rope"), i, f"{side}_blocks")
            points += _norm_points(f"{side}_ln_final", norm, (model, f"{side}_ln_final"), None, None)
    else:
        raise ArgumentTypeError(f"model must be a glassformer TransformerLM or EncoderDecoder, got "
                                f"{type(model).__name__}")
    return {p.name: p for p in points}


def resolve(points: dict[str, HookPoint], names: NameSpec) -> list[HookPoint]:
    """The hook points (of :func:`hook_points`) that ``names`` selects, in forward order: None (all but the
    per-head forms ``ON_DEMAND``, selected by name only), a full or short name, a list of those, or a
    function name -> bool. An unknown name is an error naming the closest known ones."""
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
