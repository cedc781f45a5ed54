"""Attribution graphs equal to circuit-tracer 0.5.0's on the same model, transcoders and prompt.

A GPT-2-shaped glassformer model (LayerNorm gains and biases not 1 and 0) is exported to Hugging Face; the
reference (tests/circuit_tracer_reference.py) loads it into circuit-tracer's TransformerLens replacement
model, loads our transcoder folder with circuit-tracer's own loader, and runs ``attribute()``; it also reads
our ``graph.pt`` with ``Graph.from_pt``. The reference runs in a venv of its own (circuit-tracer pins
transformers 4.57.3 and transformer-lens 3.2.1), made on first use in ``$GLASSFORMER_CT_VENV`` or
``~/.cache/glassformer/circuit-tracer-0.5.0`` and reused; the test is skipped, with the reason, when the
package index cannot be reached to make it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import OFFLINE_ENV
from glassformer import TransformerLM
from glassformer.interop.hf_dir import save_hf_dir
from glassformer.interpret.graph import attribute, frontend_json, save_graph_pt
from glassformer.interpret.transcoders import load_transcoders, random_transcoders, save_transcoders
from glassformer.tokenizers.char import CharTokenizer

PINS = ["circuit-tracer==0.5.0", "torch==2.13.0"]
REFERENCE = Path(__file__).with_name("circuit_tracer_reference.py")
SETTINGS = {"max_n_logits": 5, "desired_logit_prob": 0.95, "batch_size": 32}
RUNS = {  # name: transcoder options, extra settings
    "plt_jumprelu_skip": ({"kind": "plt", "activation": "jumprelu", "skip": True}, {}),
    "plt_relu_top_features": ({"kind": "plt", "activation": "relu"}, {"max_feature_nodes": 20}),
    "clt_relu": ({"kind": "clt", "activation": "relu"}, {}),
    "clt_jumprelu": ({"kind": "clt", "activation": "jumprelu"}, {}),
}


def _venv_python() -> Path:
    """The reference venv's Python, made (once) when missing; pytest.skip when it cannot be made."""
    folder = Path(os.environ.get("GLASSFORMER_CT_VENV") or Path.home() / ".cache/glassformer/circuit-tracer-0.5.0")
    python = folder / "bin" / "python"
    ready = folder / ".ready"
    if ready.is_file() and python.is_file():
        return python
    env = {k: v for k, v in os.environ.items() if k not in OFFLINE_ENV}  # pip needs the package index
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True, capture_output=True)
        done = subprocess.run([str(python), "-m", "pip", "install", "-q", *PINS], env=env, capture_output=True,
                              text=True, timeout=1500)
    except (subprocess.SubprocessError, OSError) as error:
        pytest.skip(f"could not make the circuit-tracer venv in {folder}: {error}")
    if done.returncode != 0:
        pytest.skip(f"could not install {' '.join(PINS)} into {folder} (is the package index reachable?): "
                    f"{done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
    ready.write_text(" ".join(PINS) + "\n")
    return python


def _gpt2_model(vocab_size: int) -> TransformerLM:
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=vocab_size, d_model=32, n_heads=4, n_layers=3, d_ff=64, max_len=32,
                          pos="learned", scale_embeddings=False, activation="gelu_tanh").eval()
    with torch.no_grad():  # trained-looking norms: gains not 1, biases not 0
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.3 * torch.randn_like(p))
    return model


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    python = _venv_python()
    tmp = tmp_path_factory.mktemp("ct")
    tokenizer = CharTokenizer("abcdefghij klmnop", specials=["bos"])
    model = _gpt2_model(tokenizer.vocab_size)
    save_hf_dir(model, tokenizer, tmp / "hf")
    ids = [tokenizer.special_tokens["bos"], *tokenizer.encode("abc abd ab")]
    ours, runs = {}, []
    for name, (options, extra) in RUNS.items():
        folder = tmp / name
        save_transcoders(random_transcoders(3, 32, 32, seed=len(runs), scale=2.0, **options), folder)
        tc = load_transcoders(folder, model)
        graph = attribute(model, tc, ids, **SETTINGS, **extra)
        save_graph_pt(graph, tmp / f"{name}.pt")
        (tmp / f"{name}.json").write_text(json.dumps(frontend_json(graph)))
        ours[name] = graph
        runs.append({"name": name, "transcoders": str(folder), "ids": ids, "graph_pt": str(tmp / f"{name}.pt"),
                     "graph_json": str(tmp / f"{name}.json"), "settings": {**SETTINGS, **extra}})
    (tmp / "job.json").write_text(json.dumps({"hf_dir": str(tmp / "hf"), "runs": runs}))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(python), str(REFERENCE), str(tmp / "job.json"), str(tmp / "out.pt")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return ours, torch.load(tmp / "out.pt", weights_only=True)


@pytest.mark.parametrize("name", RUNS)
def test_same_nodes_and_adjacency(compared, name):
    ours, theirs = compared[0][name], compared[1][name]
    assert torch.equal(ours.input_tokens, theirs["input_tokens"])
    assert torch.equal(ours.logit_ids, theirs["logit_ids"])
    torch.testing.assert_close(ours.logit_probabilities, theirs["logit_probabilities"], rtol=1e-5, atol=1e-7)
    assert torch.equal(ours.active_features, theirs["active_features"])
    assert ours.active_features.shape[0] > 20  # features fire at every layer: the comparison has substance
    torch.testing.assert_close(ours.activation_values, theirs["activation_values"], rtol=1e-5, atol=1e-6)
    assert torch.equal(ours.selected_features, theirs["selected_features"])
    A, B = ours.adjacency_matrix, theirs["adjacency"]
    assert A.shape == B.shape
    assert float((A - B).abs().max() / B.abs().max()) <= 1e-4


@pytest.mark.parametrize("name", RUNS)
def test_same_scores_and_pruning(compared, name):
    ours, theirs = compared[0][name], compared[1][name]
    replacement, completeness = ours.scores()
    torch.testing.assert_close(torch.tensor([replacement, completeness]), theirs["scores"].float(), rtol=0,
                               atol=1e-4)
    pruned = ours.prune(0.8, 0.98)
    assert torch.equal(pruned.node_mask, theirs["node_mask"])
    torch.testing.assert_close(pruned.cumulative_scores, theirs["cumulative"], rtol=0, atol=1e-4)


@pytest.mark.parametrize("name", RUNS)
def test_circuit_tracer_reads_our_graph_files(compared, name):
    ours, theirs = compared[0][name], compared[1][name]
    assert tuple(theirs["ours_shape"].tolist()) == tuple(ours.adjacency_matrix.shape)
    torch.testing.assert_close(theirs["scores_of_ours"].float(), torch.tensor(ours.scores()), rtol=0, atol=1e-6)
    assert int(theirs["ours_json_nodes"]) == len(frontend_json(ours)["nodes"])  # its frontend's model validates it
