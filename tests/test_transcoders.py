"""Transcoders (glassformer.interpret.transcoders): the module's forms agree (per layer, folded, read back from
circuit-tracer's folder), JumpReLU's pseudo-gradients are the paper's, training learns a planted map, a stopped
or signalled run resumes bit for bit, the metrics are the hand-computed ones, the command writes a folder
circuit-tracer reads, and bad options, models and folders get one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import torch

from glassformer import TransformerLM
from glassformer.cli import main
from glassformer.errors import BadFileError, GlassformerError
from glassformer.interpret import run_with_cache, run_with_hooks
from glassformer.interpret.sae import ActivationSource
from glassformer.interpret.transcoders import (
    TrainableTranscoders,
    TranscoderTrainConfig,
    TranscoderTrainer,
    evaluate_transcoders,
    load_transcoders,
    mlp_hooks,
    run_transcoders,
)
from glassformer.interpret.transcoders.model import jumprelu, step
from glassformer.tokenizers.char import CharTokenizer
from glassformer.training.checkpoint import save_checkpoint

TEXT = ("ROMEO:\nBut soft, what light through yonder window breaks?\n\nJULIET:\nO Romeo, Romeo, wherefore art "
        "thou Romeo?\n\n") * 30
TOK = CharTokenizer.from_text(TEXT, specials=["bos"])
SETS = [("plt", "relu", True), ("plt", "jumprelu", False), ("plt", "topk", False), ("clt", "relu", False),
        ("clt", "jumprelu", False)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("tc") / "corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def lm() -> TransformerLM:
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=TOK.vocab_size, n_layers=2, d_model=16, n_heads=2, d_ff=32, max_len=24).eval()
    with torch.no_grad():  # trained-looking norms: gains not 1, biases not 0
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


def trained_looking(kind: str, activation: str, skip: bool) -> TrainableTranscoders:
    torch.manual_seed(1)
    tc = TrainableTranscoders(n_layers=3, d_model=8, d_transcoder=16, kind=kind, activation=activation, k=4, skip=skip)
    with torch.no_grad():
        for p in tc.parameters():
            p.add_(0.2 * torch.randn_like(p))
        tc.input_scale.copy_(torch.tensor([0.5, 2.0, 1.5]))
        tc.output_scale.copy_(torch.tensor([3.0, 0.7, 1.1]))
        if tc.threshold is not None:
            tc.threshold.abs_()
    return tc


@pytest.mark.parametrize("kind, activation, skip", SETS)
def test_per_layer_folded_and_saved_forms_agree(tmp_path, kind, activation, skip):
    from glassformer.interpret.transcoders import save_transcoders

    tc = trained_looking(kind, activation, skip)
    x = torch.randn(5, 3, 8)
    y = tc(x)
    per_layer = [tc.encode_layer(x[:, i], i) for i in range(3)]
    assert torch.equal(torch.stack(per_layer, 1), tc.encode(x))
    stepwise = torch.stack([tc.decode_layer(per_layer, j, x[:, j]) for j in range(3)], 1)
    torch.testing.assert_close(stepwise, y, rtol=1e-5, atol=1e-6)
    path = save_transcoders(tc.to_transcoders(), tmp_path / "tc")
    back = TrainableTranscoders.from_transcoders(load_transcoders(path))
    assert float(back.input_scale.max()) == 1.0 and float(back.output_scale.min()) == 1.0  # folded into the weights
    torch.testing.assert_close(back(x), y, rtol=1e-5, atol=1e-6)
    if kind == "plt":  # a per-layer feature writes to its own layer only
        f = torch.zeros(1, 3, 16)
        f[0, 0, 3] = 1.0
        written = tc.decode(f, bias=False)
        assert written[0, 0].abs().sum() > 0 and written[0, 1:].abs().sum() == 0


def test_jumprelu_pseudo_gradients_are_the_papers():
    """∂/∂θ JumpReLU_θ(z) = −(θ/ε)·K((z − θ)/ε) and ∂/∂θ H(z − θ) = −(1/ε)·K(...), K the unit rectangle;
    the gradient to z is H(z − θ) for JumpReLU and none for the step (Rajamanoharan et al. 2024)."""
    z = torch.tensor([[0.100, 0.104, 0.2, -1.0], [0.098, 0.5, 0.3, 0.31]], requires_grad=True)
    theta = torch.tensor([0.1, 0.1, 0.3, 0.3], requires_grad=True)
    eps = 0.01
    out = jumprelu(z, theta, eps)
    assert torch.equal(out.detach(), z.detach() * (z.detach() > theta.detach()))
    out.sum().backward()
    near = ((z - theta).abs() < eps / 2).float()
    assert torch.equal(theta.grad, (-(theta / eps) * near).sum(0).detach())
    assert torch.equal(z.grad, (z > theta).float())
    theta.grad = None
    step(z, theta, eps).sum().backward()
    assert torch.equal(theta.grad, (-(1 / eps) * near).sum(0).detach())


class Planted:
    """MLP-like rows: y = relu(x W1ᵀ − 0.5) W2 for random x, 2 layers (rows (N, 4, 8): x0, x1, y0, y1)."""

    def __init__(self, seed: int = 3):
        g = torch.Generator().manual_seed(seed)
        self.W1 = torch.randn(2, 24, 8, generator=g) / 8 ** 0.5
        self.W2 = torch.randn(2, 24, 8, generator=g) / 24 ** 0.5
        self.g = torch.Generator().manual_seed(seed + 1)

    def next_rows(self, rows: int = 512) -> torch.Tensor:
        x = torch.randn(rows, 2, 8, generator=self.g)
        y = torch.einsum("nlf,lfd->nld", torch.relu(torch.einsum("nld,lfd->nlf", x, self.W1) - 0.5), self.W2)
        return torch.cat([x, y], dim=1)

    def state_dict(self):
        return {"g": self.g.get_state()}

    def load_state_dict(self, state):
        self.g.set_state(state["g"])


def test_training_learns_a_planted_mlp(tmp_path):
    config = TranscoderTrainConfig.from_dict(dict(out_dir=str(tmp_path), activation="relu", d_transcoder=48,
                                                  steps=200, batch_size=128,
                                                  buffer_size=512, lr=3e-3, sparsity_coefficient=1e-4,
                                                  progress=False, save_every=0, log_every=1))
    trainer = TranscoderTrainer(config, source=Planted(), n_layers=2, d_model=8)
    trainer.train()
    first, last = trainer.history[0], trainer.history[-1]
    assert first["nmse"] > 0.5 and last["nmse"] < 0.15, (first, last)  # at step 1, at step 200


def _config(tmp_path, corpus, **extra) -> TranscoderTrainConfig:
    options = dict(data=[str(corpus)], out_dir=str(tmp_path), d_transcoder=24, k=4, steps=10, batch_size=48,
                   buffer_size=128, context=12, model_batch=4, lr=1e-3, progress=False, save_every=0, dead_window=3,
                   log_every=1, feature_windows=0, eval_batches=1)
    return TranscoderTrainConfig.from_dict({**options, **extra})


@pytest.mark.parametrize("extra", [{"kind": "plt", "activation": "topk", "skip": True},
                                   {"kind": "clt", "activation": "jumprelu"}])
def test_resume_is_bit_identical(tmp_path, corpus, extra):
    model = lm()
    straight = TranscoderTrainer(_config(tmp_path / "a", corpus, **extra), model, TOK)
    straight.train()
    first = TranscoderTrainer(_config(tmp_path / "b", corpus, **extra), model, TOK)
    first.train(stop_at=4)
    resumed = TranscoderTrainer(_config(tmp_path / "b", corpus, **extra), model, TOK)
    assert resumed.resume() and resumed.step == 4
    resumed.train()
    for name, value in straight.transcoders.state_dict().items():
        assert torch.equal(resumed.transcoders.state_dict()[name], value), name
    assert resumed.history == straight.history and torch.equal(resumed.last_fired, straight.last_fired)
    changed = TranscoderTrainer(_config(tmp_path / "b", corpus, **{**extra, "d_transcoder": 32}), model, TOK)
    with pytest.raises(BadFileError, match="d_transcoder: saved 24, now 32"):
        changed.resume()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_step_saves_at_the_step_end_and_the_resume_is_bit_identical(tmp_path, corpus, signum):
    """The signal arrives after a batch is drawn, before its step: the step ends, the state is saved there,
    and the resumed run matches one that was never stopped (no race: the signal is sent from the draw)."""
    model = lm()
    straight = TranscoderTrainer(_config(tmp_path / "a", corpus, activation="jumprelu"), model, TOK)
    straight.train()
    first = TranscoderTrainer(_config(tmp_path / "b", corpus, activation="jumprelu"), model, TOK)
    draw = first.buffer.next_batch

    def interrupted():
        batch = draw()
        if first.step == 6:
            os.kill(os.getpid(), signum)
        return batch

    first.buffer.next_batch = interrupted
    previous = signal.getsignal(signum)
    with pytest.raises(KeyboardInterrupt):
        first.train()
    assert signal.getsignal(signum) is previous and first.stop_signal == signum and first.step == 7
    resumed = TranscoderTrainer(_config(tmp_path / "b", corpus, activation="jumprelu"), model, TOK)
    assert resumed.resume() and resumed.step == 7
    resumed.train()
    for name, value in straight.transcoders.state_dict().items():
        assert torch.equal(resumed.transcoders.state_dict()[name], value), name
    assert resumed.history == straight.history


@pytest.mark.parametrize(("change", "match"), [
    (lambda s: s["transcoders"].update(W_enc=torch.zeros(3)), "W_enc"),
    (lambda s: s.update(variance=torch.ones(5)), "variance"),
    (lambda s: s.update(last_fired=torch.zeros(2)), "last_fired"),
    (lambda s: s.update(format="glassformer-sae-state/1"), "not a transcoders training state"),
])
def test_resume_refuses_a_tampered_state_in_one_error(tmp_path, corpus, change, match):
    model = lm()
    TranscoderTrainer(_config(tmp_path, corpus), model, TOK).train(stop_at=2)
    file = tmp_path / "state" / "train_state.pt"
    state = torch.load(file, weights_only=True)
    change(state)
    torch.save(state, file)
    with pytest.raises(BadFileError, match=match):
        TranscoderTrainer(_config(tmp_path, corpus), model, TOK).resume()


def test_metrics_are_the_hand_computed_ones(corpus):
    model = lm()
    tc = TrainableTranscoders(n_layers=2, d_model=16, d_transcoder=24, kind="clt", activation="relu")
    inputs, outputs = mlp_hooks(model)
    source = ActivationSource(model, TOK, inputs + outputs, [corpus], context=12, batch=3, split="val", seed=5)
    metrics = evaluate_transcoders(tc, source, batches=1)
    again = ActivationSource(model, TOK, inputs + outputs, [corpus], context=12, batch=3, split="val", seed=5)
    batch = again.next_inputs()
    ids = batch.args[0]
    with torch.no_grad():
        logits, cache = run_with_cache(model, ids, names=inputs + outputs)
    x = torch.stack([cache[n] for n in inputs], 2).reshape(-1, 2, 16)
    y = torch.stack([cache[n] for n in outputs], 2).reshape(-1, 2, 16).double()
    f = tc.encode(x)
    err = (y - tc(x).double()).pow(2).sum((0, 2))
    nmse = err / (y - y.mean(0)).pow(2).sum((0, 2))
    assert metrics["nmse"] == pytest.approx(nmse.tolist(), rel=1e-9)
    assert metrics["l0"] == pytest.approx((f != 0).sum(-1).double().mean(0).tolist(), rel=1e-9)
    assert metrics["tokens"] == 36 and metrics["dead"] == (f.ne(0).sum(0) == 0).sum(-1).tolist()
    # every MLP replaced, each transcoder reading the replaced model's own MLP input

    def run_replaced():
        features, seen = [], []

        def enc(t, hook):
            seen.append(t)
            features.append(tc.encode_layer(t, len(features)))

        def dec(t, hook):
            return tc.decode_layer(features, len(seen) - 1, seen[-1])

        return run_with_hooks(model, ids, hooks=[(n, enc) for n in inputs] + [(n, dec) for n in outputs])

    with torch.no_grad():
        replaced_logits = run_replaced()
    loss = torch.nn.functional.cross_entropy(replaced_logits[:, :-1].reshape(-1, TOK.vocab_size),
                                           ids[:, 1:].flatten())
    assert metrics["ce_replaced"] == pytest.approx(float(loss), rel=1e-6)
    clean = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, TOK.vocab_size), ids[:, 1:].flatten())
    assert metrics["ce_clean"] == pytest.approx(float(clean), rel=1e-6)
    zero = metrics["ce_zero"]
    assert metrics["ce_recovered"] == pytest.approx((zero - float(loss)) / (zero - float(clean)))


@pytest.mark.parametrize("bad, match", [
    ({"lr": float("nan")}, "lr must be a finite number"),
    ({"kind": "clt", "activation": "topk"}, "activation 'topk' is for kind 'plt'"),
    ({"kind": "clt", "skip": True}, "skip is for kind 'plt'"),
    ({"activation": "gelu"}, "activation must be one of"),
    ({"buffer_size": 10}, "buffer_size"),
    ({"hook": "x"}, "unknown transcoder config key"),
])
def test_bad_options_are_refused(bad, match):
    with pytest.raises(GlassformerError, match=match):
        TranscoderTrainConfig.from_dict(bad)


def test_models_without_mlps_are_refused(corpus, tmp_path):
    torch.manual_seed(0)
    attn_only = TransformerLM(vocab_size=TOK.vocab_size, n_layers=2, d_model=16, n_heads=2, max_len=24, attn_only=True)
    with pytest.raises(GlassformerError, match="no MLPs"):
        TranscoderTrainer(_config(tmp_path, corpus), attn_only, TOK)
    post = TransformerLM(vocab_size=TOK.vocab_size, n_layers=2, d_model=16, n_heads=2, max_len=24, norm_first=False)
    with pytest.raises(GlassformerError, match="post-norm"):
        TranscoderTrainer(_config(tmp_path, corpus), post, TOK)
    assert not (tmp_path / "state").exists()


def test_command_writes_circuit_tracers_folder_pages_and_resumes(tmp_path, corpus, capsys):
    model = lm()
    save_checkpoint(tmp_path / "run" / "best", model, TOK)
    out = tmp_path / "tc"
    words = ["transcoders", str(tmp_path / "run" / "best"), "--data", str(corpus), "--out_dir", str(out),
             "--kind", "clt", "--activation", "jumprelu", "--d_transcoder", "24", "--steps", "4", "--batch_size",
             "48", "--buffer_size", "128", "--context", "12", "--model_batch", "4", "--progress", "false",
             "--feature_windows", "4", "--eval_batches", "1", "--save_every", "2"]
    assert main(words) == 0
    printed = json.loads(capsys.readouterr().out.splitlines()[0])
    assert printed["steps"] == 4 and len(printed["metrics"]["nmse"]) == 2
    files = load_transcoders(out, model)
    assert files.kind == "clt" and files.activation == "jumprelu" and files.layers[0].W_dec.shape == (24, 2, 16)
    assert (out / "features-L0.html").is_file() and (out / "features-L1.html").is_file()
    assert main([*words, "--steps", "6", "--resume", "true"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["steps"] == 6
    assert main([*words[:-2], "--kind", "plt", "--activation", "relu", "--feature_windows", "0"]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in out.glob("*.safetensors")) == ["layer_0.safetensors", "layer_1.safetensors"]
    (out / "config.yaml").write_text("model_kind: transcoder_set\n")  # not ours any more: refused, untouched
    assert main(words) == 2
    assert "not part of a transcoder folder glassformer wrote" in capsys.readouterr().err
    assert (out / "layer_0.safetensors").is_file()
    assert main([*words[:2], "--data", str(corpus), "--kind", "clt", "--activation", "topk"]) == 2
    assert "activation 'topk' is for kind 'plt'" in capsys.readouterr().err


def test_a_run_refuses_a_foreign_out_dir_and_tidies_only_its_own_leftovers(tmp_path, corpus):
    model = lm()
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "layer_0.safetensors").write_text("keep me")
    with pytest.raises(GlassformerError, match="not part of a transcoder folder"):
        run_transcoders(_config(foreign, corpus), model, TOK)
    assert (foreign / "layer_0.safetensors").read_text() == "keep me"
    out = tmp_path / "run"
    run_transcoders(_config(out, corpus, steps=2), model, TOK)
    notes = tmp_path / "notes.safetensors"
    notes.write_text("a user's notes")
    (out / "layer_1.safetensors").unlink()
    (out / "layer_1.safetensors").symlink_to(notes)  # in a folder glassformer wrote: still refused, kept
    with pytest.raises(GlassformerError, match="not a regular file"):
        run_transcoders(_config(out, corpus, steps=2), model, TOK)
    assert (out / "layer_1.safetensors").is_symlink() and notes.read_text() == "a user's notes"
    (out / "layer_1.safetensors").unlink()
    cut = out / ".transcoders.tmp-999-abcd"
    cut.mkdir()
    (cut / "layer_0.safetensors").write_bytes(b"cut short")
    other = out / ".transcoders.tmp-998-ffff"
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    run_transcoders(_config(out, corpus, steps=2), model, TOK)
    assert not cut.exists() and (other / "notes.txt").read_text() == "keep"


def _circuit_tracer_python() -> Path:
    """The circuit-tracer 0.5.0 venv the graph tests make (``$GLASSFORMER_CT_VENV`` or the user cache); skip
    without one."""
    folder = Path(os.environ.get("GLASSFORMER_CT_VENV") or Path.home() / ".cache/glassformer/circuit-tracer-0.5.0")
    python = folder / "bin" / "python"
    if not python.is_file():
        pytest.skip(f"no circuit-tracer venv at {folder} (tests/test_graph_vs_circuit_tracer.py makes it)")
    return python


READ_WITH_CIRCUIT_TRACER = """
import sys, torch
from circuit_tracer.utils.caching import load_transcoders_from_cache
x = torch.load(sys.argv[1])  # (L, N, d)
for folder in sys.argv[2:]:  # one process for every folder: importing circuit_tracer takes most of the time
    parent, name = folder.rsplit("/", 1)
    tc, config = load_transcoders_from_cache(name, cache_dir=parent, device=torch.device("cpu"),
                                             dtype=torch.float32, lazy_encoder=False, lazy_decoder=False)
    features = torch.stack([tc.encode_layer(x[i], i) for i in range(x.shape[0])])
    sparse = type(tc).__name__ == "CrossLayerTranscoder"
    decoded = tc.decode(features.to_sparse() if sparse else features, x)
    torch.save({"features": features, "decoded": decoded, "class": type(tc).__name__}, folder + ".ref.pt")
"""
CT_SETS = [("plt", "jumprelu", True), ("clt", "relu", False)]


@pytest.fixture(scope="module")
def read_by_circuit_tracer(tmp_path_factory, corpus):
    """Our folders (trained a few steps) and what circuit-tracer's own loader and modules make of them."""
    python = _circuit_tracer_python()
    tmp, model = tmp_path_factory.mktemp("ct"), lm()
    folders = []
    for kind, activation, skip in CT_SETS:
        folder = tmp / f"{kind}-{activation}"
        run_transcoders(_config(folder, corpus, kind=kind, activation=activation, skip=skip, steps=3), model, TOK)
        folders.append(folder)
    x = torch.randn(2, 7, 16)  # (L, N, d)
    torch.save(x, tmp / "x.pt")
    done = subprocess.run([str(python), "-c", READ_WITH_CIRCUIT_TRACER, str(tmp / "x.pt"), *map(str, folders)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return model, x, folders


@pytest.mark.parametrize("index", range(len(CT_SETS)))
def test_circuit_tracer_reads_our_folder(read_by_circuit_tracer, index):
    model, x, folders = read_by_circuit_tracer
    kind = CT_SETS[index][0]
    ours = TrainableTranscoders.from_transcoders(load_transcoders(folders[index], model))
    ref = torch.load(f"{folders[index]}.ref.pt", weights_only=True)
    assert ref["class"] == ("TranscoderSet" if kind == "plt" else "CrossLayerTranscoder")
    xs = x.transpose(0, 1)  # (N, L, d)
    torch.testing.assert_close(ref["features"], ours.encode(xs).transpose(0, 1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ref["decoded"], ours(xs).transpose(0, 1), rtol=1e-5, atol=1e-5)


def test_transcoders_past_the_memory_budget_are_refused_before_allocating(tmp_path, corpus):
    from glassformer.errors import OutOfMemoryError

    config = _config(tmp_path, corpus, d_transcoder=1 << 20, batch_size=1 << 16, buffer_size=1 << 17)
    with pytest.raises(OutOfMemoryError, match="d_transcoder=1048576"):
        TranscoderTrainer(config, lm(), TOK)  # 2 layers x 1M features x 65k tokens: terabytes, never allocated
