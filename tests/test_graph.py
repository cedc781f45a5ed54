"""Attribution graphs without the reference venv: rows do not depend on how targets are batched or which
features are explained, pruning keeps what it promises, bad input and crafted graph files get one line, and
``glassformer graph`` writes its three files. (Equality with circuit-tracer: test_graph_vs_circuit_tracer.py.)"""

from __future__ import annotations

import io
import json
import pickle
import zipfile

import pytest
import torch

from glassformer import TransformerLM
from glassformer.cli import main
from glassformer.errors import BadFileError, GlassformerError, OutOfMemoryError
from glassformer.interpret.graph import attribute, frontend_json, load_graph_pt, save_graph_pt
from glassformer.interpret.transcoders import random_transcoders, save_transcoders
from glassformer.tokenizers.char import CharTokenizer
from glassformer.training.checkpoint import save_checkpoint

TOK = CharTokenizer("abcdefgh ", specials=["bos"])


def _model(**kw) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(vocab_size=TOK.vocab_size, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=32,
                         pos="learned", **kw).eval()


IDS = [TOK.special_tokens["bos"], *TOK.encode("abc abd ab")]


@pytest.fixture(scope="module")
def full():
    model, tc = _model(), random_transcoders(2, 16, 24, kind="clt", scale=3.0, seed=2)
    return model, tc, attribute(model, tc, IDS, max_n_logits=3, batch_size=64)


def test_rows_do_not_depend_on_batching_or_on_which_features_are_explained(full):
    model, tc, graph = full
    small = attribute(model, tc, IDS, max_n_logits=3, batch_size=3)
    torch.testing.assert_close(small.adjacency_matrix, graph.adjacency_matrix, rtol=1e-5, atol=1e-6)
    k = 7
    part = attribute(model, tc, IDS, max_n_logits=3, batch_size=4, max_feature_nodes=k)
    chosen = part.selected_features
    assert chosen.shape == (k,) and graph.n_features > 3 * k
    columns = torch.cat([chosen, torch.arange(graph.n_features, graph.adjacency_matrix.shape[0])])
    expected = graph.adjacency_matrix[chosen][:, columns]
    torch.testing.assert_close(part.adjacency_matrix[:k], expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(part.adjacency_matrix[-3:], graph.adjacency_matrix[-3:][:, columns], rtol=1e-5,
                               atol=1e-6)


def test_graph_shape_order_and_position_zero(full):
    _, _, graph = full
    L, T = 2, len(IDS)
    assert graph.adjacency_matrix.shape[0] == graph.n_features + (L + 1) * T + graph.n_logits
    assert (graph.active_features[:, 1] > 0).all()  # position 0 holds no features
    assert torch.equal(graph.active_features, graph.active_features[torch.argsort(
        graph.active_features[:, 0] * 10_000 + graph.active_features[:, 1] * 100 + graph.active_features[:, 2])])
    A = graph.adjacency_matrix
    errors_at_0 = [graph.n_features + layer * T for layer in range(L)]
    assert A[:, errors_at_0].abs().sum() == 0  # nor an error
    assert A[graph.n_features:graph.n_features + (L + 1) * T].abs().sum() == 0  # errors and tokens have no inputs
    assert graph.logit_probabilities.sum() <= 0.95 + 1e-6 or graph.n_logits == 3


def test_pruning_keeps_tokens_and_logits_and_scores_are_shares(full):
    _, _, graph = full
    pruned = graph.prune(0.8, 0.98)
    tail = graph.n_pos + graph.n_logits
    assert pruned.node_mask[-tail:].all()
    kept_all = graph.prune(1.0, 1.0)
    assert kept_all.node_mask.sum() >= pruned.node_mask.sum()
    replacement, completeness = graph.scores()
    assert 0 < replacement < 1 and 0 < completeness <= 1
    front = frontend_json(graph)
    ids = {node["node_id"] for node in front["nodes"]}
    assert all(link["source"] in ids and link["target"] in ids for link in front["links"])
    assert sum(node["feature_type"] == "logit" for node in front["nodes"]) == graph.n_logits


@pytest.mark.parametrize(("change", "match"), [
    ({"ids": [0]}, "2 to 32 tokens"),
    ({"ids": [0, 99]}, "ids"),
    ({"batch_size": 0}, "batch_size"),
    ({"desired_logit_prob": float("nan")}, "desired_logit_prob"),
    ({"max_memory": "1KB"}, "refused before allocating"),
])
def test_bad_input_is_one_line(full, change, match):
    model, tc, _ = full
    kwargs = {"ids": IDS, **change}
    with pytest.raises(GlassformerError, match=match) as error:
        attribute(model, tc, kwargs.pop("ids"), **kwargs)
    assert "\n" not in str(error.value)
    if "max_memory" in change:
        assert isinstance(error.value, OutOfMemoryError)


def test_transcoders_that_do_not_fit_and_other_models_are_refused(full):
    model, _, _ = full
    with pytest.raises(GlassformerError, match="do not fit a model of 2 layers of width 16"):
        attribute(model, random_transcoders(3, 16, 8), IDS)
    with pytest.raises(GlassformerError, match="causal TransformerLM"):
        attribute(_model(attn="bidirectional"), random_transcoders(2, 16, 8), IDS)


def test_graph_file_round_trip(full, tmp_path):
    _, _, graph = full
    save_graph_pt(graph, tmp_path / "g.pt")
    back = load_graph_pt(tmp_path / "g.pt")
    for name in ("adjacency_matrix", "active_features", "selected_features", "activation_values", "logit_ids",
                 "input_tokens"):
        assert torch.equal(getattr(back, name), getattr(graph, name)), name
    assert back.scores() == graph.scores()


class _Boom:
    def __reduce__(self):
        return (print, ("unpickled code ran",))


def _crafted(tmp_path, graph, **changes):
    from glassformer.interpret.graph.files import graph_record

    record = {**graph_record(graph), **changes}
    path = tmp_path / "crafted.pt"
    torch.save(record, path, pickle_module=__import__("glassformer.interpret.graph.files", fromlist=["x"])
               ._PICKLE_MODULE)
    return path


@pytest.mark.parametrize(("changes", "match"), [
    ({"adjacency_matrix": torch.zeros(3, 3)}, "adjacency_matrix is"),
    ({"adjacency_matrix": "no"}, "adjacency_matrix must be a 2-d float tensor"),
    ({"selected_features": "out of range"}, "selected_features indexes outside"),
    ({"logit_targets": [("a", "b")]}, "logit_targets must be"),
    ({"vocab_size": -1}, "vocab_size must be"),
    ({"input_string": None, "cfg": {"n_layers": 2}}, "cfg must be"),
])
def test_crafted_graph_files_get_one_line(full, tmp_path, changes, match):
    _, _, graph = full
    if changes.get("selected_features") == "out of range":
        changes = {"selected_features": graph.selected_features + 10**6}
    with pytest.raises(BadFileError, match=match) as error:
        load_graph_pt(_crafted(tmp_path, graph, **changes))
    assert "\n" not in str(error.value)


def test_a_graph_file_with_code_in_it_is_not_unpickled(full, tmp_path, capsys):
    _, _, graph = full
    path = tmp_path / "evil.pt"
    torch.save({"x": _Boom()}, path)
    with pytest.raises(BadFileError, match="refused to load"):
        load_graph_pt(path)
    assert "unpickled code ran" not in capsys.readouterr().out
    (tmp_path / "junk.pt").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(BadFileError, match="junk.pt"):
        load_graph_pt(tmp_path / "junk.pt")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({}) * 1000)
    (tmp_path / "packed.pt").write_bytes(buffer.getvalue())
    with pytest.raises(BadFileError, match="compressed records"):
        load_graph_pt(tmp_path / "packed.pt")


def test_cli_writes_the_three_files_and_replaces_its_own(tmp_path, capsys):
    model = _model()
    save_checkpoint(tmp_path / "ck", model, TOK)
    save_transcoders(random_transcoders(2, 16, 24, scale=3.0, skip=True, activation="jumprelu"), tmp_path / "tc")
    (tmp_path / "text.txt").write_text("abc abd ab " * 30)
    argv = ["graph", str(tmp_path / "ck"), "--transcoders", str(tmp_path / "tc"), "--prompt", "abc abd",
            "--out", str(tmp_path / "out"), "--data", str(tmp_path / "text.txt"), "--max_n_logits", "3"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert 1 <= summary["logits"] <= 3 and summary["features"] > 0
    graph = load_graph_pt(tmp_path / "out" / "graph.pt")
    assert graph.input_tokens.tolist() == [TOK.special_tokens["bos"], *TOK.encode("abc abd")]
    front = json.loads((tmp_path / "out" / "graph.json").read_text())
    assert front["metadata"]["prompt_tokens"][1:] == list("abc abd")
    page = (tmp_path / "out" / "graph.html").read_text()
    assert 'content="glassformer"' in page and "Content-Security-Policy" in page
    assert main(argv) == 0  # the folder is ours: replaced


def test_the_callers_training_mode_comes_back(full):
    model, tc, graph = full
    model.train()
    try:
        again = attribute(model, tc, IDS, max_n_logits=3)  # dropout 0 here: the same graph in eval mode
        assert model.training
    finally:
        model.eval()
    assert torch.equal(again.adjacency_matrix, graph.adjacency_matrix)


def test_cli_crafted_transcoder_folder_is_one_line(tmp_path, capsys):
    save_checkpoint(tmp_path / "ck", _model(), TOK)
    save_transcoders(random_transcoders(2, 16, 24), tmp_path / "tc")
    (tmp_path / "tc" / "layer_1.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}garbage")
    status = main(["graph", str(tmp_path / "ck"), "--transcoders", str(tmp_path / "tc"), "--prompt", "abc",
                   "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and err[-1].startswith("glassformer: error: ") and "layer_1.safetensors" in err[-1]
    assert not (tmp_path / "out").exists()
