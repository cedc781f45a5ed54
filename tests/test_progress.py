"""Heartbeat lines of long steps (glassformer/io/progress.py): a line every ~10 s on a terminal or not,
nothing for a short step, quiet where the console is. Time comes from a fake clock, never the wall."""

from __future__ import annotations

import io
import sys
import threading

import numpy as np
import pytest
import torch

from glassformer.data import LMBatches, Seq2SeqBatches, corpus, encode_files
from glassformer.errors import GlassformerError
from glassformer.io import progress
from glassformer.io.progress import Heartbeat, quiet
from glassformer.models import TransformerLM
from glassformer.tokenizers import BPETokenizer, ByteTokenizer, bpe
from glassformer.training import evaluate, prepare_run
from glassformer.training.validation import eval_batch_count
from training_helpers import config as train_config
from training_helpers import train


class FakeClock:
    """Seconds that advance by ``step`` at every reading (thread-safe, as a heartbeat thread reads it too)."""

    def __init__(self, step: float = 4.0):
        self.step, self.now, self.lock = step, 0.0, threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            self.now += self.step
            return self.now


@pytest.fixture
def fake_clock(monkeypatch) -> FakeClock:
    """Every heartbeat made in the test reads a clock that advances 4 s per reading."""
    clock = FakeClock(4.0)
    monkeypatch.setattr(progress, "seconds", clock)
    monkeypatch.delenv("RANK", raising=False)
    return clock


def heartbeat_lines(text: str, what: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(f"{what}: ")]


def test_a_line_every_ten_seconds_and_a_closing_line():
    """Made at t=4, updated at t=8, 12, ..., 40 (9 updates): lines at 16, 28, 40 (12, 24, 36 s after the
    start), then "done" at 44."""
    lines: list[str] = []
    with Heartbeat("scoring", total=9, clock=FakeClock(4.0), enabled=True, write=lines.append) as heartbeat:
        for _ in range(9):
            heartbeat.update(advance=1)
    assert lines == ["scoring: 3 of 9 batches (33%), 12 s", "scoring: 6 of 9 batches (67%), 24 s",
                     "scoring: 9 of 9 batches (100%), 36 s", "scoring: done, 9 batches in 40 s"]


def test_a_short_step_prints_nothing():
    lines: list[str] = []
    with Heartbeat("scoring", clock=FakeClock(4.0), enabled=True, write=lines.append) as heartbeat:
        heartbeat.update(advance=1)  # 4 s after the start
        heartbeat.update(advance=1)  # 8 s
    assert lines == []


def test_a_failed_step_ends_without_done():
    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt), \
            Heartbeat("scoring", clock=FakeClock(6.0), enabled=True, write=lines.append) as heartbeat:
        heartbeat.update(advance=1)
        heartbeat.update(advance=1)
        raise KeyboardInterrupt
    assert lines == ["scoring: 2 batches, 12 s"]  # the one heartbeat; no "done"


def test_bytes_with_a_total_and_a_note():
    lines: list[str] = []
    heartbeat = Heartbeat("encoding", total=3_000_000, unit="bytes", clock=FakeClock(11.0), enabled=True,
                          write=lines.append)
    heartbeat.update(advance=1_500_000, note="1,234 tokens")
    assert lines == ["encoding: 1.5 of 3.0 MB (50%), 1,234 tokens, 11 s"]


def test_lines_go_to_stderr_off_a_terminal(fake_clock, capsys):
    heartbeat = Heartbeat("scoring")
    for _ in range(3):
        heartbeat.update(advance=1)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert heartbeat_lines(captured.err, "scoring") == ["scoring: 3 batches, 12 s"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_lines_come_on_a_terminal_too(fake_clock, monkeypatch):
    """On a terminal the line goes through tqdm.write (an open bar is redrawn below it), not nowhere."""
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    heartbeat = Heartbeat("scoring")
    for _ in range(3):
        heartbeat.update(advance=1)
    assert terminal.getvalue().splitlines() == ["scoring: 3 batches, 12 s"]


def test_quiet_and_other_ranks_print_nothing(fake_clock, capsys, monkeypatch):
    with quiet():
        heartbeat = Heartbeat("scoring")
    for _ in range(6):
        heartbeat.update(advance=1)
    monkeypatch.setenv("RANK", "1")  # a torchrun process other than rank 0
    other_rank = Heartbeat("scoring")
    for _ in range(6):
        other_rank.update(advance=1)
    with quiet(False):
        assert progress.showing() is False  # still rank 1
    assert capsys.readouterr().err == ""


def test_every_must_be_positive():
    with pytest.raises(GlassformerError, match="every must be a finite number > 0.0, got 0"):
        Heartbeat("scoring", every=0)


def test_the_thread_beats_while_the_caller_blocks(fake_clock, monkeypatch):
    """While the caller waits (as on a Rust call), the thread prints; it is gone after the block."""
    seen, printed = [], threading.Event()

    def write(line):
        seen.append(line)
        printed.set()

    with Heartbeat("blocking", write=write) as heartbeat, heartbeat.beating(poll=0.001):
        assert printed.wait(600)  # woken by the thread's first line (milliseconds); a hang guard, not a verdict
    assert seen[0].startswith("blocking: 0 batches, ")
    assert not [t for t in threading.enumerate() if t.name.startswith("heartbeat:")]


# ---------------------------------------------------------------- BPE training
TEXTS = ["the quick brown fox jumps over the lazy dog\n" * 4, "a stitch in time saves nine\n" * 4] * 5


def test_bpe_training_reports_characters_read(fake_clock, capsys):
    BPETokenizer.train(TEXTS, vocab_size=300)
    lines = heartbeat_lines(capsys.readouterr().err, "training the BPE tokenizer")
    assert lines and "characters read" in lines[0]
    assert lines[-1].startswith("training the BPE tokenizer: done, 1,440 characters read in ")


class BlockingTrainer:
    """Stands in for the Rust tokenizer: reads every text, then blocks until a heartbeat said "merging",
    then fails as a Ctrl-C or a Rust panic would."""

    error: BaseException = KeyboardInterrupt()
    merging = threading.Event()

    def __init__(self, model):
        self.pre_tokenizer = self.decoder = None

    def train_from_iterator(self, texts, trainer):
        list(texts)
        assert self.merging.wait(600)  # the heartbeat thread wakes it within milliseconds (a hang guard)
        raise self.error


@pytest.mark.parametrize("error", [KeyboardInterrupt(), RuntimeError("panicked at 'attempt to add with overflow'")])
def test_bpe_heartbeat_while_merging_and_errors_propagate(fake_clock, monkeypatch, error):
    lines = []

    def write(line):
        lines.append(line)
        if "merging pairs" in line:
            BlockingTrainer.merging.set()

    BlockingTrainer.merging.clear()
    monkeypatch.setattr(BlockingTrainer, "error", error)
    monkeypatch.setattr(bpe, "HFTokenizer", BlockingTrainer)
    monkeypatch.setattr(progress, "_write", write)
    monkeypatch.setattr(progress, "POLL_S", 0.001)
    with pytest.raises(type(error)):
        BPETokenizer.train(TEXTS, vocab_size=300)
    assert any("characters read, all read, merging pairs up to 300 tokens, " in line for line in lines)
    assert not any("done" in line for line in lines)
    assert not [t for t in threading.enumerate() if t.name.startswith("heartbeat:")]


# ---------------------------------------------------------------- the token cache
@pytest.mark.parametrize("cached", [True, False])
def test_token_cache_reports_bytes_and_tokens(fake_clock, capsys, monkeypatch, tmp_path, cached):
    monkeypatch.setattr(corpus, "ENCODE_CHARS", 64)  # many pieces: one heartbeat update each
    text = "to be or not to be, that is the question\n" * 20  # 820 bytes
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    ids = encode_files([path], ByteTokenizer(), tmp_path / "cache" if cached else None)
    assert bytes(np.asarray(ids, dtype=np.uint8)) == text.encode()
    what = "building the token cache" if cached else "encoding the corpus"
    lines = heartbeat_lines(capsys.readouterr().err, what)
    assert lines and " of 0.0 MB (" in lines[0] and " tokens, " in lines[0]
    assert lines[-1].startswith(f"{what}: done, 0.0 MB in ")


def test_a_run_with_progress_false_prepares_its_data_quietly(fake_clock, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(corpus, "ENCODE_CHARS", 64)
    prepare_run(train_config(tmp_path, "loud", tokenizer="bpe", tokenizer_vocab_size=300, progress=True))
    assert heartbeat_lines(capsys.readouterr().err, "building the token cache")
    prepare_run(train_config(tmp_path, "quiet", tokenizer="bpe", tokenizer_vocab_size=300, progress=False))
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------- evaluation
def lm_batches(length: int, block: int, objective: str = "clm") -> LMBatches:
    ids = np.arange(length + block + 1) % 50
    return LMBatches(objective, ids, ids[:length], block, seed=0, mask_id=49, vocab_size=50)


@pytest.mark.parametrize(("length", "block", "batch", "cap"),
                         [(2, 4, 3, None), (17, 4, 2, None), (16, 4, 2, None), (100, 8, 5, None), (100, 8, 5, 2),
                          (5, 4, 1, None)])
@pytest.mark.parametrize("objective", ["clm", "mlm"])
def test_eval_batch_count_is_what_eval_batches_yields(length, block, batch, cap, objective):
    batches = lm_batches(length, block, objective)
    assert eval_batch_count(batches, batch, cap) == len(list(batches.eval_batches(batch, cap)))


def test_eval_batch_count_of_pairs():
    pairs = [([1, 2], [3, 4])] * 7
    batches = Seq2SeqBatches(pairs, pairs, pad_id=0, seed=0)
    assert eval_batch_count(batches, 3) == len(list(batches.eval_batches(3))) == 3


def test_evaluation_reports_batches_done_of_total(fake_clock, capsys):
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=50, d_model=16, n_heads=2, n_layers=1, d_ff=32, attn="causal")
    batches = lm_batches(49, 4, "clm")  # 12 full windows: 6 batches of 2
    evaluate(model, batches, batch_size=2)
    lines = heartbeat_lines(capsys.readouterr().err, "evaluating")
    assert lines == ["evaluating: 3 of 6 batches (50%), 12 s", "evaluating: 6 of 6 batches (100%), 24 s",
                     "evaluating: done, 6 batches in 28 s"]
    evaluate(model, batches, batch_size=2, progress=False)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("shown", [True, False])
def test_the_trainer_evaluates_with_heartbeats_unless_quiet(fake_clock, capsys, tmp_path, shown):
    train(train_config(tmp_path, eval_batch_size=1, max_steps=3, progress=shown))
    lines = heartbeat_lines(capsys.readouterr().err, "evaluating")
    assert bool(lines) == shown
