"""The training microscope: what it records, that it changes nothing in training, and that a resumed
run's series equal an uninterrupted run's (the cost is measured by benchmarks/bench_microscope.py)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from glassformer.errors import GlassformerError
from glassformer.interpret.microscope import META, RECORDS, WatchConfig, read_records
from glassformer.training import prepare_run
from training_helpers import config, train

WATCH = {"every": 2, "probe_length": 3, "probe_batch": 2, "text_rows": 2, "snapshot_tokens": 6}


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_records_every_probe_at_its_steps(tmp_path):
    trainer, _ = train(config(tmp_path, max_steps=6, watch=WATCH))
    records = read_records(tmp_path / "run" / RECORDS)
    assert [r["step"] for r in records] == [0, 2, 4, 6]
    last, L, h = records[-1], 1, 2
    for kind in ("previous_token", "induction", "duplicate", "entropy"):
        assert torch.tensor(last[kind]).shape == (L, h), kind
    assert len(last["lens_loss"]) == len(last["resid_norm"]) == L + 1 and len(last["weight_norm"]) == L
    assert set(last["attention"]) == {"0.0", "0.1"} and torch.tensor(last["attention"]["0.1"]).shape == (6, 6)
    meta = json.loads((tmp_path / "run" / META).read_text())
    assert len(meta["tokens"]) == 6 and meta["heads"] == [[0, 0], [0, 1]]
    # the logit lens after the last block is the model's own loss on the probe text
    ids = trainer.microscope.probe_text
    with torch.no_grad():
        trainer.model.eval()
        loss = F.cross_entropy(trainer.model(ids)[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    assert last["lens_loss"][-1] == pytest.approx(float(loss), abs=1e-4)
    assert torch.tensor(last["attention"]["0.0"]).sum(-1).allclose(torch.ones(6), atol=2e-3)  # rows sum to 1


def test_watching_changes_no_weight_and_no_random_state(tmp_path):
    watched, _ = train(config(tmp_path, "watched", max_steps=4, watch=WATCH))  # dropout 0.1: random numbers
    plain, _ = train(config(tmp_path, "plain", max_steps=4))
    for (name, a), b in zip(watched.model.state_dict().items(), plain.model.state_dict().values()):
        assert torch.equal(a, b), name
    before = torch.get_rng_state()
    watched.model.train()
    watched.microscope.measure(watched.model, 99)
    assert torch.equal(before, torch.get_rng_state()) and watched.model.training  # mode restored


def test_resumed_series_equal_an_uninterrupted_run(tmp_path):
    straight = dict(max_steps=8, eval_every=4, lr_decay_steps=8, watch=WATCH)
    train(config(tmp_path, "straight", **straight))
    train(config(tmp_path, "split", **{**straight, "max_steps": 4}))
    file = tmp_path / "split" / RECORDS
    with open(file, "a", encoding="utf-8") as handle:  # a crash after recording step 6, before its checkpoint
        handle.write(json.dumps({"step": 6, "induction": [[9.0, 9.0]]}) + "\n" + '{"step": 7, "ind')
    train(config(tmp_path, "split", **straight, resume=True))
    assert read_records(file) == read_records(tmp_path / "straight" / RECORDS)
    assert [r["step"] for r in read_records(file)] == [0, 2, 4, 6, 8]


def test_bad_watch_blocks_are_errors_naming_the_key(tmp_path):
    with pytest.raises(GlassformerError, match=r"unknown watch key\(s\) \['evry'\]"):
        config(tmp_path, watch={"evry": 3})
    with pytest.raises(GlassformerError, match="watch.every"):
        config(tmp_path, watch={"every": -1})
    with pytest.raises(GlassformerError, match="watch.heads"):
        WatchConfig.from_dict({"heads": [[0]]})
    assert WatchConfig.from_dict({"every": "10", "heads": "[[0, 3]]"}) == WatchConfig(every=10, heads=[[0, 3]])
    cfg = config(tmp_path, watch={"heads": [[3, 0]]})
    run = prepare_run(cfg)
    from glassformer.training import Trainer

    with pytest.raises(GlassformerError, match=r"\[3, 0\] is out of range for 1 layers x 2 heads"):
        Trainer(cfg, run.model, run.tokenizer, run.batches)
    mlm = config(tmp_path, "mlm", objective="mlm", watch={"every": 1})
    run = prepare_run(mlm)
    with pytest.raises(GlassformerError, match="causal TransformerLMs"):
        Trainer(mlm, run.model, run.tokenizer, run.batches)
