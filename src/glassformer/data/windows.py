"""Windows of a token array: random ones for training, consecutive ones covering a split for evaluation."""

from collections.abc import Iterator

import numpy as np
import torch

from ..errors import GlassformerError


def step_generator(seed: int, step: int) -> torch.Generator:
    """A generator seeded by (seed, step): the batch of a step depends on nothing else, so a resumed
    run and a run on N processes draw exactly the batches of one uninterrupted single-process run."""
    return torch.Generator().manual_seed((seed * 1_000_003 + step) % (1 << 62))


def check_length(ids: np.ndarray, block_size: int, what: str = "corpus") -> None:
    """A ValueError when ``ids`` is shorter than one window of ``block_size`` + 1 tokens."""
    if len(ids) < block_size + 1:
        raise GlassformerError(f"{what} has {len(ids)} tokens, fewer than one window of block_size + 1 = "
                               f"{block_size + 1}; use more text or a smaller block_size")


def random_windows(ids: np.ndarray, block_size: int, batch_size: int, generator: torch.Generator,
                   rows: tuple[int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` windows of ids (N,) at uniformly random starts: x (B, T) inputs and y (B, T)
    next-token targets (``y[:, t] == x[:, t + 1]``), int64. ``rows`` (a, b): every start is drawn as
    always but only rows a:b are read (another process reads the rest; those rows stay 0)."""
    check_length(ids, block_size)
    starts = torch.randint(len(ids) - block_size, (batch_size,), generator=generator).tolist()
    first, stop = (min(rows[0], batch_size), min(rows[1], batch_size)) if rows is not None else (0, batch_size)
    read = np.zeros((batch_size, block_size + 1), dtype=np.int64)  # (B, T + 1)
    for row in range(first, stop):
        read[row] = ids[starts[row]:starts[row] + block_size + 1]
    windows = torch.from_numpy(read)
    return windows[:, :-1], windows[:, 1:]


def consecutive_windows(ids: np.ndarray, block_size: int,
                        batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Windows that predict every token of ``ids`` after the first exactly once, in batches (x, y) of
    shape (B, T): window k covers ids[kT : kT + T + 1]; a shorter last one comes alone, (1, L)."""
    check_length(ids, 1)
    T = block_size
    full = (len(ids) - 1) // T
    for first in range(0, full, batch_size):
        count = min(batch_size, full - first)
        rows = np.asarray(ids[first * T:(first + count) * T + 1]).astype(np.int64)
        yield torch.from_numpy(rows[:-1].reshape(count, T)), torch.from_numpy(rows[1:].reshape(count, T))
    tail = np.asarray(ids[full * T:]).astype(np.int64)
    if len(tail) > 1:
        tail = torch.from_numpy(tail)[None]
        yield tail[:, :-1], tail[:, 1:]
