"""The training microscope's scalars reach TensorBoard, as docs/training.md says: each record of
microscope.jsonl (step 0 included) is in the event files under ``microscope/...``, read back with
TensorBoard's own reader, and a resumed run adds its new records without logging a step twice."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from glassformer.io.loaders import read_records
from glassformer.training.microscope import RECORDS, record_scalars
from training_helpers import config, train

pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")

WATCH = {"every": 2, "probe_length": 3, "probe_batch": 2, "text_rows": 2, "snapshot_tokens": 6}


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value)]} of the TensorBoard event files in ``folder``, as TensorBoard reads them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_record_scalars_names_each_number_and_leaves_out_the_rest():
    record = {"step": 4, "previous_token": [[0.5, 0.25]], "induction": [[0.125, math.nan]], "loss_first": 4.0,
              "icl_score": None, "lens_loss": [3.0, 2.0], "weight_norm": [1.5], "loss_by_position": [1.0, 2.0],
              "attention": {"0.0": [[1.0]]}, "measurements": {"probe": 0.75, "parts": {"a": 1, "b": "x"}}}
    assert record_scalars(record) == {
        "microscope/L0H0/previous_token": 0.5, "microscope/L0H1/previous_token": 0.25,
        "microscope/L0H0/induction": 0.125, "microscope/lens_loss/0": 3.0, "microscope/lens_loss/1": 2.0,
        "microscope/weight_norm/L0": 1.5, "microscope/loss_first": 4.0, "microscope/measurements/probe": 0.75,
        "microscope/measurements/parts/a": 1.0}


def test_microscope_scalars_reach_tensorboard_and_resume_without_repeats(tmp_path):
    run = tmp_path / "run"
    train(config(tmp_path, max_steps=4, eval_every=2, watch=WATCH, log="tensorboard"))
    records = read_records(run / RECORDS)
    assert [r["step"] for r in records] == [0, 2, 4]
    logged = scalars(run / "tensorboard")
    for tag in ("microscope/L0H1/induction", "microscope/L0H0/previous_token", "microscope/loss_repeat",
                "microscope/lens_loss/1", "microscope/weight_norm/L0"):
        assert [step for step, _ in logged[tag]] == [0, 2, 4], tag
    for record in records:  # the values are the records' own (float32 in the event file)
        for tag, value in record_scalars(record).items():
            assert dict(logged[tag])[record["step"]] == pytest.approx(value, rel=1e-6, abs=1e-7)

    train(config(tmp_path, max_steps=8, eval_every=2, watch=WATCH, log="tensorboard", resume=True))
    assert [r["step"] for r in read_records(run / RECORDS)] == [0, 2, 4, 6, 8]
    steps = [step for step, _ in scalars(run / "tensorboard")["microscope/L0H1/induction"]]
    assert steps == [0, 2, 4, 6, 8]  # each step once
