"""Weight renaming between glassformer and another library, with errors that name the tensors.

A converter is a list of :class:`Rule` (one of our tensors <- one or more of theirs), used both ways.
"""

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch

from ..errors import GlassformerError


@dataclass(frozen=True)
class Rule:
    """glassformer tensor ``ours`` <-> foreign tensor(s) ``theirs``.

    Attributes:
        theirs: their names; several (q, k, v) are concatenated along dim 0, split back by ``sizes`` (rows each).
        layout: "same"; "transposed" (GPT-2's Conv1D); "row" (a (1, n) row); "heads_qkv": (q; k; v) stored
            head by head for ``heads`` heads (GPT-NeoX's ``query_key_value``).
        aliases: their names of tensors tied to ``theirs[0]``: checked equal on import, not written on export.
    """

    ours: str
    theirs: tuple[str, ...]
    sizes: tuple[int, ...] = ()
    layout: str = "same"
    aliases: tuple[str, ...] = ()
    heads: int = 0


def rule(ours: str, *theirs: str, sizes: tuple[int, ...] = (), layout: str = "same",
         aliases: Iterable[str] = (), heads: int = 0) -> Rule:
    """Shorthand for :class:`Rule` with ``theirs`` as positional arguments."""
    return Rule(ours, theirs, tuple(sizes), layout, tuple(aliases), heads)


def linear_rules(ours: str, theirs: str, bias: bool = True, layout: str = "same", heads: int = 0) -> list[Rule]:
    """The rules of a linear or norm layer: ``ours.weight`` <- ``theirs.weight`` in ``layout``, and the biases
    when ``bias`` (laid out as the weight only for "heads_qkv")."""
    out = [rule(f"{ours}.weight", f"{theirs}.weight", layout=layout, heads=heads)]
    bias_layout = "heads_qkv" if layout == "heads_qkv" else "same"
    return out + [rule(f"{ours}.bias", f"{theirs}.bias", layout=bias_layout, heads=heads)] if bias else out


def _regroup(t: torch.Tensor, groups: tuple[int, int]) -> torch.Tensor:
    """Rows (a*b*n, ...) as (a, b, n, ...) -> (b, a, n, ...), flattened back: (q; k; v) by part <-> by head."""
    return t.reshape(*groups, -1, *t.shape[1:]).transpose(0, 1).reshape(t.shape)


def _to_ours(t: torch.Tensor, r: Rule) -> torch.Tensor:
    if r.layout == "heads_qkv" and t.shape[0] % (3 * r.heads) == 0:  # (h, 3, hd, ...) -> (3, h, hd, ...)
        return _regroup(t, (r.heads, 3))  # (other sizes: left for the shape check to name)
    return t.t() if r.layout == "transposed" else t.reshape(-1) if r.layout == "row" else t


def _to_theirs(t: torch.Tensor, r: Rule) -> torch.Tensor:
    if r.layout == "heads_qkv":  # (3, h, hd, ...) -> (h, 3, hd, ...)
        return _regroup(t, (3, r.heads))
    return t.t() if r.layout == "transposed" else t.reshape(1, -1) if r.layout == "row" else t


def _names(names: list[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def import_state(rules: list[Rule], theirs: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Size],
                 ignore: Iterable[str] = (), source: str = "checkpoint") -> dict[str, torch.Tensor]:
    """Our state dict {name: tensor} from a foreign one ``theirs``.

    ``expected``: our shapes, each produced by a rule; ``ignore``: regexes of their tensors dropped; ``source``:
    their side, in messages. ValueError names missing, unplaced, untied and wrongly shaped tensors.
    """
    missing = sorted({n for r in rules for n in r.theirs if n not in theirs})
    if missing:
        raise GlassformerError(f"{source} is missing tensor(s) {_names(missing)}")
    used, out, problems = set(), {}, []
    for r in rules:
        quantized = [f"{n} ({str(theirs[n].dtype).removeprefix('torch.')})" for n in r.theirs
                     if not theirs[n].is_floating_point()]
        if quantized:  # an int8 or bool weight copied into a float parameter would be silently wrong
            raise GlassformerError(f"{source}: weight(s) {_names(quantized)} are not floating point; glassformer "
                                   "reads float weights only (no dequantization): export the model in float")
        parts = [_to_ours(theirs[n], r) for n in r.theirs]
        tensor = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
        used.update(r.theirs)
        first = theirs[r.theirs[0]]
        for alias in [a for a in r.aliases if a in theirs]:
            used.add(alias)
            if not (first.is_meta or theirs[alias].is_meta) and not torch.equal(theirs[alias], first):  # meta: shapes
                problems.append(f"{alias} differs from {r.theirs[0]} but glassformer ties them")
        want = expected[r.ours]  # a KeyError: a rule for a tensor glassformer lacks, a converter bug
        if tensor.shape != want:
            shapes = ", ".join(f"{n} {tuple(theirs[n].shape)}" for n in r.theirs)
            problems.append(f"shape mismatch: {shapes} -> {r.ours} {tuple(tensor.shape)}, "
                            f"but the config needs {tuple(want)}")
        out[r.ours] = tensor
    patterns = [re.compile(p) for p in ignore]
    extra = sorted(n for n in theirs if n not in used and not any(p.fullmatch(n) for p in patterns))
    if extra:
        problems.append(f"unexpected tensor(s) {_names(extra)}: glassformer has no place for them "
                        "(does config.json match the weights?)")
    if problems:
        raise GlassformerError(f"{source}: " + "; ".join(problems))
    return out


def export_state(rules: list[Rule], ours: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Their state dict from ours (tied aliases left out). Every one of our tensors must be used."""
    unused = sorted(set(ours) - {r.ours for r in rules})
    if unused:
        raise GlassformerError(f"glassformer tensor(s) {_names(unused)} have no counterpart in the export format")
    out = {}
    for r in rules:
        tensor = ours[r.ours]
        pieces = tensor.split(list(r.sizes), dim=0) if len(r.theirs) > 1 else (tensor,)
        for name, piece in zip(r.theirs, pieces, strict=True):
            out[name] = _to_theirs(piece, r).contiguous()
    return out
