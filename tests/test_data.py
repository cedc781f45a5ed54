"""Data: the memory-mapped token cache, splits, windows, MLM masking, prefix-LM labels, seq2seq pairs."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import torch

from glassformer.data import (
    IGNORE,
    LMBatches,
    Seq2SeqBatches,
    collate_pairs,
    consecutive_windows,
    encode_files,
    encode_pairs,
    iter_text,
    length_batches,
    mask_tokens,
    pad_rows,
    prefix_lm_labels,
    random_windows,
    read_pairs,
    split_ids,
)
from glassformer.tokenizers import ByteTokenizer, CharTokenizer

TEXT = "first line\nsecond line\n第三行\n" * 20


def test_encode_files_memmap_cache(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text(TEXT, encoding="utf-8")
    b.write_text("more text\n", encoding="utf-8")
    tok = CharTokenizer.from_text(TEXT + "more text\n")
    ids = encode_files([a, b], tok, cache_dir=tmp_path / "cache")
    assert isinstance(ids, np.memmap) and ids.dtype == np.uint16
    assert ids.tolist() == tok.encode(TEXT + "more text\n")
    files = list((tmp_path / "cache").iterdir())
    assert len(files) == 1 and files[0].stat().st_size == 2 * len(ids)
    again = encode_files([a, b], tok, cache_dir=tmp_path / "cache")  # maps the cached file
    assert again.filename == ids.filename and again.tolist() == ids.tolist()
    np.testing.assert_array_equal(encode_files([a, b], tok), ids)  # no cache: in memory


def test_encode_files_another_process_writes_the_cache_first(tmp_path, monkeypatch):
    """torchrun: every rank finds no cache, all encode, one renames its file in first; the others map
    that file instead of refusing it as 'a file glassformer did not write'."""
    import glassformer.data.corpus as corpus

    a = tmp_path / "a.txt"
    a.write_text(TEXT, encoding="utf-8")
    tok = CharTokenizer.from_text(TEXT)
    real = corpus.atomic_write

    def raced(target, chunks, **kwargs):
        data = b"".join(chunks)
        target.write_bytes(data)  # the other rank's file, landed after our exists() check
        return real(target, iter([data]), **kwargs)

    monkeypatch.setattr(corpus, "atomic_write", raced)
    ids = encode_files([a], tok, cache_dir=tmp_path / "cache")
    assert ids.tolist() == tok.encode(TEXT)


def test_iter_text_cuts_after_newlines(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text(TEXT, encoding="utf-8")
    pieces = list(iter_text(path, chunk_chars=7))
    assert "".join(pieces) == TEXT
    assert all(p.endswith("\n") for p in pieces)


def test_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        list(iter_text(tmp_path / "missing.txt"))
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match="is empty"):
        list(iter_text(tmp_path / "empty.txt"))
    (tmp_path / "blank.txt").write_text("  \n\n")
    with pytest.raises(ValueError, match="has no text"):
        list(iter_text(tmp_path / "blank.txt"))
    (tmp_path / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    with pytest.raises(ValueError, match="is not UTF-8 text: byte 0xe9"):
        list(iter_text(tmp_path / "latin1.txt"))
    with pytest.raises(ValueError, match="is a folder"):
        list(iter_text(tmp_path))


def test_split_is_first_and_last_fraction():
    ids = np.arange(100)
    train, val = split_ids(ids, 0.1)
    assert train.tolist() == list(range(90)) and val.tolist() == list(range(90, 100))
    with pytest.raises(ValueError, match="val_fraction"):
        split_ids(ids, 1.0)


def test_random_windows_shift_and_determinism():
    ids = np.arange(50, dtype=np.uint16)
    x, y = random_windows(ids, 8, 5, torch.Generator().manual_seed(3))
    assert x.shape == y.shape == (5, 8) and x.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1]) and torch.equal(y - x, torch.ones_like(x))
    x2, _ = random_windows(ids, 8, 5, torch.Generator().manual_seed(3))
    assert torch.equal(x, x2)
    with pytest.raises(ValueError, match="fewer than one window of block_size \\+ 1 = 51"):
        random_windows(ids, 50, 1, torch.Generator())


def test_consecutive_windows_cover_each_target_once():
    ids = np.arange(23)
    batches = list(consecutive_windows(ids, block_size=5, batch_size=2))
    targets = torch.cat([y.flatten() for _, y in batches])
    inputs = torch.cat([x.flatten() for x, _ in batches])
    assert targets.tolist() == list(range(1, 23)) and inputs.tolist() == list(range(22))
    assert [tuple(x.shape) for x, _ in batches] == [(2, 5), (2, 5), (1, 2)]


def test_mask_tokens_80_10_10():
    ids = torch.randint(3, 50, (200, 100))
    ids[:, 0] = 0  # a special token: never chosen
    inputs, labels = mask_tokens(ids, mask_id=1, vocab_size=50, generator=torch.Generator().manual_seed(0),
                                 special_ids=[0, 1, 2])
    chosen = labels != IGNORE
    assert torch.equal(labels[chosen], ids[chosen]) and not chosen[:, 0].any()
    assert abs(chosen.float().mean().item() - 0.15 * 0.99) < 0.01
    masked = (inputs == 1) & chosen
    kept = (inputs == ids) & chosen
    assert abs(masked.sum() / chosen.sum() - 0.8) < 0.03
    assert abs(kept.sum() / chosen.sum() - 0.1 - 0.1 / 47) < 0.03  # kept + random that hit the same token
    assert torch.equal(inputs[~chosen], ids[~chosen])
    assert not torch.isin(inputs[chosen & ~masked], torch.tensor([0, 2])).any()  # random tokens are not specials


def test_prefix_lm_labels_hide_what_the_prefix_sees():
    y = torch.arange(40).reshape(4, 10)
    prefix_len, labels = prefix_lm_labels(y, torch.Generator().manual_seed(1))
    assert ((prefix_len >= 1) & (prefix_len <= 9)).all()
    for row in range(4):
        p = int(prefix_len[row])
        assert (labels[row, :p - 1] == IGNORE).all()
        assert torch.equal(labels[row, p - 1:], y[row, p - 1:])


def test_read_pairs_formats(tmp_path):
    with gzip.open(tmp_path / "s.de.gz", "wt", encoding="utf-8") as f:
        f.write("ein Hund\nzwei Katzen\n")
    (tmp_path / "t.en").write_text("a dog\ntwo cats\n", encoding="utf-8")
    assert read_pairs(tmp_path / "s.de.gz", tmp_path / "t.en") == [("ein Hund", "a dog"), ("zwei Katzen", "two cats")]
    (tmp_path / "p.tsv").write_text("ein Hund\ta dog\n", encoding="utf-8")
    assert read_pairs(pairs=tmp_path / "p.tsv") == [("ein Hund", "a dog")]
    (tmp_path / "p.jsonl").write_text('{"src": "ein Hund", "tgt": "a dog"}\n', encoding="utf-8")
    assert read_pairs(pairs=tmp_path / "p.jsonl") == [("ein Hund", "a dog")]
    (tmp_path / "short.en").write_text("a dog\n", encoding="utf-8")
    with pytest.raises(ValueError, match="differ in length"):
        read_pairs(tmp_path / "s.de.gz", tmp_path / "short.en")
    (tmp_path / "bad.tsv").write_text("no tab here\n", encoding="utf-8")
    with pytest.raises(ValueError, match="bad.tsv:1: expected 'source<TAB>target'"):
        read_pairs(pairs=tmp_path / "bad.tsv")


def test_seq2seq_batches_pad_and_shift():
    tok = CharTokenizer.from_text("abcd", specials=["pad", "bos", "eos"])
    pairs = encode_pairs([("ab", "c"), ("abcd", "dd")], tok, max_len=16)
    batch = collate_pairs(pairs, tok.pad_id)
    assert batch["src"].tolist() == [[3, 4, 2, 0, 0], [3, 4, 5, 6, 2]]
    assert batch["src_pad"].tolist() == [[False, False, False, True, True], [False] * 5]
    assert batch["tgt_in"].tolist() == [[1, 5, 2], [1, 6, 6]]
    assert batch["labels"].tolist() == [[5, 2, IGNORE], [6, 6, 2]]
    assert batch["tgt_pad"].tolist() == [[False] * 3, [False] * 3]  # row 0 feeds eos at its last step: no label


def test_pad_rows_pads_right_or_left():
    ids, pad = pad_rows([[5, 6, 7], [8], []], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0], [0, 0, 0]]
    assert pad.tolist() == [[False] * 3, [False, True, True], [True] * 3]
    ids, pad = pad_rows([[5, 6, 7], [8]], pad_id=9, side="left")
    assert ids.tolist() == [[5, 6, 7], [9, 9, 8]] and pad.tolist() == [[False] * 3, [True, True, False]]
    with pytest.raises(ValueError, match="side must be one of"):
        pad_rows([[1]], 0, side="middle")


def test_length_batches_use_every_index_once():
    lengths = [5, 1, 9, 3, 7, 2, 8, 4, 6, 0]
    batches = length_batches(lengths, 3, torch.Generator().manual_seed(0), pool_batches=10)
    assert sorted(i for b in batches for i in b) == list(range(10))
    assert all(lengths[b[0]] <= lengths[b[-1]] for b in batches)


def test_global_batch_depends_only_on_step():
    ids = np.arange(1000) % 50
    batches = LMBatches("clm", ids, None, 16, seed=7)
    a, b = batches.global_batch(3, 8), batches.global_batch(3, 8)
    assert torch.equal(a["ids"], b["ids"]) and not torch.equal(a["ids"], batches.global_batch(4, 8)["ids"])
    with pytest.raises(ValueError, match="needs a tokenizer with a 'mask' special token"):
        LMBatches("mlm", ids, None, 16, seed=7)
    tok = ByteTokenizer(["pad", "bos", "eos"])
    pairs = encode_pairs([("x" * n, "y" * n) for n in range(1, 20)], tok, 32)
    s2s = Seq2SeqBatches(pairs, pairs[:3], tok.pad_id, seed=0)
    assert torch.equal(s2s.global_batch(5, 4)["src"], s2s.global_batch(5, 4)["src"])
    assert sum(int((b["labels"] != IGNORE).sum()) for b in s2s.eval_batches(2)) == 2 + 3 + 4  # targets y, yy, yyy + eos


def test_length_batches_sort_pairs_by_target_then_source_length():
    lengths = [(t, s) for t in (3, 1, 2) for s in (5, 4, 6, 1)]  # (target, source) lengths of 12 pairs
    batches = length_batches(lengths, 4, torch.Generator().manual_seed(0))
    assert sorted(i for b in batches for i in b) == list(range(12))
    for b in batches:  # one target length per batch, sources in order within it
        assert len({lengths[i][0] for i in b}) == 1
        assert [lengths[i][1] for i in b] == sorted(lengths[i][1] for i in b)
    with pytest.raises(ValueError, match="pool_batches must be an int >= 1 or None, got 0"):
        length_batches(lengths, 4, torch.Generator().manual_seed(0), pool_batches=0)
