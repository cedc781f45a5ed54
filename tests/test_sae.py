"""Sparse autoencoders (glassformer.interpret.sae): a planted dictionary is recovered, an identity SAE
spliced in changes nothing, files round-trip, a resumed run is bit-identical, bad options are refused."""

from __future__ import annotations

import json
import os
import signal

import pytest
import torch

from glassformer import EncoderDecoder, TransformerLM
from glassformer.cli import main
from glassformer.errors import BadFileError, GlassformerError
from glassformer.generation import generate
from glassformer.interpret import hooks, run_with_hooks
from glassformer.interpret.sae import (
    ActivationSource,
    SAETrainConfig,
    SAETrainer,
    SparseAutoencoder,
    clamp_hook,
    evaluate_sae,
    feature_summary,
    identity_sae,
    load_sae,
    reconstruction_hook,
    save_sae,
)
from glassformer.tokenizers.char import CharTokenizer
from glassformer.training.checkpoint import save_checkpoint

TEXT = ("ROMEO:\nBut soft, what light through yonder window breaks?\n\nJULIET:\nO Romeo, Romeo, wherefore art "
        "thou Romeo?\n\n") * 30
TOK = CharTokenizer.from_text(TEXT + "\t", specials=["pad", "bos", "eos", "mask"])
SMALL = dict(d_model=16, n_heads=2, d_ff=32, max_len=24)


class Planted:
    """Rows that are sparse sums of a known dictionary: 3 of 32 unit directions in 16 dimensions."""

    def __init__(self, d: int = 16, n: int = 32, active: int = 3, seed: int = 7):
        g = torch.Generator().manual_seed(seed)
        D = torch.randn(n, d, generator=g)
        self.D = D / D.norm(dim=1, keepdim=True)
        self.g = torch.Generator().manual_seed(seed + 1)
        self.n, self.active = n, active

    def next_rows(self, rows: int = 512) -> torch.Tensor:
        chosen = torch.rand(rows, self.n, generator=self.g).argsort(1)[:, :self.active]
        size = 1 + torch.rand(rows, self.active, generator=self.g)
        return torch.zeros(rows, self.n).scatter(1, chosen, size) @ self.D

    def state_dict(self):
        return {"g": self.g.get_state()}

    def load_state_dict(self, state):
        self.g.set_state(state["g"])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("sae") / "corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def lm(attn: str = "causal") -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(vocab_size=TOK.vocab_size, n_layers=2, attn=attn, **SMALL).eval()


@pytest.mark.parametrize("kind, options", [("topk", {"k": 3}),
                                           ("relu", {"l1_coefficient": 2.0, "resample_every": 100})])
def test_planted_sparse_dictionary_is_recovered(tmp_path, kind, options):
    source = Planted()
    config = SAETrainConfig.from_dict(dict(hook="x", kind=kind, d_sae=64, steps=1200, batch_size=256,
                                           buffer_size=2048, lr=3e-3, dead_window=50, out_dir=str(tmp_path),
                                           progress=False, save_every=0, **options))
    trainer = SAETrainer(config, source=source, d_in=16)
    untrained = (source.D @ trainer.sae.W_dec.detach().T).max(1).values
    trainer.train()
    cosine = (source.D @ trainer.sae.W_dec.detach().T).max(1).values  # each true direction's best match
    assert int((untrained > 0.9).sum()) == 0
    assert int((cosine > 0.9).sum()) >= 30 and float(cosine.mean()) > 0.93, cosine
    assert torch.allclose(trainer.sae.W_dec.norm(dim=1), torch.ones(64), atol=1e-5)  # unit decoder rows


@pytest.mark.parametrize("hook", ["blocks.1.hook_resid_post", "blocks.0.attn.hook_z", "blocks.0.mlp.hook_post"])
def test_identity_sae_spliced_in_changes_nothing_in_forward_and_generation(hook):
    model = lm()
    ids = torch.tensor([TOK.encode("ROMEO: But soft")])
    width = {"blocks.0.mlp.hook_post": 32}.get(hook, 16)
    sae = identity_sae(width, hook)
    plain = model(ids)
    spliced = run_with_hooks(model, ids, hooks=[reconstruction_hook(sae)])
    assert torch.equal(plain, spliced)
    with hooks(model, [reconstruction_hook(sae)]):
        hooked = generate(model, ids, 8)
    assert torch.equal(hooked, generate(model, ids, 8))


def test_clamp_hook_sets_one_feature_and_steers():
    _, clamp = clamp_hook(identity_sae(4), 1, 2.5)  # feature 1 of the identity SAE is ReLU(x[1])
    x = torch.tensor([[[1.0, 3.0, -1.0, 0.5]]])
    assert torch.equal(clamp(x, None), torch.tensor([[[1.0, 2.5, -1.0, 0.5]]]))
    _, own = clamp_hook(identity_sae(4), 1, 3.0)  # its own value: nothing changes
    assert torch.equal(own(x, None), x)
    model = lm()
    ids = torch.tensor([TOK.encode("JULIET: O Romeo")])
    sae = SparseAutoencoder(d_in=16, d_sae=64, kind="topk", k=4, hook="blocks.0.hook_resid_post")
    steered = run_with_hooks(model, ids, hooks=[clamp_hook(sae, 5, 50.0)])
    assert (steered - model(ids)).abs().max() > 0.1
    with hooks(model, [clamp_hook(sae, 5, 50.0)]):
        pushed = generate(model, ids, 6)
    assert pushed.shape == (1, ids.shape[1] + 6)
    with pytest.raises(GlassformerError, match="feature"):
        clamp_hook(sae, 64, 1.0)
    with pytest.raises(GlassformerError, match="value"):
        clamp_hook(sae, 1, float("nan"))


def test_save_load_round_trip_and_refusals(tmp_path):
    sae = SparseAutoencoder(d_in=16, d_sae=48, kind="topk", k=5, hook="blocks.0.hook_resid_post", input_scale=0.5)
    path = save_sae(sae, tmp_path / "sae", info={"note": "x"})
    again = load_sae(path)
    assert again.config == sae.config
    for name, value in sae.state_dict().items():
        assert torch.equal(again.state_dict()[name], value)
    x = torch.randn(7, 16)
    assert torch.equal(again(x), sae(x))
    meta = json.loads((path / "sae.json").read_text())
    meta["d_sae"] = 49
    (path / "sae.json").write_text(json.dumps(meta))
    with pytest.raises(BadFileError, match=r"sae.safetensors: W_dec has shape \(48, 16\), expected \(49, 16\)"):
        load_sae(path)
    own = tmp_path / "mine"
    own.mkdir()
    (own / "notes.txt").write_text("keep me")
    with pytest.raises(GlassformerError, match="not an SAE folder"):
        save_sae(sae, own)
    assert (own / "notes.txt").read_text() == "keep me"
    with pytest.raises(GlassformerError, match="d_in=16"):
        sae(torch.randn(3, 8))


def _config(tmp_path, corpus, **extra):
    options = dict(hook="blocks.1.hook_resid_post", data=[str(corpus)], out_dir=str(tmp_path), d_sae=32, k=4,
                   steps=12, batch_size=64, buffer_size=160, context=16, model_batch=4, lr=1e-3, progress=False,
                   save_every=0, dead_window=3)
    return SAETrainConfig.from_dict({**options, **extra})


@pytest.mark.parametrize("kind", ["topk", "relu"])
def test_resume_is_bit_identical(tmp_path, corpus, kind):
    model = lm()
    extra = {"kind": kind, "resample_every": 4}
    straight = SAETrainer(_config(tmp_path / "a", corpus, **extra), model, TOK)
    straight.train()
    first = SAETrainer(_config(tmp_path / "b", corpus, **extra), model, TOK)
    first.train(stop_at=5)
    resumed = SAETrainer(_config(tmp_path / "b", corpus, **extra), model, TOK)
    assert resumed.resume() and resumed.step == 5
    resumed.train()
    for name, value in straight.sae.state_dict().items():
        assert torch.equal(resumed.sae.state_dict()[name], value), name
    assert resumed.history == straight.history
    changed = SAETrainer(_config(tmp_path / "b", corpus, **{**extra, "batch_size": 32}), model, TOK)
    with pytest.raises(BadFileError, match="batch_size"):
        changed.resume()


def test_identity_sae_metrics_are_perfect(corpus):
    model = lm()
    source = ActivationSource(model, TOK, "blocks.1.hook_resid_post", [corpus], context=16, batch=4, split="val")
    metrics = evaluate_sae(identity_sae(16, "blocks.1.hook_resid_post"), source, batches=2)
    assert metrics["explained_variance"] == pytest.approx(1.0, abs=1e-9)
    assert metrics["ce_sae"] == pytest.approx(metrics["ce_clean"], abs=1e-9)
    assert metrics["ce_recovered"] == pytest.approx(1.0, abs=1e-6)
    assert metrics["tokens"] == 2 * 4 * 16 and metrics["l0"] <= 16


@pytest.mark.parametrize("attn", ["bidirectional", "prefix"])
def test_every_lm_kind_trains(tmp_path, corpus, attn):
    model = lm(attn)
    trainer = SAETrainer(_config(tmp_path, corpus, steps=3), model, TOK)
    trainer.train()
    source = ActivationSource(model, TOK, "blocks.1.hook_resid_post", [corpus], context=16, batch=4, split="val")
    metrics = evaluate_sae(trainer.sae, source, batches=1)
    assert "ce_recovered" in metrics  # prefix: next-token loss after the prefix; bidirectional: masked tokens


@pytest.mark.parametrize("hook", ["encoder_blocks.0.hook_resid_post", "decoder_blocks.0.cross_attn.hook_z"])
def test_encoder_decoder_stacks(tmp_path, hook):
    torch.manual_seed(0)
    model = EncoderDecoder(vocab_size=TOK.vocab_size, n_enc=1, n_dec=1, **SMALL).eval()
    lines = tmp_path / "pairs.tsv"
    pairs = (f"but soft {'a' * (i % 7)}\tO Romeo {'o' * (i % 5)}\n" for i in range(40))
    lines.write_text("".join(pairs), encoding="utf-8")
    config = SAETrainConfig.from_dict(dict(hook=hook, data=[str(lines)], out_dir=str(tmp_path / "out"), d_sae=32,
                                           k=4, steps=3, batch_size=32, buffer_size=64, context=16, model_batch=4,
                                           progress=False, save_every=0))
    trainer = SAETrainer(config, model, TOK)
    trainer.train()
    source = ActivationSource(model, TOK, hook, [lines], context=16, batch=4, split="val")
    inputs = source.next_inputs()
    assert source.activations(inputs).shape[:2] == inputs.valid.shape
    metrics = evaluate_sae(trainer.sae, source, batches=1)
    assert 0 < metrics["tokens"] < 4 * 16 and "ce_recovered" in metrics  # padded positions left out


def test_feature_summary_lists_live_features_with_contexts(corpus):
    model = lm()
    sae = SparseAutoencoder(d_in=16, d_sae=32, kind="topk", k=3, hook="blocks.1.hook_resid_post")
    source = ActivationSource(model, TOK, sae.hook, [corpus], context=16, batch=4, split="val")
    summary = feature_summary(sae, source, windows=8, top=3, before=4, after=2)
    features = summary["features"]
    assert features and len(features) + len(summary["dead"]) == 32
    assert [f["frequency"] for f in features] == sorted((f["frequency"] for f in features), reverse=True)
    first = features[0]
    assert 1 <= len(first["contexts"]) <= 3 and sum(first["hist"]) == round(first["frequency"] * summary["tokens"])
    context = first["contexts"][0]
    assert max(context["acts"]) == context["acts"][context["peak"]] and len(context["tokens"]) <= 7
    assert len(first["up"]) == 8 and first["up"][0][1] >= first["up"][-1][1] >= 0
    assert len(first["down"]) == 8 and first["down"][0][1] <= first["down"][-1][1] <= 0  # most negative first
    assert all(str(t) in summary["vocab"] for t in context["tokens"])


@pytest.mark.parametrize("bad, match", [
    ({"lr": float("nan")}, "lr must be a finite number"),
    ({"l1_coefficient": float("inf")}, "l1_coefficient"),
    ({"kind": "gated"}, "kind must be one of"),
    ({"steps": 0}, "steps must be an int >= 1"),
    ({"buffer_size": 10}, "buffer_size"),
    ({"colour": 1}, "unknown SAE config key"),
    ({"hook": ""}, "hook is required"),
    ({"device": "cudafoo"}, "device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'cudafoo'"),
])
def test_bad_options_are_refused(bad, match):
    with pytest.raises(GlassformerError, match=match):
        SAETrainConfig.from_dict({"hook": "blocks.0.hook_resid_post", **bad})


def test_hooks_an_sae_cannot_read_are_refused(corpus):
    model = lm()
    with pytest.raises(GlassformerError, match="attention weights"):
        ActivationSource(model, TOK, "blocks.0.attn.hook_pattern", [corpus])
    with pytest.raises(GlassformerError, match="not a hook point"):
        ActivationSource(model, TOK, "blocks.9.hook_resid_post", [corpus])
    with pytest.raises(GlassformerError, match="selects 2 points"):
        ActivationSource(model, TOK, "resid_post", [corpus])
    with pytest.raises(GlassformerError, match="context"):
        ActivationSource(model, TOK, "blocks.0.hook_resid_post", [corpus], context=100)


def test_command_trains_writes_pages_and_resumes(tmp_path, corpus, capsys):
    model = lm()
    save_checkpoint(tmp_path / "run" / "best", model, TOK)
    words = ["sae", str(tmp_path / "run" / "best"), "--hook", "blocks.1.hook_resid_post", "--data", str(corpus),
             "--d_sae", "32", "--k", "4", "--steps", "6", "--batch_size", "64", "--buffer_size", "128",
             "--context", "16", "--model_batch", "4", "--feature_windows", "8", "--eval_batches", "1",
             "--save_every", "3", "--log_every", "2"]
    assert main(words) == 0
    out = tmp_path / "run" / "sae-blocks.1.hook_resid_post"
    captured = capsys.readouterr()
    printed = captured.out
    assert json.loads(printed.splitlines()[0])["steps"] == 6 and str(out / "sae") in printed
    # into a file (capsys is no terminal): a line per logged step, as train prints
    assert [line.split(" | ")[0] for line in captured.err.splitlines() if line.startswith("sae step")] == [
        "sae step 2/6", "sae step 4/6", "sae step 6/6"]
    sae = load_sae(out)
    assert sae.hook == "blocks.1.hook_resid_post" and (out / "features.html").is_file()
    assert json.loads((out / "metrics.json").read_text())["tokens"] == 64
    assert main([*words, "--steps", "8", "--resume", "true", "--progress", "false"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out.splitlines()[0])["steps"] == 8
    assert f"resuming {out}/state at step 6 of 8\n" in captured.err  # progress: false keeps it ...
    assert "sae step" not in captured.err  # ... and quiets the progress lines
    assert main([*words, "--lr", "nan"]) == 2
    assert "lr must be a finite number" in capsys.readouterr().err


def test_character_kinds_that_name_features():
    from glassformer.recipes.sae import CHARACTER_KINDS, _kind_of_each_position

    names = [name for name, _ in CHARACTER_KINDS]
    text = "x\nROMEO:\nBut soft"
    kinds = {i: {names[k] for k, yes in enumerate(row) if yes} for i, row in enumerate(_kind_of_each_position(text))}
    assert "in a speaker's name line" in kinds[3] and "in a speaker's name line" not in kinds[10]
    assert "first character of a line" in kinds[9] and kinds[1] == {"newline"} and kinds[12] == {"space"}
    assert kinds[8] == {"newline ending a speaker's name", "newline"}
    assert "vowel after a consonant" in kinds[10] and "vowel after a consonant" not in kinds[0]
    assert "in a speaker's name line" not in kinds[0]  # the window cuts its line: unknown, not a name


def test_command_logs_to_tensorboard_and_a_resumed_run_continues_its_series(tmp_path, corpus, capsys):
    pytest.importorskip("tensorboard")
    from test_trackers import scalars

    model = lm()
    save_checkpoint(tmp_path / "run" / "best", model, TOK)
    out = tmp_path / "sae"
    words = ["sae", str(tmp_path / "run" / "best"), "--hook", "blocks.1.hook_resid_post", "--data", str(corpus),
             "--out_dir", str(out), "--d_sae", "32", "--k", "4", "--steps", "4", "--batch_size", "64",
             "--buffer_size", "128", "--context", "16", "--model_batch", "4", "--progress", "false",
             "--feature_windows", "0", "--eval_batches", "1", "--log_every", "1", "--log", "tensorboard"]
    assert main(words) == 0
    assert main([*words, "--steps", "6", "--resume", "true"]) == 0
    capsys.readouterr()
    logged = scalars(out / "tensorboard")
    assert [step for step, _ in logged["sae/sq_err"]] == [1, 2, 3, 4, 5, 6]  # each step once, across the resume
    history = json.loads((out / "sae" / "sae.json").read_text())["info"]["steps"]
    assert history == 6 and [s for s, _ in logged["sae_eval/explained_variance"]][-1] == 6
    (out / "tensorboard" / "notes.txt").write_text("mine")
    assert main([*words, "--log", "tensorboard"]) == 2  # a fresh run never removes a user's file there
    assert "notes.txt" in capsys.readouterr().err and (out / "tensorboard" / "notes.txt").read_text() == "mine"


def _tampered_state(tmp_path, corpus, change) -> SAETrainer:
    """A run stopped at step 3 whose state file ``change`` edited; returns a trainer about to resume it."""
    model = lm()
    SAETrainer(_config(tmp_path, corpus), model, TOK).train(stop_at=3)
    file = tmp_path / "state" / "train_state.pt"
    state = torch.load(file, weights_only=True)
    change(state)
    torch.save(state, file)
    return SAETrainer(_config(tmp_path, corpus), model, TOK)


def _wrong_exp_avg(state):
    """Issue 31: a wrong-shaped exp_avg with fused: true reached torch's fused Adam (a segfault)."""
    state["optimizer"]["state"][0]["exp_avg"] = torch.zeros(3)
    state["optimizer"]["param_groups"][0]["fused"] = True


@pytest.mark.parametrize(("change", "match"), [
    (_wrong_exp_avg, "exp_avg"),
    (lambda s: s.update(step=-100), "step"),
    (lambda s: s.update(last_fired=torch.zeros(2)), "last_fired"),
    (lambda s: s.pop("buffer"), "buffer"),
])
def test_resume_refuses_a_tampered_state_in_one_error(tmp_path, corpus, change, match):
    with pytest.raises(BadFileError, match=match):
        _tampered_state(tmp_path, corpus, change).resume()


def test_resume_refuses_a_state_that_inflates_before_torch_reads_it(tmp_path, corpus):
    """Issue 31: a few-MB train_state.pt whose record deflates to GBs cost that memory inside torch.load."""
    import zipfile

    trainer = _tampered_state(tmp_path, corpus, lambda s: None)
    file = tmp_path / "state" / "train_state.pt"
    with zipfile.ZipFile(file) as archive:
        records = [(info.filename, archive.read(info)) for info in archive.infolist()]
    with zipfile.ZipFile(file, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in records:
            archive.writestr(name, data + (b"\0" * (1 << 22) if name.endswith("data.pkl") else b""))
    assert file.stat().st_size < 1 << 20  # 4 MiB of zeros deflate to a few KiB
    with pytest.raises(BadFileError, match="refused before reading"):
        trainer.resume()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_step_saves_at_the_step_end_and_the_resume_is_bit_identical(tmp_path, corpus, signum):
    """Issue 31: SAE Ctrl-C resumes differed in 6 of 11 runs: the state was saved mid-step (the buffer
    had moved on, the step had not). Now the step ends, the state is saved there, and the resume matches
    a run that was never stopped."""
    model = lm()
    straight = SAETrainer(_config(tmp_path / "a", corpus), model, TOK)
    straight.train()
    first = SAETrainer(_config(tmp_path / "b", corpus), model, TOK)
    draw = first.buffer.next_batch

    def interrupted():  # the signal arrives after the batch is drawn, before the step is taken
        batch = draw()
        if first.step == 4:
            os.kill(os.getpid(), signum)
        return batch

    first.buffer.next_batch = interrupted
    previous = signal.getsignal(signum)
    with pytest.raises(KeyboardInterrupt):
        first.train()
    assert signal.getsignal(signum) is previous  # the handlers in place before are back
    assert first.stop_signal == signum and first.step == 5
    resumed = SAETrainer(_config(tmp_path / "b", corpus), model, TOK)
    assert resumed.resume() and resumed.step == 5
    resumed.train()
    for name, value in straight.sae.state_dict().items():
        assert torch.equal(resumed.sae.state_dict()[name], value), name
    assert resumed.history == straight.history


def test_a_state_moved_aside_by_a_crash_between_renames_is_resumed(tmp_path, corpus):
    """A kill between the two renames of a save leaves state/ as .state.old-PID: resume puts it back."""
    model = lm()
    SAETrainer(_config(tmp_path, corpus), model, TOK).train(stop_at=3)
    os.replace(tmp_path / "state", tmp_path / ".state.old-12345")
    resumed = SAETrainer(_config(tmp_path, corpus), model, TOK)
    assert resumed.resume() and resumed.step == 3


def test_a_run_tidies_only_its_own_leftovers_and_never_while_another_holds_the_out_dir(tmp_path, corpus):
    """A kill mid-save leaves .state.tmp-*: the next run removes it (only when it holds glassformer's files);
    a second run of a locked out_dir is refused before it removes anything (the state of the first stays)."""
    from glassformer.interpret.sae import run_sae
    from glassformer.io.fileio import run_lock

    model, out = lm(), tmp_path / "run"
    SAETrainer(_config(out, corpus), model, TOK).train(stop_at=3)
    cut = out / ".state.tmp-999-abcd"
    cut.mkdir()
    (cut / "train_state.pt").write_bytes(b"PK\x03\x04 cut short")
    foreign = out / ".state.tmp-998-ffff"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    short = {"steps": 2, "feature_windows": 0, "eval_batches": 1}
    with run_lock(out), pytest.raises(GlassformerError, match="in use"):
        run_sae(_config(out, corpus, **short), model, TOK)
    assert (out / "state" / "train_state.pt").is_file() and cut.is_dir()
    run_sae(_config(out, corpus, **short), model, TOK)
    assert not cut.exists() and (foreign / "notes.txt").read_text() == "keep"
