"""Path patching and circuit discovery: the edge graph rewrites the model exactly, and on a trained
induction model EAP-IG finds previous-token -> induction (K-composition) by itself, path patching
confirms it, and the phase-change detector sees the run's phase change (and none before it)."""

from __future__ import annotations

import pytest
import torch

import glassformer
from glassformer import TransformerLM
from glassformer.errors import GlassformerError
from glassformer.interpret.attribution import correlation
from glassformer.interpret.circuits import (
    EdgeGraph,
    circuit_metric,
    edge_attribution,
    find_circuit,
    path_patching,
    sender_writes,
)
from glassformer.interpret.detectors import repeated_tokens
from glassformer.recipes import find_recipe, load_recipe, run_recipe
from glassformer.recipes.induction import phase_change_step
from glassformer.viz.report_circuit import circuit_html, write_circuit_page

N = 20  # one copy's length in the clean rows


def _task(vocab: int, low: int, bos: int | None, batch: int = 16):
    """Clean rows (bos + N random tokens repeated), corrupted rows (the first copy replaced), and the
    metric: the mean log-probability of the second copy's next tokens."""
    start = 0 if bos is None else 1
    clean = repeated_tokens(vocab, N, batch, seed=1, low=low, bos=bos)
    corrupted = clean.clone()
    corrupted[:, start:start + N] = torch.randint(low, vocab, (batch, N), generator=torch.Generator().manual_seed(2))
    targets = clean[:, start + N + 1:]

    def metric(logits: torch.Tensor) -> torch.Tensor:
        return logits[:, start + N:-1].float().log_softmax(-1).gather(-1, targets[..., None]).mean()
    return clean, corrupted, metric


@pytest.fixture(scope="module")
def induction(tmp_path_factory):
    """The induction recipe's attention-only model trained 300 steps (its phase change is near 240)."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("induction")
    recipe = load_recipe(find_recipe("induction_heads"), {
        "max_steps": 300, "recipe.gpt2": False, "recipe.measure_every": 20, "out_dir": str(out)})
    run = run_recipe(recipe)["runs"]["attn_only"]
    model, tokenizer = glassformer.load(out / "attn_only" / "model")
    return model.eval(), tokenizer, run


def _readout(vocab: int):
    """A metric for untrained models: a fixed random readout of the second copy's logits (the log-prob
    of a random model hardly moves)."""
    direction = torch.randn(vocab, generator=torch.Generator().manual_seed(3))

    def metric(logits: torch.Tensor) -> torch.Tensor:
        return (logits[:, N:].float() @ direction).mean() * 10
    return metric


def _small(**changes) -> TransformerLM:
    torch.manual_seed(0)
    config = dict(vocab_size=40, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=48, pos="learned")
    return TransformerLM(**{**config, **changes}).eval()


# ---------------------------------------------------------------------------------------------- exactness
@pytest.mark.parametrize("changes", [{}, {"attn_only": True, "pos": "rope"}, {"norm": "rmsnorm", "bias": False}])
def test_the_edge_graph_rewrites_the_model_exactly(changes):
    model = _small(**changes)
    clean, corrupted, _ = _task(40, 0, None, batch=4)
    metric = _readout(40)
    logits, writes = sender_writes(model, clean)
    torch.testing.assert_close(logits, model(clean), rtol=0, atol=1e-5)
    graph = EdgeGraph.of(model)
    assert writes.shape == (len(graph.senders), 4, 2 * N, 16)
    # the stream is the sum of the writes: embedding, heads (o_proj's bias apart) and MLPs
    every = graph.edges()
    with torch.no_grad():
        clean_m, corrupted_m = float(metric(model(clean))), float(metric(model(corrupted)))
    assert circuit_metric(model, clean, corrupted, metric, every) == pytest.approx(clean_m, abs=1e-5)
    assert circuit_metric(model, clean, corrupted, metric, []) == pytest.approx(corrupted_m, abs=1e-5)
    assert abs(clean_m - corrupted_m) > 1e-3
    # patching every edge is the other run; no edge, this one
    assert path_patching(model, clean, corrupted, metric, every) == pytest.approx(clean_m - corrupted_m, abs=1e-5)
    assert path_patching(model, clean, corrupted, metric, every, direction="denoising") == pytest.approx(
        clean_m - corrupted_m, abs=1e-5)
    if not changes.get("attn_only"):
        assert "MLP0" in graph.senders and ("MLP1", "logits") in every and ("L0H1", "MLP0") in every


def test_eap_is_the_gradient_of_the_edge_run():
    model = _small()
    clean, corrupted, _ = _task(40, 0, None, batch=4)
    metric = _readout(40)
    scores = edge_attribution(model, clean, corrupted, metric, method="eap")
    graph = scores.graph
    # an edge into the logits: patching it by a small step t moves the metric by t x its score
    i, j = graph.senders.index("L1H0"), graph.receivers.index("logits")
    from glassformer.interpret.circuits import _EdgeRun

    _, corrupted_writes = sender_writes(model, corrupted)
    weight = torch.zeros_like(graph.allowed, dtype=torch.float32)
    weight[i, j] = 1e-3
    with torch.no_grad():
        moved = float(metric(_EdgeRun(model, graph, corrupted_writes, weight).run(clean))) - float(metric(model(clean)))
    assert moved == pytest.approx(-1e-3 * float(scores.scores[i, j]), rel=0.02, abs=1e-7)
    assert not scores.scores[~graph.allowed].any()


def test_bad_inputs_are_errors_naming_them():
    model = _small()
    clean, corrupted, metric = _task(40, 0, None, batch=2)
    with pytest.raises(GlassformerError, match="no edge 'L5H0' -> 'logits'"):
        path_patching(model, clean, corrupted, metric, [("L5H0", "logits")])
    with pytest.raises(GlassformerError, match="does not write before"):
        path_patching(model, clean, corrupted, metric, [("L1H0", "L0H1.k")])
    with pytest.raises(GlassformerError, match="direction"):
        path_patching(model, clean, corrupted, metric, [], direction="sideways")
    with pytest.raises(GlassformerError, match="method"):
        edge_attribution(model, clean, corrupted, metric, method="acdc")
    with pytest.raises(GlassformerError, match="one shape"):
        path_patching(model, clean, corrupted[:, :-1], metric, [])
    with pytest.raises(GlassformerError, match="n_kv_heads == n_heads"):
        EdgeGraph.of(_small(n_heads=4, n_kv_heads=2))


# ---------------------------------------------------------------------------------------------- induction
def test_eap_ig_finds_the_induction_circuit_and_path_patching_confirms_it(induction, tmp_path):
    model, tokenizer, run = induction
    clean, corrupted, metric = _task(model.config.vocab_size, tokenizer.bos_id + 1, tokenizer.bos_id)
    circuit = find_circuit(model, clean, corrupted, metric, method="eap-ig", target=0.9)
    assert circuit.faithfulness >= 0.9 and len(circuit.edges) < circuit.total_edges
    last = run["history"][-1]
    previous = [h for h, s in enumerate(last["previous_token"][0]) if s > 0.5]  # layer 0's previous-token heads
    inductive = [h for h, s in enumerate(last["induction"][1]) if s > 0.5]  # layer 1's induction heads
    assert previous and inductive
    # K-composition: a previous-token head writes into an induction head's keys, found by EAP-IG alone
    k_edges = [(f"L0H{p}", f"L1H{i}.k") for p in previous for i in inductive]
    assert any(circuit.has_edge(s, r) for s, r in k_edges)
    # path patching: corrupting those paths alone loses most of the metric (positive); the same heads into the
    # queries do nothing
    span = circuit.clean_metric - circuit.corrupted_metric
    through_keys = path_patching(model, clean, corrupted, metric, k_edges)
    q_edges = [(s, r[:-1] + "q") for s, r in k_edges]
    through_queries = path_patching(model, clean, corrupted, metric, q_edges)
    assert through_keys > 0.5 * span and abs(through_queries) < 0.1 * span
    page = write_circuit_page(circuit, tmp_path / "circuit.html", "The induction circuit").read_text()
    assert "Content-Security-Policy" in page and "<svg" in page and f'data-edge="{k_edges[0][0]}' in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert circuit_html(circuit).count('class="gf-edge"') == len(circuit.edges)


def test_eap_ig_ranks_edges_like_exact_edge_patching(induction):
    model, tokenizer, _ = induction
    clean, corrupted, metric = _task(model.config.vocab_size, tokenizer.bos_id + 1, tokenizer.bos_id, batch=8)
    scores = edge_attribution(model, clean, corrupted, metric, method="eap-ig")
    graph = scores.graph
    exact = torch.zeros_like(scores.scores)
    for sender, receiver in graph.edges():  # one forward per edge: the metric lost when it alone is corrupted
        exact[graph.senders.index(sender), graph.receivers.index(receiver)] = path_patching(
            model, clean, corrupted, metric, [(sender, receiver)])
    assert correlation(scores.scores[graph.allowed], exact[graph.allowed]) > 0.8


def test_the_phase_change_is_found_in_the_run_and_not_before_it(induction):
    _, _, run = induction
    history = run["history"]
    step = phase_change_step(history)
    assert step is not None and 150 <= step <= 300
    assert run["phase_change_step"] == step
    before = [r for r in history if r["step"] <= 180]  # the same run stopped before its phase change
    assert phase_change_step(before) is None


# ---------------------------------------------------------------------------------------------- watching it form
def test_the_run_page_marks_the_phase_change_and_draws_the_circuit_of_each_snapshot(induction, tmp_path):
    import json
    import shutil

    from glassformer.interpret.circuits import induction_circuit
    from glassformer.interpret.measurements import Probe
    from glassformer.io.loaders import read_records
    from glassformer.training.microscope import RECORDS
    from glassformer.viz.report_run import write_run_page

    model, tokenizer, run = induction
    folder = tmp_path / "run"
    shutil.copytree(run["out_dir"], folder, ignore=shutil.ignore_patterns("model", "ckpt-*", "last", "best"))
    page = write_run_page(folder).read_text(encoding="utf-8")
    step = run["phase_change_step"]
    assert f'class="gf-event" data-step="{step}"' in page and f"Phase change at step {step}" in page
    assert "lowest over the probe lengths 20, 15, 10" in page
    assert 'id="gf-chart-position"' in page and 'id="gf-chart-icl"' in page  # per-token loss, ICL score
    assert f"step {step}</span>" in page  # the loss-by-position curve of the phase change's record
    # the microscope's circuit measurement, as a record holds it: drawn once per snapshot, the last shown
    low, bos = tokenizer.bos_id + 1, tokenizer.bos_id
    rows = repeated_tokens(model.config.vocab_size, N, 16, low=low, bos=bos)
    probe = Probe(torch.zeros(1, 4, dtype=torch.long), rows, N, 1, 300, low, bos)
    circuit = induction_circuit(model, probe)
    assert circuit["faithfulness"] >= 0.9
    records = read_records(folder / RECORDS)
    for record in records[-2:]:
        record["measurements"] = {"circuit": circuit}
    (folder / RECORDS).write_text("".join(json.dumps(r) + "\n" for r in records))
    page = write_run_page(folder).read_text(encoding="utf-8")
    assert page.count('class="gf-circuit-snap"') == 2 and page.count('class="gf-circuit"') == 2
    assert f'data-index="{len(records) - 1}" data-step="300">' in page  # the last one is not hidden
    assert f"{len(circuit['edges'])} of {circuit['total_edges']} edges" in page
    records[-2]["measurements"]["circuit"] = {**circuit, "edges": [["L0H0<script>", "logits", 1.0]]}  # crafted
    (folder / RECORDS).write_text("".join(json.dumps(r) + "\n" for r in records))
    page = write_run_page(folder).read_text(encoding="utf-8")
    assert page.count('class="gf-circuit-snap"') == 1 and "L0H0<script>" not in page


def test_a_run_without_a_phase_change_says_so(induction, tmp_path):
    import shutil

    from glassformer.io.loaders import read_records
    from glassformer.io.records import record_line
    from glassformer.training.microscope import RECORDS
    from glassformer.viz.report_run import write_run_page

    _, _, run = induction
    folder = tmp_path / "early"
    shutil.copytree(run["out_dir"], folder, ignore=shutil.ignore_patterns("model", "ckpt-*", "last", "best"))
    early = [r for r in read_records(folder / RECORDS) if r["step"] <= 180]
    (folder / RECORDS).write_text("".join(record_line(r, compact=True) for r in early))
    page = write_run_page(folder).read_text(encoding="utf-8")
    assert "No phase change" in page and 'class="gf-event"' not in page
