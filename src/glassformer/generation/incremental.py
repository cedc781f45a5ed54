"""Feed a model one new token per row and get next-token logits: with a KV cache, or by recomputing.

The search loops (greedy, sampling, beam) only see four calls: ``start() -> logits``,
``append(tokens)``, ``next_logits() -> logits`` and ``reorder(rows)``. Everything model-specific lives here:

- left padding: a row's padding is masked out of attention and its positions count only its real
  tokens, so a padded row computes exactly what it would alone;
- prefix-LM: the prompt's prefix is encoded bidirectionally in ``start``, later tokens causally;
- encoder-decoder: the source is encoded once; cross-attention keys/values are cached once;
- the context window: a model sees at most ``window`` tokens (``config.max_len``). When a sequence
  grows past it, the oldest tokens are dropped and the window is recomputed from scratch with
  positions counted from its start (nanoGPT's crop), so cached and uncached runs stay identical.
"""

from __future__ import annotations

import torch

from ..errors import GlassformerError, check_token_ids
from ..nn.masks import padding_mask
from ..runtime.decode import LeanStep, StaticSteps, static_mode
from .protocol import Generative

STATIC_POSITIONS = 4096
"""A cache that will need at most this many positions is allocated at once (a static cache: no
reallocation while decoding, fixed addresses); a longer one grows with the tokens generated."""


def left_pad_positions(pad: torch.Tensor) -> torch.Tensor:
    """Positions 0, 1, ... of each row's real tokens; padding gets 0. pad (B, T) bool -> (B, T) long."""
    return ((~pad).long().cumsum(dim=1) - 1).clamp(min=0)


class IncrementalDecoder:
    """Next-token logits for a batch of sequences that grow by one token per row per step.

    Args:
        model: a :class:`~glassformer.generation.protocol.DecoderOnly` model (TransformerLM) or an
            :class:`~glassformer.generation.protocol.EncoderDecoderModel` (in eval mode, under
            ``torch.inference_mode``); only the methods those protocols list are called.
        ids: (B, T) prompt tokens (decoder-only) or decoder start tokens (encoder-decoder).
        pad: (B, T) bool, True = left padding; None when no row is padded.
        max_new_tokens: how many tokens will at most be appended (a limit: the token buffers start
            small and double as tokens arrive, so memory follows what is generated, not this number).
        use_cache: keep keys/values in a :class:`KVCache` (True) or recompute every step (False).
        prefix_len: prefix-LM only: (B,) prefix lengths counted in real (unpadded) tokens.
        memory, src_pad: encoder-decoder only: the encoder output (B, S, d) and its padding.

    ``ids`` are checked once, here (ids out of the vocabulary are an error); the model then runs
    without re-checking them or the tokens appended (chosen from its own logits), so a step never
    waits for a GPU. With a cache, a decoder-only model's one-token steps take
    :class:`~glassformer.runtime.decode.LeanStep` (the same numbers with less Python) while no hook is set.
    """

    def __init__(self, model: Generative, ids: torch.Tensor, pad: torch.Tensor | None, max_new_tokens: int, *,
                 use_cache: bool = True, prefix_len: torch.Tensor | None = None,
                 memory: torch.Tensor | None = None, src_pad: torch.Tensor | None = None) -> None:
        check_token_ids(ids, model.config.vocab_size)
        self.model, self.use_cache = model, use_cache
        self.seq2seq = memory is not None
        self.memory, self.src_pad = memory, src_pad
        B, T = ids.shape
        self.window = model.config.max_len
        total = T + max_new_tokens
        self.limit = total  # the most columns ``tokens`` will ever need
        start = min(total, T + 64)  # grown by doubling in ``append``
        self.tokens = torch.zeros(B, start, dtype=torch.long, device=ids.device)  # every token so far
        self.tokens[:, :T] = ids
        self.pad = None
        if pad is not None:
            self.pad = torch.zeros(B, start, dtype=torch.bool, device=ids.device)
            self.pad[:, :T] = pad
        self.length = T
        # prefix-LM: the prefix ends at this column of ``tokens`` (left padding shifts it right)
        self.prefix_end = None
        if prefix_len is not None:
            n_pad = pad.sum(dim=1) if pad is not None else torch.zeros_like(prefix_len)
            self.prefix_end = n_pad + prefix_len
        self.capacity = min(total, self.window)
        self.lean = LeanStep(model) if use_cache and not self.seq2seq and LeanStep.supports(model) else None
        self.slots = torch.arange(self.capacity, device=ids.device)  # position p of an unpadded row: slots[p:p + 1]
        self.cache = None
        self.static: StaticSteps | None = None  # fixed-shape steps (runtime.decode.set_static_steps)
        self.window_start = 0  # first column the model sees

    # ------------------------------------------------------------------ public
    def sequences(self) -> torch.Tensor:
        """(B, length) every token so far, padding included."""
        return self.tokens[:, :self.length]

    def padding(self) -> torch.Tensor | None:
        """(B, length) True at left padding, or None."""
        return None if self.pad is None else self.pad[:, :self.length]

    def start(self) -> torch.Tensor:
        """Run the prompt; return the logits (B, V) for the first new token."""
        return self._run_window()

    def append(self, tokens: torch.Tensor) -> None:
        """Append ``tokens`` (B,), one per row, without running the model."""
        if self.length == self.tokens.shape[1]:
            self._grow()
        self.tokens[:, self.length] = tokens
        self.length += 1

    def next_logits(self) -> torch.Tensor:
        """Run the model on the last appended token; return the logits (B, V) for the token after it."""
        if not self.use_cache or self.length - self.window_start > self.window:
            return self._run_window()
        return self._forward(self.tokens[:, self.length - 1:self.length], self.length - 1)

    def reorder(self, rows: torch.Tensor) -> None:
        """Continue from rows ``rows`` (B,) of the batch (beam search keeps its best beams)."""
        self.tokens = self.tokens.index_select(0, rows)
        if self.pad is not None:
            self.pad = self.pad.index_select(0, rows)
        if self.prefix_end is not None:
            self.prefix_end = self.prefix_end.index_select(0, rows)
        if self.memory is not None:
            self.memory = self.memory.index_select(0, rows)
            self.src_pad = None if self.src_pad is None else self.src_pad.index_select(0, rows)
        for layer in self.cache or []:
            layer.reorder(rows)

    # ------------------------------------------------------------------ internals
    def _grow(self) -> None:
        """Double the token (and padding) buffers, up to ``limit`` columns."""
        if self.length >= self.limit:
            raise GlassformerError(f"cannot append beyond {self.limit} tokens (the prompt + max_new_tokens)")
        size = min(self.limit, 2 * self.tokens.shape[1])
        B, old = self.tokens.shape
        tokens = self.tokens.new_zeros(B, size)
        tokens[:, :old] = self.tokens
        self.tokens = tokens
        if self.pad is not None:
            pad = self.pad.new_zeros(B, size)
            pad[:, :old] = self.pad
            self.pad = pad

    def _run_window(self) -> torch.Tensor:
        """Recompute the last ``window`` tokens from scratch (fresh cache when caching)."""
        self.window_start = max(0, self.length - self.window)
        if self.use_cache:
            B = self.tokens.shape[0]
            static = self.capacity <= STATIC_POSITIONS
            if self.seq2seq:
                self.cache = self.model.new_cache(B, self.capacity, self.memory.shape[1], preallocate=static)
            else:
                self.cache = self.model.new_cache(B, self.capacity, preallocate=static)
        return self._forward(self.tokens[:, self.window_start:self.length], self.window_start)

    def _forward(self, new: torch.Tensor, first: int) -> torch.Tensor:
        """Logits (B, V) after feeding ``new`` (B, T), the tokens of columns first .. first + T - 1."""
        start = self.window_start
        cache = self.cache if self.use_cache else None
        pad = None if self.pad is None else self.pad[:, start:self.length]  # every key: cached + new
        if self.seq2seq:
            memory = self.memory if cache is None or cache[0].cross_attn.length == 0 else None
            return self.model.decode(new, memory, self.src_pad, cache=cache, check_ids=False)[:, -1].float()
        if cache is not None and new.shape[1] == 1 and StaticSteps.applies(self.lean, cache, pad):
            if self.static is None or self.static.cache is not cache:  # one per cache (a window rerun makes a new one)
                self.static = StaticSteps(self.lean, cache, new.shape[0], graphs=static_mode() == "graphs")
            return self.static(new, first - self.window_start)
        if cache is not None and new.shape[1] == 1 and self.lean is not None and self.lean.usable():
            return self._lean_step(new, first, pad)
        positions = None
        if pad is not None:  # positions count real tokens only; (B, T) for the new columns
            positions = left_pad_positions(pad)[:, first - start:]
        prefix = None
        if self.prefix_end is not None:  # in window coordinates; only the first call's mask uses it
            prefix = (self.prefix_end - start).clamp(0, self.length - start)
        hidden = self.model.hidden_states(new, pad, prefix, positions=positions, cache=cache, check_ids=False)
        return self.model.logits(hidden[:, -1:])[:, 0].float()

    def _lean_step(self, new: torch.Tensor, first: int, pad: torch.Tensor | None) -> torch.Tensor:
        """Logits (B, V) after feeding one token per row, ``new`` (B, 1) at column ``first``, through
        :class:`LeanStep` (positions and the padding mask as the model's forward makes them)."""
        slot = first - self.window_start  # this token's slot in the window (= the cache's length)
        mask = None
        if pad is None:
            positions = self.slots[slot:slot + 1]  # (1,)
        else:  # real tokens counted per row; the largest position is at most the slot
            positions = left_pad_positions(pad)[:, slot:]  # (B, 1)
            mask = padding_mask(pad)  # (B, 1, 1, slot + 1)
        hidden = self.lean(new, positions, slot + 1, self.cache, mask)  # (B, 1, d)
        return self.model.logits(hidden)[:, 0].float()

