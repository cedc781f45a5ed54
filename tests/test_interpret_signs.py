"""One sign for every patching result (docs/interpret.md, "One sign"): positive where a component carries the
clean behaviour, for activation patching, attribution patching, path patching in both directions and EAP/EAP-IG."""

import pytest
import torch

from glassformer import TransformerLM
from glassformer.interpret import attribution_patching, edge_attribution, patching_effects, path_patching

VOCAB, T = 30, 10


def _setup():
    """A tiny attention-only model (a last-layer head writes into the logits alone), clean and corrupted rows,
    and a linear readout metric oriented so that metric(clean) > metric(corrupted)."""
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=VOCAB, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=T, attn_only=True,
                          pos="learned").eval()
    g = torch.Generator().manual_seed(1)
    clean = torch.randint(0, VOCAB, (3, T), generator=g)
    corrupted = torch.randint(0, VOCAB, (3, T), generator=g)
    direction = torch.randn(VOCAB, generator=g)
    with torch.no_grad():
        sign = 1.0 if float((model(clean)[:, -1] @ direction).mean()) > float(
            (model(corrupted)[:, -1] @ direction).mean()) else -1.0

    def metric(logits: torch.Tensor) -> torch.Tensor:
        return sign * (logits[:, -1].float() @ direction).mean()
    return model, clean, corrupted, metric


def test_every_method_gives_the_important_edge_one_sign():
    model, clean, corrupted, metric = _setup()
    with torch.no_grad():
        assert float(metric(model(clean))) > float(metric(model(corrupted)))
    eap = edge_attribution(model, clean, corrupted, metric, method="eap")
    ig = edge_attribution(model, clean, corrupted, metric, method="eap-ig", steps=4)
    g = eap.graph
    # the last layer's heads write into the logits alone: their edge to the logits is the whole head
    heads = [f"L1H{h}" for h in range(2)]
    col = g.receivers.index("logits")
    scores = torch.tensor([float(ig.scores[g.senders.index(s), col]) for s in heads])
    head = int(scores.abs().argmax())
    edge = [(heads[head], "logits")]
    noising = path_patching(model, clean, corrupted, metric, edge)
    denoising = path_patching(model, clean, corrupted, metric, edge, direction="denoising")
    activation = float(patching_effects(model, clean, corrupted, metric, what="z", per="head")[1, head])
    estimate = float(attribution_patching(model, clean, corrupted, metric, names="z").heads()[1, head])
    values = [noising, denoising, activation, estimate, float(eap.scores[g.senders.index(heads[head]), col]),
              float(scores[head])]
    assert abs(noising) > 1e-3
    assert all((v > 0) == (noising > 0) and v != 0 for v in values), values
    # denoising the head is activation patching of its hook_z (it writes into the logits alone)
    assert denoising == pytest.approx(activation, abs=1e-5)


def test_patching_every_edge_recovers_the_whole_difference_with_a_plus_sign():
    model, clean, corrupted, metric = _setup()
    every = edge_attribution(model, clean, corrupted, metric, method="eap").graph.edges()
    with torch.no_grad():
        span = float(metric(model(clean))) - float(metric(model(corrupted)))
    assert span > 0
    assert path_patching(model, clean, corrupted, metric, every) == pytest.approx(span, abs=1e-5)
    assert path_patching(model, clean, corrupted, metric, every, direction="denoising") == pytest.approx(span, abs=1e-5)


# ---------------------------------------------------------------------------------------------- circuit ablation
def _direct(model, x):
    """The logits of a residual stream ``x`` (B, T, d), read as the model reads its last layer's."""
    return model.logits(model.norm_f(x))


def test_circuit_ablation_modes_against_hand_computed_streams():
    from glassformer.interpret import circuit_metric, run_with_cache
    from glassformer.interpret.circuits import circuit_logits, resample_rows, sender_writes

    model, clean, corrupted, metric = _setup()
    direct = [("embed", "logits")]  # the circuit: the embedding's path into the logits alone
    with torch.no_grad():
        embed = run_with_cache(model, clean, names="blocks.0.hook_resid_pre")[1]["blocks.0.hook_resid_pre"]
        _, clean_w = sender_writes(model, clean)
        _, ref = sender_writes(model, corrupted)  # (S, B, T, d), S = embed + 4 heads
        bias = sum(block.self_attn.o_proj.bias for block in model.blocks)  # not a sender's write: always there
        others = slice(1, None)
        expected = {
            "zero": _direct(model, embed + bias),
            "mean": _direct(model, embed + bias + ref[others].mean(1, keepdim=True).sum(0)),
            "corrupted": _direct(model, embed + bias + ref[others].sum(0)),
            "resample": _direct(model, embed + bias + ref[others][:, resample_rows(3, 5)].sum(0)),
        }
        for ablation, reference in expected.items():
            got = circuit_logits(model, clean, corrupted, direct, ablation=ablation, seed=5)
            torch.testing.assert_close(got, reference, rtol=1e-5, atol=1e-5)
        assert circuit_metric(model, clean, corrupted, metric, direct, ablation="zero") == pytest.approx(
            float(metric(expected["zero"])), abs=1e-5)
        # per position: the edge kept at the last position only; the others ablated (zero) everywhere else
        got = circuit_logits(model, clean, corrupted, [("embed", "logits", -1)], ablation="zero")
        torch.testing.assert_close(got[:, -1], expected["zero"][:, -1], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got[:, :-1], _direct(model, (embed - clean_w[0] + bias))[:, :-1].expand_as(
            got[:, :-1]), rtol=1e-5, atol=1e-5)
    order = resample_rows(5, 0)
    assert sorted(order.tolist()) == list(range(5)) and bool((order != torch.arange(5)).all())


def test_find_circuit_ablation_and_its_errors():
    from glassformer.errors import GlassformerError
    from glassformer.interpret import circuit_metric, find_circuit
    from glassformer.interpret.circuits import circuit_logits

    model, clean, corrupted, metric = _setup()
    circuit = find_circuit(model, clean, corrupted, metric, method="eap", ablation="mean", target=0.8)
    assert circuit.ablation == "mean" and circuit.to_dict()["ablation"] == "mean"
    assert circuit.corrupted_metric == pytest.approx(circuit_metric(model, clean, corrupted, metric, [],
                                                                    ablation="mean"))
    kept = [(s, r) for s, r, _ in circuit.edges]
    torch.testing.assert_close(circuit.logits, circuit_logits(model, clean, corrupted, kept, ablation="mean"))
    assert float(metric(circuit.logits)) == pytest.approx(circuit.circuit_metric, abs=1e-6)
    with pytest.raises(GlassformerError, match=r"^ablation must be one of \['corrupted', 'mean', 'zero', 'resample'\], "
                                               r"got 'means'$"):
        circuit_metric(model, clean, corrupted, metric, [], ablation="means")
    with pytest.raises(GlassformerError,
                       match=r"the position of edge \('embed', 'logits', 10\) must be an int in \[-10, 9\], got 10"):
        circuit_metric(model, clean, corrupted, metric, [("embed", "logits", 10)])
    with pytest.raises(GlassformerError, match="at least 2 rows"):
        circuit_metric(model, clean[:1], corrupted[:1], metric, [], ablation="resample")


@pytest.mark.parametrize("method, steps", [("eap", 1), ("eap-ig", 3)])
def test_edge_attribution_runs_each_input_once_then_once_a_step(method, steps):
    model, clean, corrupted, metric = _setup()
    forwards = []
    handle = model.register_forward_hook(lambda *_: forwards.append(1))
    try:
        edge_attribution(model, clean, corrupted, metric, method=method, steps=steps)
    finally:
        handle.remove()
    assert len(forwards) == 2 + steps  # clean and corrupted (writes and embeddings together), then the gradients


def test_find_circuit_runs_the_reference_once_and_one_forward_a_size():
    from glassformer.interpret import circuit_metric, find_circuit

    model, clean, corrupted, metric = _setup()
    scores = edge_attribution(model, clean, corrupted, metric, method="eap")
    forwards = []
    handle = model.register_forward_hook(lambda *_: forwards.append(1))
    try:
        circuit = find_circuit(model, clean, corrupted, metric, scores=scores, ablation="resample", target=0.8)
    finally:
        handle.remove()
    # the reference rows' writes once, the empty circuit (the baseline), each size tried, the circuit's logits
    assert len(forwards) == 1 + 1 + len(circuit.curve) + 1
    ranked = scores.top(circuit.total_edges)
    span = circuit.clean_metric - circuit.corrupted_metric
    for k, faithfulness in circuit.curve:  # each size as circuit_metric measures it alone
        alone = circuit_metric(model, clean, corrupted, metric, [(s, r) for s, r, _ in ranked[:k]],
                               ablation="resample")
        assert faithfulness == pytest.approx((alone - circuit.corrupted_metric) / span, abs=1e-5)


def test_edge_scores_per_position_sum_to_the_edge_score():
    model, clean, corrupted, metric = _setup()
    scores = edge_attribution(model, clean, corrupted, metric, method="eap")
    assert scores.by_position.shape == (*scores.scores.shape, T)
    torch.testing.assert_close(scores.by_position.sum(-1), scores.scores, rtol=1e-5, atol=1e-6)
