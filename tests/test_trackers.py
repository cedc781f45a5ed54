"""Trackers (``log:`` / ``--log``): what TensorBoard and W&B receive, read back with their own readers
(TensorBoard's EventAccumulator; W&B's offline run file, record by record with W&B's protobuf types),
and a resumed run continuing the same tracker run without logging a step twice."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest
import torch

from glassformer.cli import main
from glassformer.errors import GlassformerError
from glassformer.training import TrainConfig
from glassformer.training.setup import check_run
from glassformer.training.trackers import console_line, open_trackers, parse_log

tensorboard = pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
wandb = pytest.importorskip("wandb", reason="the wandb extra is not installed")

CORPUS = "The quick brown fox jumps over the lazy dog.\nPack my box with five dozen liquor jugs.\n" * 6
TINY = ["--block_size", "8", "--batch_size", "4", "--eval_every", "3", "--log_every", "1", "--progress", "false",
        "--device", "cpu", "--model.d_model", "16", "--model.n_heads", "2", "--model.n_layers", "1",
        "--model.d_ff", "32"]


def scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value)]} of the TensorBoard event files in ``folder``, as TensorBoard reads them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def wandb_records(folder: Path) -> list:
    """Every record of the offline W&B run files under ``folder``, oldest run first. W&B's service
    process writes them: each is read once it holds its run's final "exit" record (a second or so; bounded at
    10 minutes, a guard against a hung service on a busy machine, not a verdict)."""
    records: list = []
    for file in sorted(folder.glob("wandb/offline-run-*/run-*.wandb")):
        for _ in range(3000):
            found = _run_file_records(file)
            if found and found[-1].WhichOneof("record_type") == "exit":
                break
            time.sleep(0.2)
        records += found
    return records


def _run_file_records(file: Path) -> list:
    """The records of one ``run-ID.wandb`` file: W&B's 7-byte header, then LevelDB-log-framed
    ``wandb_internal_pb2.Record`` messages."""
    from wandb.proto import wandb_internal_pb2

    records = []
    data, pos, pending = file.read_bytes(), 7, b""
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768  # records never straddle a 32 KiB block's last 6 bytes
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last part of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_history(folder: Path) -> list[tuple[int, dict[str, str]]]:
    """[(step, {key: value as JSON text})] of every history record W&B wrote, in order."""
    return [(r.history.step.num, {i.key or "/".join(i.nested_key): i.value_json for i in r.history.item})
            for r in wandb_records(folder) if r.WhichOneof("record_type") == "history"]


def test_train_logs_every_metric_to_tensorboard_and_wandb_and_resumes_the_same_runs(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    out = tmp_path / "run"
    args = ["train", "--data", str(corpus), "--out_dir", str(out), "--log", "tensorboard,wandb", *TINY]
    assert main([*args, "--max_steps", "6"]) == 0
    metrics = [line for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    board = scalars(out / "tensorboard")
    assert [step for step, _ in board["train_loss"]] == [1, 2, 3, 4, 5, 6]
    assert [step for step, _ in board["val_loss"]] == [3, 6] and len(metrics) == 8
    assert {"lr", "tokens_per_s", "val_accuracy", "val_ppl", "val_bits_per_char"} <= set(board)
    history = wandb_history(out)
    assert [step for step, _ in history] == [1, 2, 3, 4, 5, 6]  # W&B joins the train and val records of a step
    assert {"train_loss", "lr", "tokens_per_s", "val_loss", "val_accuracy"} <= set(history[2][1])
    first_id = {r.run.run_id for r in wandb_records(out) if r.WhichOneof("record_type") == "run"}
    config = [r for r in wandb_records(out) if r.WhichOneof("record_type") == "run"][0].run.config
    assert {"max_steps", "model", "log"} <= {item.key for item in config.update}

    assert main([*args, "--max_steps", "9", "--resume", "true"]) == 0
    board = scalars(out / "tensorboard")
    assert [step for step, _ in board["train_loss"]] == list(range(1, 10))  # each step once
    history = wandb_history(out)
    steps = [step for step, values in history if "train_loss" in values]
    assert steps == list(range(1, 10))
    runs = {r.run.run_id for r in wandb_records(out) if r.WhichOneof("record_type") == "run"}
    assert runs == first_id and len(list(out.glob("wandb/offline-run-*"))) == 2  # the same W&B run, continued


def test_a_resumed_run_never_logs_a_step_twice(tmp_path):
    """A run that crashed after logging steps 4-6 resumes from its step-3 checkpoint: TensorBoard keeps the
    new values of 4-6 (the old ones are purged), W&B keeps the ones it holds and skips them."""
    config = TrainConfig(out_dir=str(tmp_path)).to_dict()
    trackers = open_trackers("tensorboard,wandb", tmp_path, config, None)
    for step in range(1, 7):
        trackers.log(step, {"train_loss": float(step), "note": "text is dropped"})
    trackers.close()
    trackers = open_trackers("tensorboard,wandb", tmp_path, config, resume_step=3)
    for step in range(4, 9):
        trackers.log(step, {"train_loss": 10.0 + step})
    trackers.close()
    assert scalars(tmp_path / "tensorboard")["train_loss"] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 14.0), (5, 15.0),
                                                                (6, 16.0), (7, 17.0), (8, 18.0)]
    logged = [(step, float(values["train_loss"])) for step, values in wandb_history(tmp_path)]
    assert logged == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 5.0), (6, 6.0), (7, 17.0), (8, 18.0)]
    assert all("note" not in values for _, values in wandb_history(tmp_path))


def test_other_parts_of_training_log_through_the_trainers_tracker(tmp_path):
    """What the training microscope (or an SAE) does: ``trainer.tracker.log(step, {...})`` during the run."""
    from glassformer.training import Trainer, prepare_run

    corpus = tmp_path / "c.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    config = TrainConfig(data=[str(corpus)], block_size=8, batch_size=4, max_steps=2, eval_every=0, progress=False,
                         device="cpu", out_dir=str(tmp_path / "run"), log="tensorboard",
                         model={"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32})
    run = prepare_run(config)
    trainer = Trainer(config, run.model, run.tokenizer, run.batches)
    original = trainer._evaluate_and_save

    def evaluate_and_probe() -> None:
        original()
        trainer.tracker.log(trainer.step, {"microscope/L0H1/induction": 0.25})

    trainer._evaluate_and_save = evaluate_and_probe
    trainer.train()
    assert scalars(tmp_path / "run" / "tensorboard")["microscope/L0H1/induction"] == [(2, 0.25)]


def test_log_names_the_choices_and_the_missing_extra(monkeypatch, tmp_path):
    assert parse_log("none") == [] and parse_log("tensorboard, wandb") == ["tensorboard", "wandb"]
    with pytest.raises(GlassformerError, match=r"log must be one of \['none', 'tensorboard', 'wandb'\]"):
        parse_log("tensorbaord")
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    needs = r"^log 'wandb' needs the wandb package: pip install 'glassformer\[wandb\]'$"
    with pytest.raises(GlassformerError, match=needs):
        check_run(TrainConfig(data=["a.txt"], log="wandb", out_dir=str(tmp_path)))
    assert TrainConfig(log="wandb").log == "wandb"  # the config is a value: the package is the run's check


def test_a_line_per_record_where_no_bar_is_drawn():
    assert console_line({"step": 50, "train_loss": 2.43121, "lr": 1e-3, "tokens_per_s": 3412.4}, 2000) == \
        "step 50/2000 | train_loss 2.4312 | lr 1.00e-03 | 3,412 tok/s"
    assert console_line({"step": 3, "val_loss": 1.5, "val_tokens": 80}, 6) == "step 3/6 | val_loss 1.5000"
    assert torch.get_num_threads() >= 1


@pytest.mark.parametrize("damaged", ["[1, 2]", '{"run_id": 3, "logged_through": {}}',
                                     '{"run_id": "gf-1", "logged_through": {"tensorboard": "x"}}'])
def test_a_damaged_tracker_state_starts_a_new_tracker_run(tmp_path, damaged):
    """``tracker.json`` that is not the state glassformer writes (edited by hand, cut by a full disk) is read as
    no state: the run's trackers start afresh instead of failing on it."""
    (tmp_path / "tracker.json").write_text(damaged)
    trackers = open_trackers("tensorboard", tmp_path, TrainConfig(out_dir=str(tmp_path)).to_dict(), resume_step=3)
    trackers.log(1, {"train_loss": 1.0})
    trackers.close()
    assert trackers.state["logged_through"] == {"tensorboard": 1} and trackers.state["run_id"].startswith("gf-")
    assert scalars(tmp_path / "tensorboard")["train_loss"] == [(1, 1.0)]
