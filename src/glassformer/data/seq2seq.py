"""Sequence-to-sequence pairs: reading them (two parallel files, TSV or JSONL) and length-bucketed batches."""

from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import zip_longest
from pathlib import Path
from typing import Any

import torch

from ..errors import GlassformerError
from ..io.checks import check_int
from ..io.loaders import parse_json
from ..tokenizers import Tokenizer
from .mlm import IGNORE
from .padding import pad_rows
from .text import CHUNK_CHARS, iter_text


def read_pairs(src: str | Path | None = None, tgt: str | Path | None = None,
               pairs: str | Path | None = None) -> list[tuple[str, str]]:
    """Parallel text as (source, target) strings, in file order: ``list(iter_pairs(src, tgt, pairs))``.

    Either ``src`` and ``tgt``: two files (plain or .gz), line i of one translating line i of the other;
    or ``pairs``: a ``.tsv`` (source TAB target) or ``.jsonl`` (``{"src": ..., "tgt": ...}``) file.
    Blank lines are skipped."""
    return list(iter_pairs(src, tgt, pairs))


def iter_pairs(src: str | Path | None = None, tgt: str | Path | None = None,
               pairs: str | Path | None = None) -> Iterator[tuple[str, str]]:
    """The pairs of :func:`read_pairs` one at a time, the files read in chunks; errors are raised when
    the reading reaches them."""
    if pairs is not None:
        if src is not None or tgt is not None:
            raise GlassformerError("give either pairs= (a TSV/JSONL file) or src= and tgt= (two files), not both")
        yield from _iter_pair_file(Path(pairs))
        return
    if src is None or tgt is None:
        raise GlassformerError("seq2seq data needs src and tgt files (or one pairs file)")
    lines = zip_longest(_iter_lines(src, "source file"), _iter_lines(tgt, "target file"))
    for count, (s, t) in enumerate(lines):
        if s is None or t is None:  # one file ended: the other's remaining lines are counted for the message
            rest = 1 + sum(1 for _ in lines)
            sources, targets = count + (rest if s is not None else 0), count + (rest if t is not None else 0)
            raise GlassformerError(f"parallel files differ in length: {str(src)!r} has {sources} lines, "
                                   f"{str(tgt)!r} has {targets}")
        if s.strip() and t.strip():
            yield s, t


def _iter_lines(path: str | Path, what: str, chunk_chars: int = CHUNK_CHARS) -> Iterator[str]:
    """The lines of a text file as ``read_text(path).splitlines()`` gives them, read in chunks."""
    held = ""
    for piece in iter_text(path, chunk_chars, what=what):
        held += piece
        if held.endswith("\n"):  # a chunk ends after a newline unless a line is longer than a chunk
            yield from held.splitlines()
            held = ""
    yield from held.splitlines()


def _iter_pair_file(path: Path) -> Iterator[tuple[str, str]]:
    suffixes = [s for s in path.suffixes if s != ".gz"]
    kind = suffixes[-1] if suffixes else ""
    if kind not in (".tsv", ".jsonl"):
        raise GlassformerError(f"pairs file {str(path)!r} must end in .tsv or .jsonl (optionally .gz)")
    for number, line in enumerate(_iter_lines(path, "pairs file"), 1):
        if not line.strip():
            continue
        if kind == ".tsv":
            fields = line.split("\t")
            if len(fields) != 2:
                raise GlassformerError(f"{path}:{number}: expected 'source<TAB>target', "
                                       f"found {len(fields)} field(s)")
            yield fields[0], fields[1]
            continue
        record = parse_json(line, f"{path}:{number}")  # bad JSON, too deep, too many digits: one line
        if not isinstance(record, dict) or not isinstance(record.get("src"), str) or not isinstance(
                record.get("tgt"), str):
            raise GlassformerError(f'{path}:{number}: expected an object {{"src": "...", "tgt": "..."}}')
        yield record["src"], record["tgt"]


class EncodedPairs(Sequence):
    """Encoded (source ids, target ids) pairs held flat (4 bytes a token, not ~40 as Python lists):
    ``src``, ``tgt`` (total tokens,) int32, one side's ids one after the other, and ``src_starts``,
    ``tgt_starts`` (N + 1,) int64 offsets (pair i's source is ``src[src_starts[i]:src_starts[i + 1]]``).
    ``pairs[i]`` is (source ids, target ids) as lists."""

    def __init__(self, src: torch.Tensor, src_starts: torch.Tensor, tgt: torch.Tensor, tgt_starts: torch.Tensor):
        self.src, self.src_starts, self.tgt, self.tgt_starts = src, src_starts, tgt, tgt_starts

    @classmethod
    def of(cls, pairs: Iterable[tuple[Sequence[int], Sequence[int]]]) -> "EncodedPairs":
        """``pairs`` as EncodedPairs (returned as it is when it already is one)."""
        if isinstance(pairs, EncodedPairs):
            return pairs
        src, tgt, src_starts, tgt_starts = array("i"), array("i"), array("q", [0]), array("q", [0])  # growing
        for source, target in pairs:
            src.extend(source)
            tgt.extend(target)
            src_starts.append(len(src))
            tgt_starts.append(len(tgt))

        def tensor(values: array, dtype: torch.dtype) -> torch.Tensor:
            return torch.frombuffer(values, dtype=dtype) if len(values) else torch.zeros(0, dtype=dtype)
        return cls(tensor(src, torch.int32), tensor(src_starts, torch.int64), tensor(tgt, torch.int32),
                   tensor(tgt_starts, torch.int64))

    def __len__(self) -> int:
        return len(self.src_starts) - 1

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        i = range(len(self))[index]  # an IndexError for an index out of range, negatives counted from the end
        return (self.src[int(self.src_starts[i]):int(self.src_starts[i + 1])].tolist(),
                self.tgt[int(self.tgt_starts[i]):int(self.tgt_starts[i + 1])].tolist())

    def lengths(self) -> list[tuple[int, int]]:
        """(target length, source length) of every pair, the key :func:`length_batches` sorts by."""
        return list(zip(self.tgt_starts.diff().tolist(), self.src_starts.diff().tolist(), strict=True))


def encode_pairs(pairs: Iterable[tuple[str, str]], tokenizer: Tokenizer, max_len: int) -> EncodedPairs:
    """Source ids + [eos] and [bos] + target ids + [eos], cut to ``max_len`` and ``max_len + 1`` (the
    decoder reads all but the last, predicts all but the first), in order. ``pairs`` may be a generator
    (:func:`iter_pairs`), read one pair at a time."""
    bos, eos = tokenizer.bos_id, tokenizer.eos_id
    if bos is None or eos is None:
        raise GlassformerError("seq2seq needs a tokenizer with 'bos' and 'eos' special tokens")
    return EncodedPairs.of(((tokenizer.encode(s, add_special_tokens=False) + [eos])[:max_len],
                            ([bos] + tokenizer.encode(t, add_special_tokens=False) + [eos])[:max_len + 1])
                           for s, t in pairs)


def collate_pairs(examples: Sequence[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """A teacher-forcing batch from B encoded pairs, right-padded: ``src`` (B, S), ``src_pad`` (B, S) bool
    (True = padding), ``tgt_in`` (B, T) = target[:-1], ``tgt_pad`` (B, T) and ``labels`` (B, T) =
    target[1:], ``IGNORE`` on padding."""
    src, src_pad = pad_rows([s for s, _ in examples], pad_id)
    tgt, tgt_pad = pad_rows([t for _, t in examples], pad_id)
    labels = tgt[:, 1:].masked_fill(tgt_pad[:, 1:], IGNORE)
    return {"src": src, "src_pad": src_pad, "tgt_in": tgt[:, :-1], "tgt_pad": tgt_pad[:, :-1],
            "labels": labels}


def length_batches(lengths: Sequence[Any], batch_size: int, generator: torch.Generator,
                   pool_batches: int | None = None) -> list[list[int]]:
    """Index batches of similar length, for little padding: shuffle, sort by ``lengths`` (tuples compare
    in order: Seq2SeqBatches passes (target length, source length)), cut into batches, shuffle the
    batches. Every index appears once; the last batch may be smaller. ``pool_batches``: sort only
    within pools of that many batches (more variety, more padding); None sorts the whole set."""
    check_int("batch_size", batch_size, 1)
    check_int("pool_batches", pool_batches, 1, allow_none=True)
    order = torch.randperm(len(lengths), generator=generator).tolist()
    pool = max(len(order), 1) if pool_batches is None else batch_size * pool_batches
    batches = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start:start + pool], key=lambda i: lengths[i])
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
