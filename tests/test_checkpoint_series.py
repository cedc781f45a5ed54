"""A kept series of checkpoints (``keep_checkpoints``): the steps kept, what survives a resume, the disk said
before training and checked against what is free, and the microscope's replay over the series."""

import pytest
import torch

from glassformer.cli.commands.overrides import overrides_from_argv
from glassformer.errors import GlassformerError
from glassformer.training import TrainConfig, Trainer, prepare_run
from glassformer.training.replay import replay_checkpoints
from glassformer.training.series import checkpoint_bytes, kept_steps
from training_helpers import config

WATCH = {"every": 2, "probe_length": 3, "probe_batch": 2, "text_rows": 2, "snapshot_tokens": 6}


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _folders(out):
    return sorted(int(p.name[5:]) for p in out.glob("ckpt-*"))


def test_kept_steps():
    assert kept_steps("none", 100) == []
    assert kept_steps("25", 100) == [0, 25, 50, 75, 100]
    assert kept_steps("30", 100) == [0, 30, 60, 90, 100]
    assert kept_steps("log", 64) == [0, 1, 2, 3, 4, 6, 8, 11, 16, 23, 32, 45, 64]
    assert kept_steps("log", 50) == [0, 1, 2, 3, 4, 6, 8, 11, 16, 23, 32, 45, 50]
    assert TrainConfig.from_dict({"keep_checkpoints": 100}).keep_checkpoints == "100"
    assert TrainConfig.from_yaml(None, overrides_from_argv(["--keep_checkpoints", "log"])).keep_checkpoints == "log"
    for bad in ("-1", "every", 2.5, True, "1e3"):
        with pytest.raises(GlassformerError, match=r"^keep_checkpoints must be "):
            TrainConfig.from_dict({"keep_checkpoints": bad})


def test_a_run_keeps_its_series_says_its_disk_and_replays_it(tmp_path, capsys):
    cfg = config(tmp_path, max_steps=6, eval_every=3, keep_checkpoints=2, watch=WATCH)
    run = prepare_run(cfg)
    trainer = Trainer(cfg, run.model, run.tokenizer, run.batches)
    each, first = (checkpoint_bytes(trainer.model, run.tokenizer, trainer.optimizer, cfg.to_dict(), stepped)
                   for stepped in (True, False))
    trainer.train()
    out = tmp_path / "run"
    best = int((out / "best").readlink().name[5:])
    assert set(_folders(out)) == {0, 2, 4, 6, best}
    total = 0
    for step in (0, 2, 4, 6):  # the estimate against the files written
        written = sum(f.stat().st_size for f in (out / f"ckpt-{step:06d}").iterdir())
        expected = first if step == 0 else each
        assert abs(expected - written) <= 0.1 * written, (step, expected, written)
        total += written
    line = next(line for line in capsys.readouterr().err.splitlines() if line.startswith("keep_checkpoints:"))
    assert "4 checkpoints (steps 0, 2, 4, 6)" in line and "free)" in line
    said = float(line.split(": ")[-1].split(" KB more")[0])  # "... : 226.0 KB more on disk (...)"
    assert abs(said * 1000 - total) <= 0.1 * total, (line, total)
    # the series replays with the run's own probe: its records equal the run's at those steps
    records = replay_checkpoints(out, tmp_path / "replayed")
    assert {0, 2, 4, 6} <= {r["step"] for r in records}
    from glassformer.io.loaders import read_records
    from glassformer.training.microscope import RECORDS

    live = {r["step"]: r for r in read_records(out / RECORDS)}
    for record in records:
        if record["step"] in live:
            assert record["lens_loss"] == live[record["step"]]["lens_loss"]


def test_a_resumed_run_keeps_the_series_before_its_step(tmp_path):
    cfg = config(tmp_path, max_steps=4, eval_every=2, lr_decay_steps=8, keep_checkpoints=1)
    run = prepare_run(cfg)
    Trainer(cfg, run.model, run.tokenizer, run.batches).train()
    assert _folders(tmp_path / "run") == [0, 1, 2, 3, 4]
    cfg = config(tmp_path, max_steps=6, eval_every=2, lr_decay_steps=8, keep_checkpoints=1, resume=True)
    run = prepare_run(cfg)
    Trainer(cfg, run.model, run.tokenizer, run.batches).train()
    assert _folders(tmp_path / "run") == [0, 1, 2, 3, 4, 5, 6]
    cfg = config(tmp_path, max_steps=8, eval_every=2, lr_decay_steps=8, resume=True)  # no series asked now
    run = prepare_run(cfg)
    Trainer(cfg, run.model, run.tokenizer, run.batches).train()
    best = int((tmp_path / "run" / "best").readlink().name[5:])
    assert set(_folders(tmp_path / "run")) == {0, 1, 2, 3, 4, 5, 6, 8, best}  # the earlier series stays
    state_file = tmp_path / "run" / "last" / "train_state.pt"
    state = torch.load(state_file, weights_only=True)
    assert state["kept"] == [0, 1, 2, 3, 4, 5, 6]  # carried by each checkpoint: a later resume keeps them too
    state["kept"] = [0, 99]
    torch.save(state, state_file)
    cfg = config(tmp_path, max_steps=10, eval_every=2, lr_decay_steps=8, resume=True)
    run = prepare_run(cfg)
    with pytest.raises(GlassformerError, match=r"kept.*a list of at most 1,000,000 steps from 0 to the state's step"):
        Trainer(cfg, run.model, run.tokenizer, run.batches).train()


def test_a_series_that_does_not_fit_the_disk_is_refused_before_training(tmp_path, monkeypatch):
    import shutil

    from glassformer.training import series

    monkeypatch.setattr(series.shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))
    cfg = config(tmp_path, max_steps=4, keep_checkpoints="log")
    run = prepare_run(cfg)
    with pytest.raises(GlassformerError, match=r"keep_checkpoints needs about .* for 5 checkpoints of .* free"):
        Trainer(cfg, run.model, run.tokenizer, run.batches).train()
    assert _folders(tmp_path / "run") == []
