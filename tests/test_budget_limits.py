"""The budget is the memory the process may really use (issue 31): a container's cgroup limit and
``ulimit -v`` bind it as well as MemAvailable; and the allocation paths the first budget missed
(evaluation batches, the microscope's probe, an SAE's width, seq2seq pairs files) are estimated
before anything is allocated. The machine's limits are read from fake files (``MemorySources``).
"""

from __future__ import annotations

import resource

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocation_helpers import allocations
from glassformer.cli import main
from glassformer.errors import GlassformerError
from glassformer.io import budget
from glassformer.io.budget import MemorySources, OutOfMemoryError, check_fits, memory_room

GB = 10**9


def _machine(tmp_path, available=64 * GB, cgroup="0::/\n", rlimit=None, mapped_pages=0) -> MemorySources:
    """Fake /proc and /sys/fs/cgroup under ``tmp_path``: ``available`` bytes of MemAvailable, the
    process in ``cgroup`` (the text of /proc/self/cgroup), ``rlimit`` as RLIMIT_AS's soft limit."""
    (tmp_path / "meminfo").write_text(f"MemTotal: 99999999 kB\nMemAvailable: {available // 1024} kB\n")
    (tmp_path / "cgroup").write_text(cgroup)
    (tmp_path / "statm").write_text(f"{mapped_pages} 10 5 1 0 3 0\n")
    (tmp_path / "sys").mkdir(exist_ok=True)

    def getrlimit(kind: int) -> tuple[int, int]:
        assert kind == resource.RLIMIT_AS
        return (resource.RLIM_INFINITY if rlimit is None else rlimit), resource.RLIM_INFINITY

    return MemorySources(meminfo=tmp_path / "meminfo", cgroup_root=tmp_path / "sys", self_cgroup=tmp_path / "cgroup",
                         statm=tmp_path / "statm", getrlimit=getrlimit, gpu=False)


def _files(folder, **numbers) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in numbers.items():
        (folder / name.replace("_", ".", 1)).write_text(f"{value}\n")


def test_meminfo_alone_when_no_limit_is_set(tmp_path):
    sources = _machine(tmp_path, available=8 * GB)
    _files(tmp_path / "sys", memory_max="max", memory_current=GB)  # v2 "max": no limit
    room = memory_room(sources)
    assert room.bytes == 8 * GB // 1024 * 1024 and room.source == "available on this machine"


def test_cgroup_v2_limit_minus_usage_binds(tmp_path):
    sources = _machine(tmp_path, cgroup="0::/user.slice/job\n")
    job = tmp_path / "sys" / "user.slice" / "job"
    _files(job, memory_max=2 * GB, memory_current=GB + GB // 2)
    (job / "memory.stat").write_text(f"anon 1000\ninactive_file {GB // 4}\n")  # reclaimable page cache counts as free
    _files(tmp_path / "sys" / "user.slice", memory_max=100 * GB, memory_current=3 * GB)
    room = memory_room(sources)
    assert room.bytes == 2 * GB - (GB + GB // 2 - GB // 4)
    assert "container memory limit of 2 GB" in room.source and "memory.max" in room.source


def test_a_parent_cgroup_limit_binds_too(tmp_path):
    sources = _machine(tmp_path, cgroup="0::/a/b\n")
    _files(tmp_path / "sys" / "a" / "b", memory_max="max", memory_current=GB)
    _files(tmp_path / "sys" / "a", memory_max=3 * GB, memory_current=2 * GB)
    assert memory_room(sources).bytes == GB


def test_cgroup_v1_limit_binds_and_its_unlimited_value_does_not(tmp_path):
    sources = _machine(tmp_path, cgroup="9:name=systemd:/\n4:memory:/docker/abc\n0::/\n")
    memory = tmp_path / "sys" / "memory"
    _files(memory, memory_limit_in_bytes=9223372036854771712, memory_usage_in_bytes=5 * GB)
    assert memory_room(sources).source == "available on this machine"
    _files(memory / "docker" / "abc", memory_limit_in_bytes=4 * GB, memory_usage_in_bytes=3 * GB)
    room = memory_room(sources)
    assert room.bytes == GB and "container memory limit of 4 GB" in room.source


def test_a_container_sees_its_own_cgroup_at_the_root(tmp_path):
    """/proc/self/cgroup names the host's path; inside the container that folder is the mount's root."""
    sources = _machine(tmp_path, cgroup="4:memory:/docker/0123abcd\n")
    _files(tmp_path / "sys" / "memory", memory_limit_in_bytes=GB, memory_usage_in_bytes=GB // 2)
    assert memory_room(sources).bytes == GB // 2


def test_ulimit_v_binds_minus_what_is_already_mapped(tmp_path):
    page = resource.getpagesize()
    sources = _machine(tmp_path, rlimit=3 * GB, mapped_pages=GB // page)
    room = memory_room(sources)
    assert room.bytes == 3 * GB - GB // page * page - budget.address_reserve()
    assert room.source.startswith("left under ulimit -v (RLIMIT_AS 3 GB, 1000 MB already mapped, ")
    assert room.source.endswith(" kept for threads and libraries)")


def test_the_least_of_the_three_binds(tmp_path):
    sources = _machine(tmp_path, available=5 * GB, cgroup="0::/\n", rlimit=4 * GB)
    _files(tmp_path / "sys", memory_max=6 * GB, memory_current=0)
    assert "ulimit -v" in memory_room(sources).source
    _files(tmp_path / "sys", memory_max=6 * GB, memory_current=3 * GB)
    assert "container memory limit" in memory_room(sources).source


def test_the_refusal_names_the_limit_that_bound_it(tmp_path, monkeypatch):
    sources = _machine(tmp_path, cgroup="0::/\n")
    _files(tmp_path / "sys", memory_max=GB, memory_current=GB // 2)
    monkeypatch.setattr(budget, "SOURCES", sources)
    check_fits(GB // 4, "x=1")
    with pytest.raises(OutOfMemoryError, match=r"x=2 needs at least 800 MB, more than the 500 MB left under the "
                                               r"container memory limit of 1 GB"):
        check_fits(8 * 10**8, "x=2")
    (tmp_path / "u").mkdir()
    monkeypatch.setattr(budget, "SOURCES", _machine(tmp_path / "u", rlimit=GB))
    with pytest.raises(OutOfMemoryError, match=r"more than the [0-9]+ MB left under ulimit -v \(RLIMIT_AS 1 GB"):
        check_fits(2 * GB, "x=3")


def test_train_under_a_container_limit_is_refused_before_allocating(tmp_path, monkeypatch, capsys):
    """What fits in MemAvailable but not in the container: one line naming the limit, no traceback."""
    sources = _machine(tmp_path, cgroup="0::/\n")
    _files(tmp_path / "sys", memory_max=200 * 10**6, memory_current=150 * 10**6)
    monkeypatch.setattr(budget, "SOURCES", sources)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("hello world, a small text\n" * 20)
    argv = ["train", "--data", str(corpus), "--out_dir", str(tmp_path / "out"), "--max_steps", "1",
            "--progress", "false", "--device", "cpu", "--model.d_model", "512", "--model.n_heads", "2",
            "--model.d_ff", "2048", "--model.n_layers", "4", "--block_size", "8", "--batch_size", "2"]
    with allocations() as seen:
        code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "n_layers=4, d_model=512" in err and "left under the container memory limit of 200 MB" in err, err
    assert seen.total() < 16 * 2**20, seen


def _corpus(tmp_path, chars: int = 200_000):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(("hello world, a small text\n" * (chars // 26 + 1))[:chars])
    return corpus


def _train(tmp_path, *extra: str) -> list[str]:
    return ["train", "--data", str(_corpus(tmp_path)), "--out_dir", str(tmp_path / "out"), "--max_steps", "1",
            "--progress", "false", "--device", "cpu", "--model.d_model", "16", "--model.n_heads", "2",
            "--model.d_ff", "32", "--model.n_layers", "1", "--block_size", "8", "--batch_size", "2", *extra]


def test_an_evaluation_batch_that_cannot_fit_is_refused_before_training(tmp_path, capsys):
    """--eval_batch_size 1e6: the validation split's 2,499 windows in one forward pass (about 9 MB of
    activations for this tiny model) do not fit in --max_memory 5MB, though training does."""
    with allocations() as seen:
        code = main(_train(tmp_path, "--eval_batch_size", "1000000", "--val_fraction", "0.1", "--max_memory", "5MB"))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "--eval_batch_size 1000000 (2,499 validation rows of block_size=8) needs at least" in err, err
    assert "more than the --max_memory 5 MB" in err, err
    assert seen.tensor_bytes < 16 * 2**20, seen
    assert not (tmp_path / "out" / "last").exists()


def test_an_evaluation_batch_is_bounded_by_the_split_so_what_fits_runs(tmp_path, capsys):
    """The same 1e6 over a split of 13 windows holds 13 rows: accepted (what fits is never refused)."""
    (tmp_path / "small").mkdir()
    argv = _train(tmp_path / "small", "--eval_batch_size", "1000000", "--val_fraction", "0.0005", "--max_memory", "5MB")
    assert main(argv) == 0, capsys.readouterr().err


def test_a_probe_batch_that_cannot_fit_is_refused_before_any_probe():
    """watch.probe_batch 1e8: every layer's (B, h, T, T) pattern of the repeated-tokens probe."""
    import torch

    from glassformer import ModelConfig, build_model
    from glassformer.training.microscope import Microscope, WatchConfig

    model = build_model(ModelConfig(vocab_size=50, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=64))
    watch = WatchConfig.from_dict({"probe_batch": 10**8})
    with allocations() as seen, pytest.raises(OutOfMemoryError) as refused:
        Microscope(watch, model, torch.zeros(4, 16, dtype=torch.long), ["a"] * 16, 0, 10)
    assert "watch.probe_batch=100000000 rows of 40 tokens" in str(refused.value)
    # 2.56 TB of patterns (2 layers x 1e8 rows x 2 heads x 40 x 40 x 4 bytes) + 2.34 TB of activations and logits
    assert "needs at least 4.9 TB beside what is loaded" in str(refused.value)
    assert seen.total() < 2**20, seen
    text = WatchConfig.from_dict({"text_rows": 10**6})  # rows come from the split: a tensor this large is asked for
    with pytest.raises(OutOfMemoryError, match=r"text probe \(watch.text_rows=1000000: 1,000,000 rows of 64 tokens"):
        rows = torch.zeros(1, 64, dtype=torch.long).expand(10**6, 64)  # a view: nothing of that size is made
        Microscope(text, model, rows, ["a"] * 16, 0, 10, max_memory="1GB")


def test_train_refuses_a_probe_batch_beyond_max_memory(tmp_path, capsys):
    with allocations() as seen:
        code = main(_train(tmp_path, "--watch.probe_batch", "5000", "--model.max_len", "64", "--max_memory", "30MB"))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "watch.probe_batch=5000 rows of 40 tokens" in err and "more than the --max_memory 30 MB" in err, err
    assert seen.tensor_bytes < 16 * 2**20, seen


def test_an_sae_too_wide_for_the_memory_is_refused_before_allocating(tmp_path, monkeypatch, capsys):
    """glassformer sae --d_sae 1048576: 4 copies of 2 x 16 x 2^20 weights (537 MB) and the final metrics'
    (32 x 64 positions, 2^20) pre-activations and features (17.2 GB) cannot fit in a machine with 512 MB free."""
    from glassformer import ModelConfig, build_model
    from glassformer.tokenizers import CharTokenizer
    from glassformer.training import save_checkpoint

    tok = CharTokenizer.from_text("hello world, a small text\n", specials=["pad", "bos", "eos"])
    model = build_model(ModelConfig(vocab_size=tok.vocab_size, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=16))
    save_checkpoint(tmp_path / "run" / "best", model, tok)
    monkeypatch.setattr(budget, "SOURCES", _machine(tmp_path, available=2**29))
    argv = ["sae", str(tmp_path / "run" / "best"), "--hook", "blocks.0.hook_resid_post", "--data",
            str(_corpus(tmp_path, 4000)), "--d_sae", "1048576", "--steps", "2", "--batch_size", "64",
            "--buffer_size", "128", "--progress", "false"]
    with allocations() as seen:
        code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert ("an SAE with d_sae=1048576 on d_in=16 (batch_size=64, buffer_size=128, 2,048 positions encoded at once "
            "for the metrics and feature pages) needs at least 17.7 GB") in err, err
    assert "more than the 537 MB available on this machine" in err, err
    assert seen.largest < 2**20, seen  # the model's weights were loaded; nothing of the SAE's size
    assert not (tmp_path / "run" / "sae-blocks.0.hook_resid_post").exists()  # no empty out_dir left behind


def test_the_sae_estimate_counts_weights_adam_the_step_and_the_buffer():
    from glassformer.io.budget import sae_bytes

    assert sae_bytes(512, 2**20, 1024, 32768) >= 4 * (2 * 512 * 2**20) * 4 + 2 * 1024 * 2**20 * 4 + 32768 * 512 * 4
    assert sae_bytes(512, 2**20 + 1, 1024, 32768) > sae_bytes(512, 2**20, 1024, 32768)
    assert sae_bytes(512, 2**20, 1024, 32769) > sae_bytes(512, 2**20, 1024, 32768)
    step = 2 * 512 * 2**20 + 2 * 1024 * 2**20  # Adam's two temporaries and the batch's features
    assert sae_bytes(512, 2**20, 1024, 32768, eval_rows=0) >= (4 * 2 * 512 + 32768 * 512 / 2**20) * 2**20 * 4 + step * 4
    assert sae_bytes(512, 2**20, 1024, 32768, eval_rows=4096) - sae_bytes(512, 2**20, 1024, 32768) == \
        (2 * 4096 * 2**20 - step) * 4  # the metrics' features, larger than the step's


def _pairs_file(path, size: int) -> int:
    """A TSV of short sentence pairs (Multi30k's shape: a few words a side, umlauts) of about ``size``
    bytes; returns its size."""
    import random

    rng = random.Random(0)
    words = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyzäöü", k=rng.randint(2, 9))) for _ in range(3000)]

    def sentence() -> str:
        return " ".join(rng.choices(words, k=rng.randint(2, 6)))
    lines, total = [], 0
    while total < size:
        line = f"{sentence()}\t{sentence()}\n"
        lines.append(line)
        total += len(line.encode())
    path.write_text("".join(lines), encoding="utf-8")
    return path.stat().st_size


def test_a_seq2seq_pairs_file_costs_a_small_multiple_of_its_size(tmp_path):
    """A 3 MB pairs file (about 2.9M character tokens, 53k pairs) read, fitted and encoded as train
    does it: the peak of Python memory and tensors stays under 12x the file (it was 48x: one Python
    set per sentence to fit the characters, then a Python list of Python ints per sentence)."""
    from glassformer.training import prepare_run
    from glassformer.training.config import TrainConfig

    size = _pairs_file(tmp_path / "pairs.tsv", 3 * 10**6)
    config = TrainConfig.from_dict(dict(
        objective="seq2seq", pairs=str(tmp_path / "pairs.tsv"), block_size=32, batch_size=4, max_steps=1, device="cpu",
        progress=False, out_dir=str(tmp_path / "out"),
        model={"d_model": 16, "n_heads": 2, "n_enc": 1, "n_dec": 1, "d_ff": 32}))
    with allocations() as seen:
        run = prepare_run(config)
    tokens = sum(len(side) for side in (run.batches.train.src, run.batches.train.tgt))
    assert len(run.batches.train) > 50_000 and tokens > 2 * 10**6
    assert run.batches.train[0][0] == (run.tokenizer.encode(
        (tmp_path / "pairs.tsv").read_text(encoding="utf-8").split("\t")[0]) + [run.tokenizer.eos_id])[:32]
    assert seen.total() < 12 * size, (seen, size)


@settings(max_examples=150, deadline=None)
@given(text=st.text(st.sampled_from("ab \t\n\r\u00e4\u2028"), min_size=1, max_size=60), chunk=st.integers(1, 8))
def test_pair_lines_stream_as_the_whole_file_splits(tmp_path_factory, text, chunk):
    """Lines read chunk by chunk (any chunk size, CRLF, lone CR, blank lines, a last line without a
    newline) are the lines of the whole text."""
    from glassformer.data.seq2seq import _iter_lines

    if not text.strip():
        return  # a whitespace-only file is refused (test_data)
    path = tmp_path_factory.mktemp("lines") / "f.txt"
    path.write_bytes(text.encode())
    assert list(_iter_lines(path, "file", chunk)) == text.splitlines()


def test_parallel_files_of_different_lengths_are_counted_whole(tmp_path):
    from glassformer.data import iter_pairs, read_pairs

    (tmp_path / "s").write_text("a\nb\nc\n")
    (tmp_path / "t").write_text("x\ny\n")
    for src, tgt, counts in (("s", "t", "has 3 lines, '.*t' has 2"), ("t", "s", "has 2 lines, '.*s' has 3")):
        with pytest.raises(GlassformerError, match=f"parallel files differ in length: '.*{src}' {counts}"):
            read_pairs(tmp_path / src, tmp_path / tgt)
    (tmp_path / "t").write_text("x\n\nz\n")
    assert list(iter_pairs(tmp_path / "s", tmp_path / "t")) == [("a", "x"), ("c", "z")]  # a blank side: skipped


@settings(max_examples=60, deadline=None)
@given(available=st.integers(1, 2**50), limit=st.none() | st.integers(1, 2**50), used=st.integers(0, 2**50),
       cache=st.integers(0, 2**50), rlimit=st.none() | st.integers(1, 2**50), pages=st.integers(0, 2**30))
def test_the_room_is_the_least_of_what_each_limit_leaves(tmp_path_factory, available, limit, used, cache, rlimit,
                                                         pages):
    root = tmp_path_factory.mktemp("machine")
    sources = _machine(root, available=available, cgroup="0::/job\n", rlimit=rlimit, mapped_pages=pages)
    _files(root / "sys" / "job", memory_max="max" if limit is None else limit, memory_current=used)
    (root / "sys" / "job" / "memory.stat").write_text(f"inactive_file {cache}\n")
    expected = [available // 1024 * 1024]
    if limit is not None:
        expected.append(max(limit - max(used - cache, 0), 0))
    if rlimit is not None:
        expected.append(max(rlimit - pages * resource.getpagesize() - budget.address_reserve(), 0))
    assert memory_room(sources).bytes == min(expected)
