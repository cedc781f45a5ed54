"""Sequence-to-sequence pairs: reading them (two parallel files, TSV or JSONL) and length-bucketed batches."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..errors import GlassformerError, check_int
from ..loaders import parse_json
from ..tokenizers import Tokenizer
from .mlm import IGNORE
from .padding import pad_rows
from .text import read_lines


def read_pairs(src: str | Path | None = None, tgt: str | Path | None = None,
               pairs: str | Path | None = None) -> list[tuple[str, str]]:
    """Parallel text as (source, target) strings.

    Either ``src`` and ``tgt``: two files (plain or .gz) with one sentence per line, line i of one
    translating line i of the other; or ``pairs``: a ``.tsv`` file (source TAB target per line) or a
    ``.jsonl`` file (one ``{"src": ..., "tgt": ...}`` object per line). Blank lines are skipped.
    Returns the (source, target) pairs in file order.
    """
    if pairs is not None:
        if src is not None or tgt is not None:
            raise GlassformerError("give either pairs= (a TSV/JSONL file) or src= and tgt= (two files), not both")
        return _read_pair_file(Path(pairs))
    if src is None or tgt is None:
        raise GlassformerError("seq2seq data needs src and tgt files (or one pairs file)")
    sources, targets = read_lines(src, "source file"), read_lines(tgt, "target file")
    if len(sources) != len(targets):
        raise GlassformerError(f"parallel files differ in length: {str(src)!r} has {len(sources)} lines, "
                               f"{str(tgt)!r} has {len(targets)}")
    return [(s, t) for s, t in zip(sources, targets, strict=True) if s.strip() and t.strip()]


def _read_pair_file(path: Path) -> list[tuple[str, str]]:
    suffixes = [s for s in path.suffixes if s != ".gz"]
    kind = suffixes[-1] if suffixes else ""
    if kind not in (".tsv", ".jsonl"):
        raise GlassformerError(f"pairs file {str(path)!r} must end in .tsv or .jsonl (optionally .gz)")
    out = []
    for number, line in enumerate(read_lines(path, "pairs file"), 1):
        if not line.strip():
            continue
        if kind == ".tsv":
            fields = line.split("\t")
            if len(fields) != 2:
                raise GlassformerError(f"{path}:{number}: expected 'source<TAB>target', "
                                       f"found {len(fields)} field(s)")
            out.append((fields[0], fields[1]))
            continue
        record = parse_json(line, f"{path}:{number}")  # bad JSON, too deep, too many digits: one line
        if not isinstance(record, dict) or not isinstance(record.get("src"), str) or not isinstance(
                record.get("tgt"), str):
            raise GlassformerError(f'{path}:{number}: expected an object {{"src": "...", "tgt": "..."}}')
        out.append((record["src"], record["tgt"]))
    return out


def encode_pairs(pairs: Sequence[tuple[str, str]], tokenizer: Tokenizer,
                 max_len: int) -> list[tuple[list[int], list[int]]]:
    """Source ids + [eos], and target ids wrapped as [bos] + target + [eos], cut to ``max_len`` and
    ``max_len + 1`` (the decoder reads all but the last, predicts all but the first).

    Returns one (source ids, target ids) pair of lists per input pair, in order.
    """
    bos, eos = tokenizer.bos_id, tokenizer.eos_id
    if bos is None or eos is None:
        raise GlassformerError("seq2seq needs a tokenizer with 'bos' and 'eos' special tokens")
    return [((tokenizer.encode(s, add_special_tokens=False) + [eos])[:max_len],
             ([bos] + tokenizer.encode(t, add_special_tokens=False) + [eos])[:max_len + 1])
            for s, t in pairs]


def collate_pairs(examples: Sequence[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """A teacher-forcing batch from B encoded pairs (as :func:`encode_pairs` makes them), right-padded.

    Returns a dict: ``src`` (B, S) and ``src_pad`` (B, S) bool (True = padding); ``tgt_in`` (B, T) =
    target[:-1] and ``tgt_pad`` (B, T); ``labels`` (B, T) = target[1:], ``IGNORE`` (-100) on padding.
    S and T + 1 are the longest source and target of the batch.
    """
    src, src_pad = pad_rows([s for s, _ in examples], pad_id)
    tgt, tgt_pad = pad_rows([t for _, t in examples], pad_id)
    labels = tgt[:, 1:].masked_fill(tgt_pad[:, 1:], IGNORE)
    return {"src": src, "src_pad": src_pad, "tgt_in": tgt[:, :-1], "tgt_pad": tgt_pad[:, :-1],
            "labels": labels}


def length_batches(lengths: Sequence[Any], batch_size: int, generator: torch.Generator,
                   pool_batches: int | None = None) -> list[list[int]]:
    """Index batches of similar length, for little padding: shuffle, sort by ``lengths`` (ties stay
    in shuffled order), cut into batches, shuffle the batches. Every index appears once; the last
    batch may be smaller.

    ``lengths`` may hold tuples, compared in order: Seq2SeqBatches passes (target length, source
    length) per pair, so that both sides of a batch need little padding (Multi30k: 0.5% of target
    and 10% of source positions are padding, against 17% and 19% when sorting by the sum).
    ``pool_batches``: sort only within pools of that many batches (more variety between epochs,
    more padding); None sorts the whole set.
    Returns the batches: lists of indices into ``lengths``.
    """
    check_int("batch_size", batch_size, 1)
    check_int("pool_batches", pool_batches, 1, allow_none=True)
    order = torch.randperm(len(lengths), generator=generator).tolist()
    pool = max(len(order), 1) if pool_batches is None else batch_size * pool_batches
    batches = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start:start + pool], key=lambda i: lengths[i])
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
