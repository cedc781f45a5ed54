"""The hook points of a model: every :class:`~glassformer.nn.taps.Tap` in its module tree, in the tree's order
(modules register their taps in the order their forward reaches them), under the full name TransformerLens
gives the same tensor ("blocks.0.attn.hook_z") and a short name for every layer ("z") (docs/interpret.md).
"""

import difflib
import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

from ..config import ModelConfig
from ..errors import ArgumentTypeError, GlassformerError
from ..models import EncoderDecoder, TransformerLM
from ..nn.block import TransformerBlock
from ..nn.taps import NormTaps, Tap
from ..validate import check_choice

STACKS = {"blocks": "blocks", "encoder": "encoder_blocks", "decoder": "decoder_blocks",
          "encoder_blocks": "encoder_blocks", "decoder_blocks": "decoder_blocks"}
# Module names (kept as they are for checkpoints) that TransformerLens names otherwise; "embeddings." is dropped.
RENAMED = {"enc": "encoder_blocks", "dec": "decoder_blocks", "ffn": "mlp", "self_attn": "attn"}

NameSpec = str | Iterable[str] | Callable[[str], bool] | None


class LayerIndex(int):
    """A block's index that is also callable, ``hook.layer() == hook.layer``, as TransformerLens has it."""

    def __call__(self) -> int:
        return int(self)


@dataclass(frozen=True, eq=False)
class HookPoint:
    """One place in a model where a hook may read or replace a tensor; hook functions receive it. ``layer``:
    the block's index (also callable) or None; ``module``: the :class:`~glassformer.nn.taps.Tap` (which declares
    the tensor's ``head_axis`` and ``position_axis``); ``owner``: the module whose forward runs it (the attention
    for ``hook_q``)."""

    name: str
    short: str
    layer: int | None
    stack: str | None
    module: Tap
    owner: nn.Module

    @property
    def kind(self) -> str:
        """The short name without "cross_": "pattern" for self- and cross-attention alike."""
        return self.short.removeprefix("cross_")

    def show(self, x: torch.Tensor) -> torch.Tensor:
        """The model's tensor in the layout hooks see (TransformerLens's): RoPE'd q/k as (B, T, h, hd), and
        back (the swap is its own inverse)."""
        return x.transpose(1, 2) if self.module.heads_first else x

    def __repr__(self) -> str:
        return f"HookPoint({self.name!r})"


def transformer_lens_name(path: str) -> str:
    """A tap's module path as TransformerLens names the point: "blocks.0.self_attn.hook_q" -> "blocks.0.attn.hook_q",
    "embeddings.hook_embed" -> "hook_embed", "dec.0.ffn.hook_pre" -> "decoder_blocks.0.mlp.hook_pre"."""
    parts = path.split(".")
    parts = parts[1:] if parts[0] == "embeddings" else parts
    decoder = parts[0] == "dec"  # an encoder-decoder's decoder keeps "self_attn" beside "cross_attn"
    return ".".join(p if decoder and p == "self_attn" else RENAMED.get(p, p) for p in parts)


def _short(name: str, owner: nn.Module) -> str:
    """The short name of a full one: "q", "cross_q", "ln1" (a norm's normalized vector), "ln1_scale", "embed"."""
    parts = name.split(".")
    leaf = parts[-1].removeprefix("hook_")
    if isinstance(owner, NormTaps):
        return parts[-2] + ("" if leaf == "normalized" else f"_{leaf}")
    return f"cross_{leaf}" if len(parts) > 1 and parts[-2] == "cross_attn" else leaf


def _points(root: nn.Module) -> list[HookPoint]:
    """Every tap under ``root``, in the module tree's order, as a :class:`HookPoint`."""
    points = []
    for path, module in root.named_modules():
        if not isinstance(module, Tap):
            continue
        owner = root.get_submodule(path.rpartition(".")[0])  # "" for a tap of the root itself
        name = transformer_lens_name(path)
        parts = name.split(".")
        stack, layer = (parts[0], LayerIndex(parts[1])) if len(parts) > 2 and parts[1].isdigit() else (None, None)
        points.append(HookPoint(name, _short(name, owner), layer, stack, module, owner))
    return points


def hook_points(model: nn.Module) -> dict[str, HookPoint]:
    """Every hook point of a TransformerLM or EncoderDecoder, {full name: :class:`HookPoint`}, in the order
    a forward reaches them; points a configuration lacks (``hook_rot_q`` without RoPE...) are absent. An
    EncoderDecoder's embeddings serve both stacks, so their taps (which would fire twice under one name) are
    left out."""
    if not isinstance(model, (TransformerLM, EncoderDecoder)):
        raise ArgumentTypeError(f"model must be a glassformer TransformerLM or EncoderDecoder, got "
                                f"{type(model).__name__}")
    points = _points(model)
    if isinstance(model, EncoderDecoder):
        points = [p for p in points if not p.name.startswith("hook_") and not p.name.startswith("embed_ln.")]
    return {p.name: p for p in points}


@functools.cache
def _reference_names() -> tuple[dict[str, str], dict[str, str]]:
    """({short: full name} of the points outside blocks, {short: name inside a block}), read from models built
    on the meta device (no memory, no random numbers) with every optional part."""
    with torch.device("meta"):
        config = ModelConfig(vocab_size=2, d_model=2, n_heads=1, n_layers=1, d_ff=2, pos="learned", n_token_types=2,
                             embed_norm=True)
        models = [TransformerLM(config), EncoderDecoder(config.replace(arch="encoder-decoder", n_enc=1, n_dec=1))]
        block = TransformerBlock(2, 1, 2, cross=True, activation="swiglu", rope=True)
    outside = {p.short: p.name for m in models for p in _points(m) if p.layer is None}
    return outside, {p.short: p.name for p in _points(block)}


def act_name(short: str, layer: int | None = None, stack: str = "blocks") -> str:
    """The full hook name of a short one, as TransformerLens's ``utils.get_act_name`` gives it:
    ``act_name("pattern", 0)`` -> "blocks.0.attn.hook_pattern"; ``act_name("embed")`` -> "hook_embed".
    A short name no block has is a block's own point: ``act_name("extra", 1)`` -> "blocks.1.hook_extra"."""
    outside, in_block = _reference_names()
    if short in outside:
        return outside[short]
    check_choice("stack", stack, STACKS)
    if layer is None:
        raise GlassformerError(f"{short!r} is a per-layer hook point: give its layer")
    name = in_block.get(short, f"hook_{short}")
    if STACKS[stack] == "decoder_blocks" and name.startswith("attn."):
        name = "self_" + name
    return f"{STACKS[stack]}.{layer}.{name}"


# TransformerLens's ``get_act_name`` spellings: other names of a point, and of the part of a block it is in.
_TL_ALIASES = {"attn": "pattern", "attn_logits": "attn_scores", "key": "k", "query": "q", "value": "v",
               "mlp_pre": "pre", "mlp_mid": "mid", "mlp_post": "post"}
_TL_PARTS = {"a": "attn", "attention": "attn", "m": "mlp", "b": "", "block": "", "blocks": ""}
_TL_ATTN = {"q", "k", "v", "z", "rot_q", "rot_k", "result", "pattern", "attn_scores"}
_TL_MLP = {"pre", "post", "mid", "pre_linear"}


def get_act_name(name: str, layer: int | None = None, layer_type: str | None = None) -> str:
    """TransformerLens's ``utils.get_act_name`` with its spellings: ``get_act_name("k", 6, "a")`` ->
    "blocks.6.attn.hook_k", ``get_act_name("k6")``, ``get_act_name("scale4ln1")`` -> "blocks.4.ln1.hook_scale",
    ``get_act_name("attn", 0)`` -> "blocks.0.attn.hook_pattern". A name glassformer has no point for (in any
    model it builds) is a GlassformerError naming the closest ones; :func:`act_name` takes glassformer's short names."""
    if not isinstance(name, str) or not name:
        raise ArgumentTypeError(f"get_act_name's name must be a non-empty string, got {name!r}")
    if layer is not None and (isinstance(layer, bool) or not str(layer).isdigit()):
        raise ArgumentTypeError(f"get_act_name's layer must be a block index (int >= 0), got {layer!r}")
    outside, in_block = _reference_names()
    known_in_block = set(in_block.values())
    if ("." in name or name.startswith("hook_")) and layer is None and layer_type is None:
        full = name  # a full name already
    else:
        match = re.fullmatch(r"([a-z_]+?)(\d+)([a-z]?.*)", name)
        if match is not None:
            name, layer, layer_type = match.group(1), match.group(2), match.group(3) or None
        name = _TL_ALIASES.get(name, name)
        part = "attn" if name in _TL_ATTN else "mlp" if name in _TL_MLP else _TL_PARTS.get(layer_type, layer_type)
        inner = f"{part}.hook_{name}" if part else f"hook_{name}"
        full = (f"blocks.{int(layer)}.{inner}" if layer is not None
                else f"ln_final.{inner}" if name in ("scale", "normalized") else inner)
    parts = full.split(".")
    inside = len(parts) > 2 and parts[0] == "blocks" and parts[1].isdigit() and ".".join(parts[2:]) in known_in_block
    if full in outside.values() or inside:
        return full
    known = [*outside.values(), *(f"blocks.0.{v}" for v in known_in_block)]
    close = difflib.get_close_matches(full, known, n=3)
    hint = f"; closest: {', '.join(close)}" if close else ""
    raise GlassformerError(f"get_act_name({name!r}, {layer!r}, {layer_type!r}) gives {full!r}, which is no "
                           f"glassformer hook point{hint}")


def resolve(points: dict[str, HookPoint], names: NameSpec) -> list[HookPoint]:
    """The hook points (of :func:`hook_points`) that ``names`` selects, in forward order: None (all but the
    per-head forms computed only on demand, ``Tap.on_demand``, selected by name only), a full or short name,
    a list of those, or a function name -> bool. An unknown name is an error naming the closest known ones."""
    if names is None:
        return [p for p in points.values() if not p.module.on_demand]
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
