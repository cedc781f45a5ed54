"""Feed a model one new token per row and get next-token logits: with a KV cache, or by recomputing.

Everything model-specific of decoding lives here: left padding, a prefix-LM's prefix, an encoder-decoder's
memory, and the context window: past ``config.max_len`` tokens the oldest are dropped and the window is
recomputed from scratch (nanoGPT's crop), so cached and uncached runs stay identical."""

import torch
import torch.nn.functional as F

from ..models.inputs import check_token_ids
from ..runtime.decode import StaticSteps, static_mode, wants_compiled
from .protocol import Generative

STATIC_POSITIONS = 4096
"""A cache needing at most this many positions is allocated at once (a static cache: fixed addresses)."""


def left_pad_positions(pad: torch.Tensor) -> torch.Tensor:
    """Positions 0, 1, ... of each row's real tokens; padding gets 0. pad (B, T) bool -> (B, T) long."""
    return ((~pad).long().cumsum(dim=1) - 1).clamp(min=0)


class IncrementalDecoder:
    """Next-token logits for a batch of sequences that grow by one token per row per step.

    ``ids`` (B, T): prompts (left-padded where ``pad`` is True) or decoder start tokens; they are
    checked once, here, so a step never waits for a GPU. ``prefix_len`` (B,): prefix-LM only, in
    real tokens; ``memory`` (B, S, d) and ``src_pad``: encoder-decoder only. ``compile`` (True, False or "auto",
    see :func:`glassformer.runtime.decode.wants_compiled`): one-token steps of an unpadded decoder-only batch
    through the model's own forward compiled by ``torch.compile`` on a static cache. The search loops call
    ``start``, ``append``, ``next_logits`` and ``reorder``."""

    def __init__(self, model: Generative, ids: torch.Tensor, pad: torch.Tensor | None, max_new_tokens: int, *,
                 use_cache: bool = True, prefix_len: torch.Tensor | None = None,
                 memory: torch.Tensor | None = None, src_pad: torch.Tensor | None = None,
                 compile: bool | str = False) -> None:
        check_token_ids(ids, model.config.vocab_size)
        self.model, self.use_cache, self.compile = model, use_cache, compile
        self.max_new_tokens = max_new_tokens
        self.seq2seq = memory is not None
        self.memory, self.src_pad = memory, src_pad
        T = ids.shape[1]
        self.window = model.config.max_len
        self.limit = T + max_new_tokens  # the most columns ``tokens`` will ever need
        room = (0, min(self.limit, T + 64) - T)  # columns after the prompt, grown by doubling in ``append``
        self.tokens = F.pad(ids, room).long()  # every token so far
        self.pad = None if pad is None else F.pad(pad.bool(), room)
        self.length = T
        # prefix-LM: the prefix ends at this column (left padding shifts it right)
        self.prefix_end = None if prefix_len is None else prefix_len + (0 if pad is None else pad.sum(dim=1))
        self.capacity = min(self.limit, self.window)
        self.cache = None
        self.static: StaticSteps | None = None  # fixed-shape steps (runtime.decode.set_static_steps)
        self.window_start = 0  # first column the model sees

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
        if self.length == self.tokens.shape[1]:  # double the buffers, up to ``limit`` columns
            more = (0, min(self.limit, 2 * self.length) - self.length)  # columns added
            self.tokens = F.pad(self.tokens, more)
            self.pad = None if self.pad is None else F.pad(self.pad, more)
        self.tokens[:, self.length] = tokens
        self.length += 1

    def next_logits(self) -> torch.Tensor:
        """Run the model on the last appended token; return the logits (B, V) for the token after it."""
        if not self.use_cache or self.length - self.window_start > self.window:
            return self._run_window()
        return self._forward(self.tokens[:, self.length - 1:self.length], self.length - 1)

    def reorder(self, rows: torch.Tensor) -> None:
        """Continue from rows ``rows`` (B,) of the batch (beam search keeps its best beams)."""
        for name in ("tokens", "pad", "prefix_end", "memory", "src_pad"):  # every per-row tensor held
            if getattr(self, name) is not None:
                setattr(self, name, getattr(self, name).index_select(0, rows))
        for layer in self.cache or []:
            layer.reorder(rows)

    def _run_window(self) -> torch.Tensor:
        """Recompute the last ``window`` tokens from scratch (fresh cache when caching)."""
        self.window_start = max(0, self.length - self.window)
        if self.use_cache:
            sizes = (self.capacity, self.memory.shape[1]) if self.seq2seq else (self.capacity,)  # (+ source length)
            self.cache = self.model.new_cache(len(self.tokens), *sizes, preallocate=self.capacity <= STATIC_POSITIONS)
        return self._forward(self.tokens[:, self.window_start:self.length], self.window_start)

    def _forward(self, new: torch.Tensor, first: int) -> torch.Tensor:
        """Logits (B, V) after feeding ``new`` (B, T), the tokens of columns first .. first + T - 1."""
        start = self.window_start
        cache = self.cache if self.use_cache else None
        pad = None if self.pad is None else self.pad[:, start:self.length]  # every key: cached + new
        if self.seq2seq:
            memory = self.memory if cache is None or cache[0].cross_attn.length == 0 else None
            return self.model.decode(new, memory, self.src_pad, cache=cache, check_ids=False)[:, -1].float()
        if self.static is not None and self.static.cache is cache and not self.static.hooked():
            return self.static(new, first - start)  # fixed shapes, decided once per cache
        if cache is not None and new.shape[1] == 1:
            B, capacity = new.shape[0], cache[0].capacity
            wanted = self.compile and wants_compiled(self.model, self.compile, B, capacity, self.max_new_tokens)
            choice = self.compile if wanted else False
            if StaticSteps.applies(self.model, cache, pad, compiled=wanted):  # one per cache (a window rerun anew)
                self.static = StaticSteps(self.model, cache, B, graphs=static_mode() == "graphs", compiled=choice)
                return self.static(new, first - start)
        positions = None if pad is None else left_pad_positions(pad)[:, first - start:]  # (B, T) real tokens only
        # prefix-LM: the prefix end in window coordinates (only the first call's mask uses it)
        prefix = None if self.prefix_end is None else (self.prefix_end - start).clamp(0, self.length - start)
        hidden = self.model.hidden_states(new, pad, prefix, positions=positions, cache=cache, check_ids=False)
        return self.model.logits(hidden[:, -1:])[:, 0].float()
