"""prepare_run: from a TrainConfig to the tokenizer, the batches and a fresh model."""

import itertools
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..budget import check_evaluation_fits, check_threads, check_training_fits
from ..data import LMBatches, Seq2SeqBatches, encode_files, encode_pairs, iter_pairs, iter_text, split_ids
from ..models import build_model
from ..progress import quiet
from ..tokenizers import Tokenizer, make_tokenizer
from .checkpoint import TOKENIZER, check_run_dir, find_resumable
from .config import TrainConfig


@dataclass
class Run:
    """The pieces a :class:`~glassformer.training.Trainer` needs: a fresh model, the tokenizer, the batches."""

    model: nn.Module
    tokenizer: Tokenizer
    batches: LMBatches | Seq2SeqBatches


def _tokenizer(config: TrainConfig, texts: itertools.chain) -> Tokenizer:
    """The run's tokenizer: reloaded from the checkpoint a resumed run continues from, else fitted on ``texts``."""
    found = find_resumable(config.out_dir) if config.resume else None
    if found is not None:
        return Tokenizer.load(found / TOKENIZER)
    return make_tokenizer(config.tokenizer, texts, config.needed_specials(), config.tokenizer_vocab_size)


def _check_fits(config: TrainConfig, vocab_size: int, batches: LMBatches | Seq2SeqBatches | None = None) -> None:
    """Refuse (before allocating) a run, or (given ``batches``) its evaluation batch, that cannot fit."""
    if config.num_threads:
        check_threads(config.num_threads)
    world = os.environ.get("WORLD_SIZE", "1")  # torchrun's; each process holds its share of the batch
    processes = int(world) if world.isdigit() and int(world) > 0 else 1
    check_training_fits(config.model_config(vocab_size), config.batch_size, config.block_size, config.grad_accum,
                        config.max_memory, processes, sharded=config.parallel == "fsdp",
                        moments=1 if config.optimizer == "muon" else 2)  # Muon: one momentum on most weights
    if batches is not None and batches.val is not None and len(batches.val):
        # an evaluation batch holds eval_batch_size rows, or the fewer windows (pairs) the split has
        held = len(batches.val) if isinstance(batches, Seq2SeqBatches) else \
            max((len(batches.val) - 1) // config.block_size, 1)  # full windows (the tail comes alone)
        check_evaluation_fits(config.model_config(vocab_size), config.eval_batch_size,
                              min(config.eval_batch_size, held), config.block_size, config.max_memory, processes,
                              sharded=config.parallel == "fsdp")


def prepare_run(config: TrainConfig) -> Run:
    """Read the data, fit (or, when resuming, reload) the tokenizer, and build batches and model (from
    ``torch.manual_seed(config.seed)``: every process starts from the same weights)."""
    with quiet(not config.progress):
        return _prepare(config)


def _prepare(config: TrainConfig) -> Run:
    config.check_data()
    check_run_dir(config.out_dir)  # a user's file where the run writes: refused before anything is read or written
    # before reading any data: the run must fit with the smallest vocabulary its tokenizer can have
    _check_fits(config, config.tokenizer_vocab_size or len(config.needed_specials()) + 1)
    if config.watch:  # the microscope's probe too (watch.probe_length, probe_batch): before the token cache is made
        from ..interpret.microscope import check_watch  # (as the Trainer imports it: only for a watched run)

        smallest = config.tokenizer_vocab_size or len(config.needed_specials()) + 1
        check_watch(config.watch, config.model_config(smallest), config.max_memory)
    if config.objective == "seq2seq":
        has_val = config.val_pairs or (config.val_src and config.val_tgt)

        def pairs() -> itertools.chain:  # streamed from the files each time (no list of every sentence)
            val = iter_pairs(config.val_src, config.val_tgt, config.val_pairs) if has_val else ()
            return itertools.chain(iter_pairs(config.src, config.tgt, config.pairs), val)
        # the tokenizer sees every source, then every target (train, then val), as it always did
        tokenizer = _tokenizer(config, itertools.chain((s for s, _ in pairs()), (t for _, t in pairs())))
        train = encode_pairs(iter_pairs(config.src, config.tgt, config.pairs), tokenizer, config.block_size)
        val = encode_pairs(iter_pairs(config.val_src, config.val_tgt, config.val_pairs) if has_val else (),
                           tokenizer, config.block_size)
        batches: LMBatches | Seq2SeqBatches = Seq2SeqBatches(train, val, tokenizer.pad_id, config.seed)
    else:
        texts = itertools.chain.from_iterable(iter_text(f) for f in config.data + config.val_data)
        tokenizer = _tokenizer(config, texts)
        cache = config.cache_dir or str(Path(config.out_dir) / "cache")
        ids = encode_files(config.data, tokenizer, cache)
        train_ids, val_ids = (ids, encode_files(config.val_data, tokenizer, cache)) if config.val_data else \
            split_ids(ids, config.val_fraction)
        batches = LMBatches(config.objective, train_ids, val_ids if len(val_ids) else None, config.block_size,
                            config.seed, mask_id=tokenizer.mask_id, vocab_size=tokenizer.vocab_size,
                            special_ids=list(tokenizer.special_tokens.values()), mask_prob=config.mask_prob)
    _check_fits(config, tokenizer.vocab_size, batches)
    torch.manual_seed(config.seed)
    return Run(build_model(config.model_config(tokenizer.vocab_size)), tokenizer, batches)
