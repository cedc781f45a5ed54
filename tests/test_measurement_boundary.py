"""A user's measurement runs inside a boundary (issue 47, root cause 6): whatever it raises (SystemExit
included), a wrong signature, a bad name or an oversized or self-holding result is one MeasurementError naming
it; a training run saves the step it reached before saying so; a result's size is checked before conversion."""

from __future__ import annotations

import pytest
import torch

from allocation_helpers import allocations
from glassformer.errors import ArgumentTypeError, MeasurementError
from glassformer.training import prepare_run
from glassformer.training.microscope import WatchConfig, _checked_value
from glassformer.training.run_dir import LAST
from training_helpers import config, train

WATCH = {"every": 2, "probe_length": 3, "probe_batch": 2, "text_rows": 2, "snapshot_tokens": 6}


def failing(model, probe):
    if probe.step >= 2:  # step 0's record (made before training) passes
        raise ValueError("no such head")
    return 0.0


def exiting(model, probe):
    if probe.step >= 2:
        raise SystemExit(0)
    return 0.0


def one_argument(model):
    return 1.0


@pytest.mark.parametrize("function,message", [
    ("failing", r"measurement 'm' failed: ValueError: no such head"),
    ("exiting", r"measurement 'm' failed: SystemExit: 0")])
def test_a_failing_measurement_is_one_line_after_the_step_is_saved(tmp_path, function, message):
    cfg = config(tmp_path, max_steps=6, eval_every=3,
                 watch={**WATCH, "measurements": {"m": f"test_measurement_boundary:{function}"}})
    with pytest.raises(MeasurementError, match=message) as refused:
        train(cfg)
    assert "\n" not in str(refused.value)
    last = tmp_path / "run" / LAST
    assert last.resolve().name == "ckpt-000002"  # step 2's record failed: step 2 was saved, then the error
    assert (last / "model.safetensors").is_file()


@pytest.mark.parametrize("spec,message", [
    (":f", "watch.measurements.m: cannot import ':f' (ValueError: Empty module name)"),
    ("test_measurement_boundary:one_argument", "must take two arguments (model, probe), its signature is (model)")])
def test_a_bad_name_or_signature_is_refused_before_training(tmp_path, spec, message):
    cfg = config(tmp_path, max_steps=2, watch={**WATCH, "measurements": {"m": spec}})
    run = prepare_run(cfg)
    from glassformer.training import Trainer

    with pytest.raises((MeasurementError, ArgumentTypeError)) as refused:
        Trainer(cfg, run.model, run.tokenizer, run.batches)
    assert message in str(refused.value)
    assert WatchConfig.from_dict({"measurements": {"m": spec}}).measurements == {"m": spec}


def test_a_results_size_is_checked_before_it_is_converted():
    """10^8 numbers (a view: nothing that size exists) are refused before .double() or .tolist() copies them."""
    huge = torch.zeros(1).expand(10**8)
    with allocations() as seen, pytest.raises(MeasurementError, match="returned more than 10,000 numbers"):
        _checked_value("huge", {"a": huge})
    assert seen.total() < 2**20, seen


def test_a_self_holding_or_deep_result_is_refused():
    loop: list = [1.0]
    loop.append(loop)
    with pytest.raises(MeasurementError, match="nested more than 32 deep"):
        _checked_value("loop", loop)
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(MeasurementError, match="nested more than 32 deep"):
        _checked_value("deep", deep)
    assert _checked_value("fine", {"a": [1, 2.5, torch.tensor([3.0])], "b": None}) == \
        {"a": [1, 2.5, [3.0]], "b": None}
