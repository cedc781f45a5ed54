"""Activations of one hook point, streamed from a corpus through the model, and a shuffled buffer of them.
Each file's first ``1 - val_fraction`` of bytes is "train", the rest "val".
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pad_sequence

from ...errors import GlassformerError, MissingFileError
from ...io.checks import check_int, check_number
from ...models import EncoderDecoder, TransformerLM
from ...validate import check_choice
from ..hooks import hooks
from ..points import HookPoint, hook_points, resolve

MAX_READ = 1 << 20  # bytes read for one window at most: a file without enough text is an error, not a hang
SPLITS = ("train", "val")


class _Captured(Exception):
    """Raised by the capturing hook to stop the forward once the hooks' tensors are in hand."""


def hook_point(model: nn.Module, name: str) -> HookPoint:
    """The one hook point ``name`` of ``model`` whose tensor an SAE can read: (B, T, ...) per position
    (attention scores and patterns, and position embeddings, are refused)."""
    if not isinstance(name, str):
        raise GlassformerError(f"hook must be one hook point's full name, got {name!r}")
    found = resolve(hook_points(model), name)
    if len(found) != 1 or found[0].name != name:
        names = ", ".join(p.name for p in found[:3])
        raise GlassformerError(f"hook must be one hook point's full name (e.g. 'blocks.0.hook_resid_post'), "
                               f"got {name!r}, which selects {len(found)} points ({names}...)")
    point = found[0]
    if point.kind in ("attn_scores", "pattern"):
        raise GlassformerError(f"hook {name!r} holds attention weights (B, h, Tq, Tk), not one vector per "
                               "token; an SAE reads a per-token activation such as hook_z or hook_resid_post")
    if point.short == "pos_embed":
        raise GlassformerError(f"hook {name!r} is the same for every input (the position table); choose "
                               "hook_embed or a block's hook")
    return point


def hook_width(model: nn.Module, point: HookPoint) -> int:
    """d_in: the width of the hook's per-token vector (d_model, d_ff, or heads x head width)."""
    c = model.config
    if point.kind in ("q", "z", "rot_q"):
        return c.n_heads * c.head_dim
    if point.kind in ("k", "v", "rot_k"):
        return c.kv_heads * c.head_dim
    if point.kind in ("pre", "post", "pre_linear"):
        return c.d_ff
    return c.d_model


@dataclass
class InputBatch:
    """One batch of model inputs (``model(*args, **kwargs)``): ``tokens`` (B, T) the ids at the hook's
    positions; ``valid`` (B, T) False at padding; ``targets`` (B, T') the ids the logits predict (with
    ``target_valid``), or None when the input has no loss."""

    args: tuple
    kwargs: dict[str, Any]
    tokens: torch.Tensor
    valid: torch.Tensor
    targets: torch.Tensor | None = None
    target_valid: torch.Tensor | None = None
    loss_positions: slice = field(default_factory=lambda: slice(None))

    def loss(self, logits: torch.Tensor) -> torch.Tensor | None:
        """Mean cross-entropy of ``logits`` on this batch's targets (None when it has none)."""
        if self.targets is None:
            return None
        logits = logits[:, self.loss_positions]
        keep = self.target_valid if self.target_valid is not None else torch.ones_like(self.targets, dtype=torch.bool)
        return F.cross_entropy(logits[keep].float(), self.targets[keep])


class ActivationSource:
    """A hook's activations on pieces read at random places of plain text ``files`` (or of one prepared shards
    folder, whose train/val splits are used as they are, memory-mapped): windows of ``context``
    tokens for a TransformerLM (a prefix-LM's prefix: ``prefix_len``, default half; a bidirectional model's
    loss masks ``mlm_fraction``), ``source<TAB>target`` lines for an EncoderDecoder. ``hook`` may be a list
    of hook points of one width (a transcoder's MLP inputs and outputs): rows are then (N, len(hook), d_in)."""

    def __init__(self, model: nn.Module, tokenizer: Any, hook: str | list[str], files: list[str | Path], *,
                 context: int = 64, batch: int = 32, split: str = "train", val_fraction: float = 0.1,
                 seed: int = 0, prefix_len: int | None = None, mlm_fraction: float = 0.15):
        if not isinstance(model, (TransformerLM, EncoderDecoder)):
            raise GlassformerError(f"model must be a glassformer TransformerLM or EncoderDecoder, got "
                                   f"{type(model).__name__}")
        self.model, self.tokenizer = model.eval(), tokenizer
        self.several = isinstance(hook, (list, tuple))
        if self.several and not hook:
            raise GlassformerError("hook must name at least one hook point")
        self.points = [hook_point(model, name) for name in (hook if self.several else [hook])]
        self.point = self.points[0]
        self.d_in = hook_width(model, self.point)
        for point in self.points[1:]:
            if hook_width(model, point) != self.d_in:
                raise GlassformerError(f"hooks read together must have one width: {self.point.name!r} has "
                                       f"{self.d_in}, {point.name!r} has {hook_width(model, point)}")
        order = list(hook_points(model))
        self.last = max(self.points, key=lambda p: order.index(p.name)).name  # the forward stops after it
        self.encdec = isinstance(model, EncoderDecoder)
        self.context = check_int("context", context, 1 if self.encdec else 2, model.config.max_len)
        self.batch = check_int("batch", batch, 1, 1 << 16)
        check_choice("split", split, SPLITS)
        check_number("val_fraction", val_fraction, 0.0, 0.5)
        if split == "val" and val_fraction == 0:
            raise GlassformerError("val_fraction is 0, so there is no 'val' split to read")
        self.prefix_len = check_int("prefix_len", context // 2 if prefix_len is None else prefix_len, 1, self.context)
        self.mlm_fraction = check_number("mlm_fraction", mlm_fraction, 0.0, 1.0, low_open=True)
        if not files:
            raise GlassformerError("data must name at least one text file")
        self.ranges: list[tuple[Path, int, int]] = []
        self.tokens = self._shards(files, split) if not self.encdec else None
        for name in files if self.tokens is None else ():
            path = Path(name)
            if not path.is_file():
                raise MissingFileError(f"data file {str(path)!r} does not exist")
            if path.suffix == ".gz":
                raise GlassformerError(f"data file {str(path)!r} is compressed; the SAE reads files at random "
                                       "places, so decompress it first (gunzip -k)")
            size = path.stat().st_size
            cut = int(size * (1 - val_fraction))
            lo, hi = (0, cut) if split == "train" else (cut, size)
            if hi - lo > 0:
                self.ranges.append((path, lo, hi))
        if not self.ranges and self.tokens is None:
            raise GlassformerError(f"the data files hold no bytes for the {split!r} split")
        self.weights = torch.tensor([float(hi - lo) for _, lo, hi in self.ranges] or [1.0])
        self.generator = torch.Generator().manual_seed(int(seed))
        if self.encdec:
            for name in ("bos", "eos"):
                if getattr(tokenizer, f"{name}_id", None) is None:
                    raise GlassformerError(f"an EncoderDecoder's inputs need the tokenizer's {name} token")

    def _shards(self, files: list[str | Path], split: str) -> Any:
        """A prepared shards folder's ``split`` (data/shards.py), memory-mapped; None for text files."""
        from ...data.shards import looks_like_tokens, open_shards

        if len(files) != 1 or not looks_like_tokens(files[0]):
            return None
        shards = open_shards(files[0], self.tokenizer.vocab_size, self.tokenizer.to_dict())
        tokens = shards.train if split == "train" else shards.val
        if tokens is None or len(tokens) < self.context + 1:
            raise GlassformerError(f"shards {str(files[0])!r} hold fewer than context + 1 = {self.context + 1} "
                                   f"tokens in their {split!r} split")
        return tokens

    def _random_place(self) -> tuple[Path, int, int, int]:
        index = int(torch.multinomial(self.weights, 1, generator=self.generator))
        path, lo, hi = self.ranges[index]
        return path, lo, hi, lo + int(torch.randint(hi - lo, (1,), generator=self.generator))

    def _window(self) -> list[int]:
        """``context`` token ids from a random place (its first token, maybe cut, is dropped)."""
        if self.tokens is not None:  # shards: ids at a random token offset of the split
            start = int(torch.randint(len(self.tokens) - self.context, (1,), generator=self.generator))
            return [int(i) for i in self.tokens[start:start + self.context]]
        path, lo, hi, start = self._random_place()
        need = self.context + 1
        start = max(lo, min(start, hi - need))  # so that a short split can still give a window
        width = 8 * need + 64
        with open(path, "rb") as handle:
            while True:
                handle.seek(start)
                raw = handle.read(min(width, hi - start))
                ids = list(self.tokenizer.encode(raw.decode("utf-8", errors="ignore"), add_special_tokens=False))
                if len(ids) >= need:
                    return ids[1:need]
                if start + width >= hi or width >= MAX_READ:
                    if start > lo:  # too close to the end: read from the split's start instead
                        start, width = lo, 8 * need + 64
                        continue
                    raise GlassformerError(f"{str(path)!r} has too little text for windows of context="
                                           f"{self.context} tokens in its {hi - lo:,}-byte split")
                width *= 2

    def _line(self) -> tuple[str, str | None]:
        """One whole line after a random place (the split wraps around), split at its first TAB."""
        path, lo, hi, start = self._random_place()
        with open(path, "rb") as handle:
            for _ in range(64):
                handle.seek(start)
                if start > lo:
                    handle.readline(MAX_READ)  # the rest of the line we landed in
                line = b""
                while handle.tell() < hi and not line.strip():
                    line = handle.readline(MAX_READ)
                if line.strip():
                    text = line.decode("utf-8", errors="replace").rstrip("\r\n")
                    source, tab, target = text.partition("\t")
                    return source, (target if tab else None)
                start = lo  # ran past the split's end: wrap around
        raise GlassformerError(f"{str(path)!r} has no non-empty line in its split")

    def next_inputs(self) -> InputBatch:
        """The model inputs of one batch (draws from the stream)."""
        return self._encdec_inputs() if self.encdec else self._lm_inputs()

    def _lm_inputs(self) -> InputBatch:
        device = next(self.model.parameters()).device
        ids = torch.tensor([self._window() for _ in range(self.batch)]).to(device)  # (B, T)
        valid = torch.ones_like(ids, dtype=torch.bool)
        attn = self.model.config.attn
        if attn == "causal":
            return InputBatch((ids,), {}, ids, valid, ids[:, 1:], None, slice(None, -1))
        if attn == "prefix":
            p = self.prefix_len
            return InputBatch((ids,), {"prefix_len": p}, ids, valid, ids[:, p:], None, slice(p - 1, -1))
        mask_id = getattr(self.tokenizer, "mask_id", None)
        if mask_id is None:
            return InputBatch((ids,), {}, ids, valid)
        chosen = torch.rand(ids.shape, generator=self.generator) < self.mlm_fraction  # (B, T)
        masked = torch.where(chosen.to(device), torch.full_like(ids, mask_id), ids)
        return InputBatch((masked,), {}, masked, valid, ids, chosen.to(device))

    def _encdec_inputs(self) -> InputBatch:
        tok, n = self.tokenizer, self.context
        decoder = self.point.stack == "decoder_blocks" or self.point.short == "decoder_ln_final"
        sources, targets = [], []
        for _ in range(self.batch):
            source, target = self._line()
            if decoder and target is None:
                raise GlassformerError(f"hook {self.point.name!r} is in the decoder: each data line must be "
                                       "'source<TAB>target'")
            sources.append((tok.encode(source, add_special_tokens=False) + [tok.eos_id])[:n])
            targets.append(None if target is None else
                           ([tok.bos_id] + tok.encode(target, add_special_tokens=False) + [tok.eos_id])[:n + 1])
        pad_id = getattr(tok, "pad_id", None) or 0
        device = next(self.model.parameters()).device
        src, src_pad = _padded(sources, pad_id, device)
        if all(t is not None for t in targets):
            full, full_pad = _padded(targets, pad_id, device)
            tgt_in, tgt_pad = full[:, :-1], full_pad[:, :-1]
            out, out_valid = full[:, 1:], ~full_pad[:, 1:]
        else:
            tgt_in = torch.full((len(sources), 1), tok.bos_id, device=device)
            tgt_pad, out, out_valid = None, None, None
        tokens, pad = (tgt_in, tgt_pad) if decoder else (src, src_pad)
        return InputBatch((src, tgt_in), {"src_pad": src_pad, "tgt_pad": tgt_pad}, tokens, ~pad, out, out_valid)

    @torch.no_grad()
    def activations(self, inputs: InputBatch) -> torch.Tensor:
        """The hook's tensor for ``inputs`` as (B, T, d_in), or with several hooks (B, T, hooks, d_in) (the
        forward stops at the last one)."""
        seen: dict[str, torch.Tensor] = {}

        def capture(x: torch.Tensor, hook: HookPoint) -> None:
            seen[hook.name] = x.detach()
            if hook.name == self.last:
                raise _Captured

        try:
            with hooks(self.model, [(p.name, capture) for p in self.points]):
                self.model(*inputs.args, **inputs.kwargs)
        except _Captured:
            if all(p.name in seen for p in self.points):
                rows = [self.flat(seen[p.name]) for p in self.points]
                return torch.stack(rows, dim=2) if self.several else rows[0]
        raise GlassformerError(f"hook {self.last!r} did not fire for this input")

    def flat(self, x: torch.Tensor) -> torch.Tensor:
        """A hook's tensor (B, T, ...) as (B, T, d_in): per-head axes joined, as SAELens reads hook_z."""
        return x.reshape(*x.shape[:2], -1).float()

    def next_rows(self) -> torch.Tensor:
        """One batch's activations at every valid position: (N, d_in) rows (several hooks: (N, hooks, d_in)),
        N <= batch x context."""
        inputs = self.next_inputs()
        return self.activations(inputs)[inputs.valid]

    def state_dict(self) -> dict[str, Any]:
        """The stream's position (its generator's state)."""
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the stream from :meth:`state_dict`'s position."""
        self.generator.set_state(state["generator"])


def _padded(rows: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded (B, T) ids and (B, T) bool padding flags (True = padding)."""
    ids = pad_sequence([torch.tensor(r, dtype=torch.long) for r in rows], batch_first=True, padding_value=pad_id)
    pad = pad_sequence([torch.zeros(len(r), dtype=torch.bool) for r in rows], batch_first=True, padding_value=True)
    return ids.to(device), pad.to(device)


class ActivationBuffer:
    """Shuffled batches of activation rows (SAELens's mixing buffer): holds about ``size`` (>= 2 x
    batch_size) rows from ``source.next_rows()``, serves ``batch_size`` at a time from a random permutation,
    and tops up and reshuffles once fewer than half remain."""

    def __init__(self, source: Any, size: int, batch_size: int, seed: int = 0):
        self.source = source
        self.batch_size = check_int("batch_size", batch_size, 1, 1 << 24)
        self.size = check_int("buffer_size", size, 2 * batch_size, 1 << 28)
        self.generator = torch.Generator().manual_seed(int(seed))
        self.rows: torch.Tensor | None = None
        self.position = 0

    def _refill(self) -> None:
        parts = [] if self.rows is None else [self.rows[self.position:]]
        while sum(len(p) for p in parts) < self.size:
            parts.append(self.source.next_rows())
            if len(parts[-1]) == 0:
                raise GlassformerError("the activation source gave no rows (every position padded?)")
        rows = torch.cat(parts)
        self.rows = rows[torch.randperm(len(rows), generator=self.generator)]
        self.position = 0

    def next_batch(self) -> torch.Tensor:
        """(batch_size, d_in) rows, none served before."""
        if self.rows is None or len(self.rows) - self.position - self.batch_size < self.size // 2:
            self._refill()
        batch = self.rows[self.position:self.position + self.batch_size]
        self.position += self.batch_size
        return batch

    def peek(self) -> torch.Tensor:
        """The rows held now (filling the buffer first if empty), without serving them."""
        if self.rows is None:
            self._refill()
        return self.rows[self.position:]

    def state_dict(self) -> dict[str, Any]:
        """The unserved rows, the shuffling generator and the source's state: what resuming needs."""
        state = {"generator": self.generator.get_state(), "source": self.source.state_dict()}
        if self.rows is not None:
            state["rows"] = self.rows[self.position:].clone()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s buffer; the next batch is the one that would have come next."""
        self.generator.set_state(state["generator"])
        self.source.load_state_dict(state["source"])
        self.rows, self.position = state.get("rows"), 0


def geometric_median(x: torch.Tensor, iterations: int = 20) -> torch.Tensor:
    """The point minimising the summed distance to the rows of ``x`` (N, d) (Weiszfeld's iteration)."""
    point = x.mean(0)
    for _ in range(iterations):
        weights = 1 / (x - point).norm(dim=1).clamp_min(1e-8)
        point = (weights[:, None] * x).sum(0) / weights.sum()
    return point if bool(torch.isfinite(point).all()) else x.mean(0)
