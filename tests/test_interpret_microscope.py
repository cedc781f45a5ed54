"""The training microscope: what it records, that it changes nothing in training, and that a resumed
run's series equal an uninterrupted run's (the cost is measured by benchmarks/bench_microscope.py)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from glassformer.errors import GlassformerError
from glassformer.io.loaders import read_records
from glassformer.training import prepare_run
from glassformer.training.microscope import META, RECORDS, WatchConfig
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


# ---------------------------------------------------------------------------------------------- measurements
def _probe_loss(model, probe):
    """A user's measurement: the next-token loss on the probe text, and one head's induction score."""
    from glassformer.interpret import next_token_loss

    return {"loss": next_token_loss(model(probe.text), probe.text), "rows": probe.text.shape[0]}


def _noisy_backward(model, probe):
    """A careless measurement: draws random numbers and leaves gradients in the parameters."""
    from glassformer.interpret import next_token_loss

    torch.rand(3)
    next_token_loss(model(probe.text), probe.text).backward()
    return 1.0


def test_a_users_measurement_is_recorded_and_replayed_over_checkpoints(tmp_path):
    from glassformer.interpret import next_token_loss
    from glassformer.training import Trainer, save_checkpoint
    from glassformer.training.replay import replay_checkpoints

    cfg = config(tmp_path, max_steps=6, watch=WATCH)
    run = prepare_run(cfg)
    save_checkpoint(tmp_path / "ckpts" / "ckpt-000000", run.model, run.tokenizer)
    trainer = Trainer(cfg, run.model, run.tokenizer, run.batches)
    trainer.microscope.add("probe/loss", _probe_loss)
    trainer.microscope.add("careless", _noisy_backward)
    with pytest.raises(GlassformerError, match="taken"):
        trainer.microscope.add("careless", _noisy_backward)
    trainer.train()
    save_checkpoint(tmp_path / "ckpts" / "ckpt-000006", trainer.model, run.tokenizer)
    live = read_records(tmp_path / "run" / RECORDS)
    assert [r["step"] for r in live] == [0, 2, 4, 6]
    ids = trainer.microscope.probe_text
    with torch.no_grad():
        trainer.model.eval()
        expected = float(next_token_loss(trainer.model(ids), ids))
    assert live[-1]["measurements"]["probe/loss"]["loss"] == pytest.approx(expected, abs=1e-6)
    assert live[0]["measurements"]["probe/loss"]["loss"] != live[-1]["measurements"]["probe/loss"]["loss"]
    # the careless measurement's gradients and random numbers did not reach training
    plain, _ = train(config(tmp_path, "plain", max_steps=6))
    for (name, a), b in zip(trainer.model.state_dict().items(), plain.model.state_dict().values()):
        assert torch.equal(a, b), name
    # replayed over the saved checkpoints: the same records as training wrote at those steps
    records = replay_checkpoints(tmp_path / "ckpts", tmp_path / "replayed", watch=WATCH, probe_text=ids,
                     measurements={"probe/loss": _probe_loss, "careless": _noisy_backward})
    assert [r["step"] for r in records] == [0, 6]
    assert records[0] == live[0] and records[1] == live[-1]
    assert read_records(tmp_path / "replayed" / RECORDS) == records


def test_measurements_named_in_the_watch_block_are_imported(tmp_path):
    watch = {**WATCH, "measurements": {"loss": "test_interpret_microscope:_probe_loss"}}
    train(config(tmp_path, max_steps=2, watch=watch))
    assert "loss" in read_records(tmp_path / "run" / RECORDS)[-1]["measurements"]["loss"]
    with pytest.raises(GlassformerError, match="watch.measurements"):
        WatchConfig.from_dict({"measurements": {"x": "no_colon"}})
    cfg = config(tmp_path, "bad", watch={"measurements": {"x": "no_such_module_here:f"}})
    run = prepare_run(cfg)
    from glassformer.training import Trainer

    with pytest.raises(GlassformerError, match=r"watch.measurements.x: cannot import"):
        Trainer(cfg, run.model, run.tokenizer, run.batches)


# ---------------------------------------------------------------------------------------------- phase change
def test_phase_change_detector_finds_an_abrupt_lasting_drop_and_nothing_else():
    from glassformer.interpret.measurements import detect_phase_change

    steps = list(range(0, 1000, 20))
    g = torch.Generator().manual_seed(0)
    noise = (torch.rand(len(steps), generator=g) - 0.5) * 0.2
    flat = [4.0 + float(e) for e in noise]
    dipped = list(flat)
    dipped[42] = 1.5  # one noisy dip (step 840) that crosses halfway: not a phase change
    assert detect_phase_change(steps, flat) is None
    assert detect_phase_change(steps, dipped) is None
    slow = [4.0 - 2.5 * i / len(steps) + float(e) for i, e in enumerate(noise)]  # a steady decline
    assert detect_phase_change(steps, slow) is None
    sharp = [(4.0 if s < 400 else 1.0 if s > 460 else 2.5) + float(e) for s, e in zip(steps, noise)]
    found = detect_phase_change(steps, sharp)
    assert found is not None and 400 <= found["step"] <= 480 and found["width"] <= 100
    rebound = [v if s < 700 else 4.0 for s, v in zip(steps, sharp)]  # falls, then comes back: not lasting
    assert detect_phase_change(steps, rebound) is None
    with pytest.raises(GlassformerError, match="same length"):
        detect_phase_change([0, 1], [1.0])


def test_icl_score_is_late_minus_early_loss():
    from glassformer.interpret.measurements import icl_score

    loss = torch.linspace(3.0, 1.0, 100)
    assert icl_score(loss) == pytest.approx(float(loss[95:].mean() - loss[8:13].mean()), abs=1e-6)
    assert icl_score(torch.full((40,), 2.0)) == pytest.approx(0.0)
    with pytest.raises(GlassformerError, match="3 positions"):
        icl_score([1.0, 2.0])


def test_records_hold_per_position_loss_and_scores_at_several_lengths(tmp_path):
    train(config(tmp_path, max_steps=2, watch=WATCH))
    last = read_records(tmp_path / "run" / RECORDS)[-1]
    assert len(last["loss_by_position"]) == 7 and isinstance(last["icl_score"], float)
    by_length = last["induction_by_length"]
    assert set(by_length) == {"3", "2"}
    lowest = torch.minimum(torch.tensor(by_length["3"]), torch.tensor(by_length["2"]))
    torch.testing.assert_close(torch.tensor(last["induction"]), lowest, rtol=0, atol=1e-4)


def test_a_fixed_distance_head_is_not_called_induction():
    from glassformer import TransformerLM
    from glassformer.interpret import hooks, probe_lengths, scores_over_lengths

    torch.manual_seed(0)
    model = TransformerLM(vocab_size=50, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=64).eval()
    n = 12

    def fixed_distance(pattern, hook):  # head 0 attends n - 1 back (where it can), whatever the tokens
        T = pattern.shape[-1]
        fixed = torch.zeros(T, T)
        rows = torch.arange(T)
        fixed[rows, (rows - (n - 1)).clamp_min(0)] = 1.0
        pattern = pattern.clone()
        pattern[:, 0] = fixed
        return pattern

    with hooks(model, [("pattern", fixed_distance)]):
        scores = scores_over_lengths(model, probe_lengths(n), batch=4)
    by_length = scores["induction_by_length"][:, 0, 0]
    assert probe_lengths(n) == [12, 9, 6]
    assert by_length[0] == pytest.approx(1.0) and float(by_length[1:].max()) < 0.05  # one length only
    assert float(scores["induction"][0, 0]) < 0.05


def test_bad_measurements_and_series_are_errors_naming_them(tmp_path):
    from glassformer.training import Trainer
    from glassformer.training.microscope import replay
    from glassformer.training.replay import checkpoint_steps

    with pytest.raises(GlassformerError, match=r"watch.probe_lengths\[\]"):
        WatchConfig.from_dict({"probe_lengths": [1]})
    cfg = config(tmp_path, max_steps=2, watch=WATCH)
    run = prepare_run(cfg)
    trainer = Trainer(cfg, run.model, run.tokenizer, run.batches)
    trainer.microscope.add("huge", lambda model, probe: torch.zeros(20_000))
    with pytest.raises(GlassformerError, match="measurement .huge. returned more than 10,000 numbers"):
        trainer.microscope.measure(trainer.model, 0)
    trainer.microscope.measurements.clear()
    trainer.microscope.add("words", lambda model, probe: object())
    with pytest.raises(GlassformerError, match="measurement 'words' returned a object"):
        trainer.microscope.measure(trainer.model, 0)
    with pytest.raises(GlassformerError, match="must be a function"):
        trainer.microscope.add("not_callable", 3)
    with pytest.raises(GlassformerError, match="at least one"):
        replay([])
    (tmp_path / "empty").mkdir()
    with pytest.raises(GlassformerError, match="no checkpoint folders"):
        checkpoint_steps(tmp_path / "empty")
    with pytest.raises(GlassformerError, match="not a checkpoint folder"):
        checkpoint_steps([tmp_path / "ckpt-000010"])


def test_phase_change_detector_reads_a_rise_or_a_fall_at_any_offset():
    from glassformer.interpret.measurements import detect_phase_change

    steps = list(range(0, 1000, 20))
    noise = (torch.rand(len(steps), generator=torch.Generator().manual_seed(0)) - 0.5) * 0.02
    score = [(0.05 if s < 400 else 0.9 if s > 460 else 0.5) + float(e) for s, e in zip(steps, noise)]  # rises
    found = [detect_phase_change(steps, [f(v) for v in score])
             for f in (lambda v: v, lambda v: -v, lambda v: 1 - v, lambda v: v + 5)]
    assert all(f is not None for f in found), found
    assert len({f["step"] for f in found}) == 1 and 400 <= found[0]["step"] <= 480
    assert len({f["width"] for f in found}) == 1
    assert found[1]["from"] == pytest.approx(-found[0]["from"]) and found[1]["to"] == pytest.approx(-found[0]["to"])


@pytest.mark.parametrize("late", [2, 3])
def test_a_drop_in_the_last_records_is_not_lasting(late):
    from glassformer.interpret.measurements import detect_phase_change

    steps = list(range(0, 400, 20))
    values = [4.0 + 0.01 * (i % 3) for i in range(len(steps) - late)] + [1.0] * late
    assert detect_phase_change(steps, values) is None
    values = [4.0 + 0.01 * (i % 3) for i in range(len(steps) - 6)] + [1.0] * 6  # six records on: it lasts
    assert detect_phase_change(steps, values)["step"] == steps[-6]


def test_a_replay_of_a_watched_run_equals_its_records(tmp_path):
    """Replayed over the run's own checkpoints with nothing but the folder: the run's probe text and settings,
    so the text probe's numbers (lens loss, entropy, ICL score, loss by position) equal the records'."""
    from glassformer.training import Trainer
    from glassformer.training.replay import replay_checkpoints

    cfg = config(tmp_path, max_steps=4, eval_every=2, watch={**WATCH, "text_rows": 3})
    run = prepare_run(cfg)
    trainer = Trainer(cfg, run.model, run.tokenizer, run.batches)
    trainer.microscope.add("probe/loss", _probe_loss)
    trainer.train()
    meta = json.loads((tmp_path / "run" / META).read_text())
    assert meta["measurements"] == {"probe/loss": f"{__name__}:_probe_loss"}
    assert torch.equal(torch.tensor(meta["probe_text"]), trainer.microscope.probe_text)
    live = {r["step"]: r for r in read_records(tmp_path / "run" / RECORDS)}
    step, folder = 4, tmp_path / "run" / "ckpt-000004"
    replayed = replay_checkpoints({step: folder}, tmp_path / "replayed", measurements={"probe/loss": _probe_loss})
    record = replayed[0]
    for key in ("lens_loss", "loss_by_position", "entropy", "resid_norm"):
        assert torch.allclose(torch.tensor(record[key]), torch.tensor(live[step][key]), atol=1e-6), key
    assert record["icl_score"] == pytest.approx(live[step]["icl_score"], abs=1e-6)
    assert record["measurements"] == live[step]["measurements"]
    (tmp_path / "run" / META).write_text(json.dumps({**meta, "probe_text": [[1, 2], [3]]}))
    with pytest.raises(GlassformerError, match="probe_text must be rows of token ids"):
        replay_checkpoints({step: folder})
