"""Batch sources for the four objectives: ``global_batch(step)`` for training, ``eval_batches()`` for a split.

A batch is a dict of tensors, the example first, always with ``labels`` (-100 = no loss). A step's
global batch comes from a generator seeded by (seed, step): the same for one process or N, and after a resume."""

from collections.abc import Iterator, Sequence
from itertools import islice

import numpy as np
import torch

from ..errors import GlassformerError
from .mlm import mask_tokens
from .prefix import prefix_lm_labels
from .seq2seq import EncodedPairs, collate_pairs, length_batches
from .windows import check_length, consecutive_windows, random_windows, step_generator

OBJECTIVES = ("clm", "mlm", "prefix", "seq2seq")
Batch = dict[str, torch.Tensor]
EVAL_SEED = 1234  # masks and prefix lengths of evaluation batches are fixed, so scores compare across runs


class LMBatches:
    """Windows of a token array for "clm" {"ids", "labels"}, "mlm" {"ids" (masked), "labels"} or
    "prefix" {"ids", "prefix_len", "labels"}. ``train``/``val``: token arrays, or shard views (data/shards.py).
    ``rows`` (a, b): this process's rows of every global batch under torchrun; it reads only their windows
    (the other rows are zeros, never used), so each rank reads only its part of the corpus."""

    def __init__(self, objective: str, train: np.ndarray, val: np.ndarray | None, block_size: int,
                 seed: int, *, mask_id: int | None = None, vocab_size: int | None = None,
                 special_ids: Sequence[int] = (), mask_prob: float = 0.15, rows: tuple[int, int] | None = None):
        if objective not in ("clm", "mlm", "prefix"):
            raise GlassformerError(f"LMBatches objective must be 'clm', 'mlm' or 'prefix', got {objective!r}")
        if objective == "mlm" and (mask_id is None or vocab_size is None):
            raise GlassformerError("objective 'mlm' needs a tokenizer with a 'mask' special token")
        check_length(train, block_size, "the training split")
        if val is not None and len(val) < 2:
            raise GlassformerError(f"the validation split has {len(val)} tokens; it needs at least 2")
        self.objective, self.train, self.val, self.block_size, self.seed = objective, train, val, block_size, seed
        self.mask_id, self.vocab_size, self.mask_prob, self.special_ids = mask_id, vocab_size, mask_prob, special_ids
        self.rows = rows

    def _finish(self, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator) -> Batch:
        if self.objective == "clm":
            return {"ids": x, "labels": y}
        if self.objective == "prefix":
            prefix_len, labels = prefix_lm_labels(y, generator)
            return {"ids": x, "prefix_len": prefix_len, "labels": labels}
        inputs, labels = mask_tokens(x, mask_id=self.mask_id, vocab_size=self.vocab_size, generator=generator,
                                     prob=self.mask_prob, special_ids=self.special_ids)
        return {"ids": inputs, "labels": labels}

    def global_batch(self, step: int, batch_size: int) -> Batch:
        """The ``batch_size`` random windows of training step ``step``."""
        generator = step_generator(self.seed, step)
        x, y = random_windows(self.train, self.block_size, batch_size, generator, self.rows)
        return self._finish(x, y, generator)

    def eval_batches(self, batch_size: int, max_batches: int | None = None) -> Iterator[Batch]:
        """Consecutive windows covering the whole validation split (or its first ``max_batches``)."""
        if self.val is None:
            return
        generator = torch.Generator().manual_seed(EVAL_SEED)
        for x, y in islice(consecutive_windows(self.val, self.block_size, batch_size), max_batches):
            if self.objective == "prefix" and x.shape[1] < 2:
                continue
            yield self._finish(x, y, generator)


class Seq2SeqBatches:
    """Length-bucketed batches {"src", "src_pad", "tgt_in", "tgt_pad", "labels"} of encoded (source, target)
    pairs for "seq2seq"; epoch e's batches come from a generator seeded by (seed, e)."""

    def __init__(self, train: Sequence[tuple[list[int], list[int]]],
                 val: Sequence[tuple[list[int], list[int]]] | None, pad_id: int, seed: int):
        if not train:
            raise GlassformerError("no training pairs")
        self.objective = "seq2seq"
        self.train, self.val = EncodedPairs.of(train), EncodedPairs.of(val or [])
        self.pad_id, self.seed = pad_id, seed
        self._epoch: tuple[int, int, list[list[int]]] | None = None

    def _batches(self, epoch: int, batch_size: int) -> list[list[int]]:
        if self._epoch is None or self._epoch[:2] != (epoch, batch_size):
            lengths = self.train.lengths()  # (target, source) lengths: see length_batches
            full = [b for b in length_batches(lengths, batch_size, step_generator(self.seed, -1 - epoch))
                    if len(b) == batch_size]
            if not full:
                raise GlassformerError(f"only {len(self.train)} training pairs, fewer than batch_size={batch_size}")
            self._epoch = (epoch, batch_size, full)
        return self._epoch[2]

    def global_batch(self, step: int, batch_size: int) -> Batch:
        """Batch ``step`` of the epoch it falls in (only full batches are used, so shapes stay fixed)."""
        per_epoch = len(self._batches(0, batch_size))
        rows = self._batches(step // per_epoch, batch_size)[step % per_epoch]
        return collate_pairs([self.train[i] for i in rows], self.pad_id)

    def eval_batches(self, batch_size: int, max_batches: int | None = None) -> Iterator[Batch]:
        """Every validation pair once, in batches of similar length."""
        sums = [t + s for t, s in self.val.lengths()]
        order = sorted(range(len(self.val)), key=sums.__getitem__)
        for start in islice(range(0, len(order), batch_size), max_batches):
            yield collate_pairs([self.val[i] for i in order[start:start + batch_size]], self.pad_id)


def take_rows(batch: Batch, start: int, stop: int) -> Batch:
    """Rows ``start:stop`` of every tensor in a batch (a rank's or a micro-step's share)."""
    return {key: value[start:stop] for key, value in batch.items()}
