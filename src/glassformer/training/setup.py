"""prepare_run: from a TrainConfig to the tokenizer, the batches and a fresh model."""

import hashlib
import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..data import LMBatches, Seq2SeqBatches, encode_files, encode_pairs, iter_pairs, iter_text, split_ids
from ..data.prepare import _fingerprint, prepare
from ..data.shards import looks_like_tokens, open_shards
from ..data.sources import list_sources
from ..errors import GlassformerError
from ..io.budget import check_evaluation_fits, check_threads, check_training_fits
from ..io.fileio import check_folder
from ..io.progress import quiet
from ..models import build_model
from ..tokenizers import Tokenizer, make_tokenizer
from .config import TrainConfig
from .run_dir import TOKENIZER, check_run_dir, find_resumable
from .trackers import parse_log


@dataclass
class Run:
    """The pieces a :class:`~glassformer.training.Trainer` needs: a fresh model, the tokenizer, the batches."""

    model: nn.Module
    tokenizer: Tokenizer
    batches: LMBatches | Seq2SeqBatches


def _resumed_tokenizer(config: TrainConfig) -> Tokenizer | None:
    """The tokenizer of the checkpoint a resumed run continues from (None for a fresh run, or with none to resume)."""
    found = find_resumable(config.out_dir) if config.resume else None
    return Tokenizer.load(found / TOKENIZER) if found is not None else None


def _tokenizer(config: TrainConfig, texts: itertools.chain) -> Tokenizer:
    """The run's tokenizer: the resumed checkpoint's, else fitted on ``texts``."""
    resumed = _resumed_tokenizer(config)
    if resumed is not None:
        return resumed
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


def _rank_rows(config: TrainConfig) -> tuple[int, int] | None:
    """Under torchrun, the rows of each global batch this process trains on (it reads only those windows)."""
    world, rank = os.environ.get("WORLD_SIZE", "1"), os.environ.get("RANK", "0")
    if not (world.isdigit() and rank.isdigit()) or int(world) < 2 or config.batch_size % int(world):
        return None
    share = config.batch_size // int(world)
    return int(rank) * share, (int(rank) + 1) * share


def _lm_data(config: TrainConfig) -> tuple[Tokenizer, Any, Any]:
    """(tokenizer, train ids, val ids or None) of a clm/mlm/prefix run: token shards read as they are; text
    files (plain, .gz, .zst; files, folders, globs) encoded into the run's token cache (as always); other
    formats (JSON lines, parquet, Arrow) prepared into shards there."""
    if len(config.data) == 1 and looks_like_tokens(config.data[0]):
        return _token_data(config)
    sources = list_sources(config.data)
    val_sources = list_sources(config.val_data) if config.val_data else []
    cache = Path(config.cache_dir or str(Path(config.out_dir) / "cache"))
    if all(s.kind == "text" for s in sources + val_sources):
        files = [str(s.path) for s in sources]
        val_files = [str(s.path) for s in val_sources]
        tokenizer = _tokenizer(config, itertools.chain.from_iterable(iter_text(f) for f in files + val_files))
        ids = encode_files(files, tokenizer, cache)
        if val_files:
            return tokenizer, ids, encode_files(val_files, tokenizer, cache)
        return (tokenizer, *split_ids(ids, config.val_fraction))
    return _prepared_data(config, sources, val_sources, cache)


def _token_data(config: TrainConfig) -> tuple[Tokenizer, Any, Any]:
    """Token files (a shards folder, modded-nanogpt shards, nanoGPT's train.bin): the tokenizer is the resumed
    checkpoint's or the one beside them; every file is checked against it."""
    tokenizer = _resumed_tokenizer(config)
    shards = open_shards(config.data[0], check=False)
    if tokenizer is None and shards.tokenizer_file is not None:
        tokenizer = Tokenizer.load(shards.tokenizer_file)
    elif tokenizer is None:
        raise GlassformerError(f"token data {config.data[0]!r} has no tokenizer.json beside it: put the glassformer "
                               "tokenizer file that made the ids there (glassformer prepare writes one)")
    shards = open_shards(config.data[0], tokenizer.vocab_size, tokenizer.to_dict())
    if config.val_data:
        return tokenizer, shards.train, open_shards(config.val_data[0], tokenizer.vocab_size, tokenizer.to_dict()).train
    return tokenizer, shards.train, shards.val


def _prepared_data(config: TrainConfig, sources: list, val_sources: list, cache: Path) -> tuple[Tokenizer, Any, Any]:
    """JSON lines, parquet, Arrow: prepared once into ``cache/shards-<key>`` (rank 0 prepares; the
    others wait for it), then read as shards."""
    resumed = _resumed_tokenizer(config)
    key = hashlib.sha256(json.dumps([_fingerprint(sources), _fingerprint(val_sources), config.tokenizer,
                                     config.tokenizer_vocab_size, config.needed_specials(),
                                     config.val_fraction]).encode()).hexdigest()[:20]
    folder = cache / f"shards-{key}"
    import torch.distributed as dist

    waiting = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    try:
        if not waiting or dist.get_rank() == 0:
            prepare(config.data, folder, resumed if resumed is not None else config.tokenizer,
                    vocab_size=config.tokenizer_vocab_size, specials=config.needed_specials(), val=config.val_data,
                    val_fraction=0.0 if config.val_data else config.val_fraction)
    finally:  # every rank meets here: the others wait until rank 0 has prepared the shards (or failed)
        if waiting:
            dist.barrier()
    tokenizer = resumed if resumed is not None else Tokenizer.load(folder / "tokenizer.json")
    shards = open_shards(folder, tokenizer.vocab_size, tokenizer.to_dict())
    return tokenizer, shards.train, shards.val


def check_run(config: TrainConfig) -> None:
    """What a run needs beyond its config's values, checked before anything is read or written: training data
    named for the objective, ``out_dir`` and ``cache_dir`` that can be folders, each tracker's library installed."""
    if config.objective == "seq2seq" and not (config.pairs or (config.src and config.tgt)):
        raise GlassformerError("objective 'seq2seq' needs src and tgt (parallel files) or pairs (.tsv/.jsonl)")
    if config.objective != "seq2seq" and not config.data:
        raise GlassformerError(f"objective {config.objective!r} needs data: one or more text files")
    for name in ("out_dir", "cache_dir"):
        if getattr(config, name) is not None:
            check_folder(name, getattr(config, name))
    parse_log(config.log)


def prepare_run(config: TrainConfig, *, checked: bool = False) -> Run:
    """Read the data, fit (or, when resuming, reload) the tokenizer, and build batches and model (from
    ``torch.manual_seed(config.seed)``: every process starts from the same weights). :func:`check_run` first,
    unless ``checked`` (the command ran it before claiming its outputs)."""
    if not checked:
        check_run(config)
    check_run_dir(config.out_dir)  # a user's file where the run writes: refused before anything is read or written
    # before reading any data: the run must fit with the smallest vocabulary its tokenizer can have
    smallest = config.tokenizer_vocab_size or len(config.needed_specials()) + 1
    _check_fits(config, smallest)
    if config.watch:  # the microscope's probe too (watch.probe_length, probe_batch): before the token cache is made
        from .microscope import WatchConfig, probe_plan  # (as the Trainer imports it: only for a watched run)

        # without a <bos> (extra 0): the run's Microscope checks again, exactly
        probe_plan(WatchConfig.from_dict(config.watch), config.model_config(smallest), 0, config.max_memory)
    with quiet(not config.progress):  # the data's progress lines, as the run asks
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
            tokenizer, train_ids, val_ids = _lm_data(config)
            batches = LMBatches(config.objective, train_ids, val_ids if val_ids is not None and len(val_ids) else None,
                                config.block_size, config.seed, mask_id=tokenizer.mask_id,
                                vocab_size=tokenizer.vocab_size, special_ids=list(tokenizer.special_tokens.values()),
                                mask_prob=config.mask_prob, rows=_rank_rows(config))
    _check_fits(config, tokenizer.vocab_size, batches)
    torch.manual_seed(config.seed)
    return Run(build_model(config.model_config(tokenizer.vocab_size)), tokenizer, batches)
