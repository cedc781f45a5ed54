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
