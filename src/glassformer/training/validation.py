"""Evaluation on the validation split: loss, perplexity and token accuracy."""

import contextlib
import math

import torch
from torch import nn

from ..data import LMBatches, Seq2SeqBatches
from ..io.progress import Heartbeat
from ..runtime.precision import Precision
from ..runtime.threads import LoadFollower
from .objectives import batch_loss


@torch.no_grad()
def evaluate(model: nn.Module, batches: LMBatches | Seq2SeqBatches, batch_size: int = 64,
             max_batches: int | None = None, device: torch.device | str = "cpu", char_level: bool = False,
             precision: Precision | None = None, progress: bool = True) -> dict[str, float]:
    """{"val_loss", "val_ppl", "val_accuracy", "val_tokens"} (and ``char_level``: "val_bits_per_char") on the
    validation split under ``precision``'s autocast; {} without validation data."""
    was_training = model.training
    model.eval()
    total = torch.zeros(3, dtype=torch.float64)  # loss sum, count, correct
    threads = LoadFollower()  # a long evaluation follows the load too, where the policy was asked for (runtime.tune)
    heartbeat = Heartbeat("evaluating", eval_batch_count(batches, batch_size, max_batches),
                          enabled=None if progress else False)
    try:
        for batch in batches.eval_batches(batch_size, max_batches):
            threads.tick()
            heartbeat.update(advance=1)  # one clock read; a line every ~10 s
            batch = {k: v.to(device) for k, v in batch.items()}
            with precision.autocast(device) if precision is not None else contextlib.nullcontext():
                parts = batch_loss(model, batch)
            total += torch.stack([parts.loss_sum.double(), parts.count.double(), parts.correct.double()]).cpu()
    finally:
        model.train(was_training)
    heartbeat.close()
    loss_sum, count, correct = total.tolist()
    if count == 0:
        return {}
    loss = loss_sum / count
    out = {"val_loss": loss, "val_ppl": math.exp(min(loss, 700.0)), "val_accuracy": correct / count,
           "val_tokens": int(count)}
    if char_level:
        out["val_bits_per_char"] = loss / math.log(2)
    return out


def eval_batch_count(batches: LMBatches | Seq2SeqBatches, batch_size: int,
                     max_batches: int | None = None) -> int | None:
    """How many batches ``batches.eval_batches(batch_size, max_batches)`` yields (None: an unknown source)."""
    if isinstance(batches, Seq2SeqBatches):
        count = -(-len(batches.val) // batch_size)
    elif isinstance(batches, LMBatches):
        if batches.val is None:
            return 0
        full = (len(batches.val) - 1) // batches.block_size
        count = -(-full // batch_size) + int(len(batches.val) - full * batches.block_size > 1)
    else:
        return None
    return count if max_batches is None else min(count, max_batches)
