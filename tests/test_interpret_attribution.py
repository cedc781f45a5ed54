"""Attribution patching: exact where the metric is linear in the point, three passes for every point,
and the same (L, h) layout as exact patching (the induction model's agreement: docs/results.md)."""

from __future__ import annotations

import pytest
import torch

from glassformer import TransformerLM
from glassformer.errors import GlassformerError
from glassformer.interpret import hook_points, hooks, run_with_cache, run_with_patch
from glassformer.interpret.attribution import (
    attribution_patching,
    correlation,
    exact_head_patching,
    top_heads,
)
from glassformer.nn.taps import Tap

V = 40


def lm(**kw) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(vocab_size=V, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_len=32, **kw).eval()


def pair(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    clean = torch.randint(0, V, (2, 8), generator=torch.Generator().manual_seed(seed))
    corrupted = clean.clone()
    corrupted[:, :3] = torch.randint(0, V, (2, 3), generator=torch.Generator().manual_seed(seed + 1))
    return clean, corrupted


def logit_sum(logits: torch.Tensor) -> torch.Tensor:
    return logits[:, -1, :5].sum()


@pytest.mark.parametrize("kw", [dict(), dict(pos="rope", norm="rmsnorm", activation="swiglu", n_kv_heads=2)])
def test_estimate_is_exact_where_the_metric_is_linear(kw):
    model = lm(**kw)
    clean, corrupted = pair()
    result = attribution_patching(model, clean, corrupted, logit_sum)
    every = {p.name for p in hook_points(model).values() if not p.module.on_demand}  # per-head forms: by name
    assert set(result.total) == every  # every point, rot_q/k and norm points included
    _, corrupted_cache = run_with_cache(model, corrupted)
    with torch.no_grad():
        base = float(logit_sum(model(corrupted)))
        _, clean_cache = run_with_cache(model, clean)
        exact = float(logit_sum(run_with_patch(model, corrupted, cache=clean_cache, names="ln_final.hook_out"))) - base
    assert result.corrupted_metric == pytest.approx(base, abs=1e-5)
    assert result.total["ln_final.hook_out"] == pytest.approx(exact, abs=1e-4)  # logits are linear in it
    for name, by_position in result.by_position.items():
        assert by_position.shape == (8,)
        assert float(by_position.sum()) == pytest.approx(result.total[name], abs=1e-4)
    assert result.heads().shape == (2, 4) and result.layers("attn_out").shape == (2,)
    assert all(torch.isfinite(t).all() for t in result.by_position.values())  # masked scores count 0, not nan


def test_three_passes_for_every_point():
    model = lm()
    clean, corrupted = pair()
    calls = []
    with hooks(model, [("hook_embed", lambda x, hook: calls.append(x.shape))]):
        attribution_patching(model, clean, corrupted, logit_sum)
    assert len(calls) == 2  # one clean forward, one corrupted forward (and its backward)
    assert all(m.fn is None for m in model.modules() if isinstance(m, Tap))  # nothing left attached


def test_heads_agree_with_exact_patching_where_small_changes():
    model = lm(attn_only=True, pos="rope")
    clean, corrupted = pair(3)
    corrupted = clean.clone()
    corrupted[:, 2] = (clean[:, 2] + 1) % V  # one token changed: the estimate's regime

    def loss(logits: torch.Tensor) -> torch.Tensor:
        return -logits[:, -1].log_softmax(-1)[:, 0].mean()

    estimate = attribution_patching(model, clean, corrupted, loss, names="z").heads()
    exact = exact_head_patching(model, clean, corrupted, loss)
    assert estimate.shape == exact.shape == (2, 4)
    assert correlation(estimate, exact) > 0.9
    assert top_heads(exact, 1)[0][:2] == top_heads(estimate, 1)[0][:2]


def test_metric_must_be_a_differentiable_number():
    model = lm()
    clean, corrupted = pair()
    with pytest.raises(GlassformerError, match="metric must return a 0-dim float tensor"):
        attribution_patching(model, clean, corrupted, lambda logits: logits[:, -1, 0])
    with pytest.raises(GlassformerError, match="no per-head point"):
        attribution_patching(model, clean, corrupted, logit_sum, names="resid_pre").heads()


def test_top_heads_and_correlation():
    table = torch.tensor([[0.1, -0.9], [0.5, 0.0]])
    assert top_heads(table, 2) == [(0, 1, pytest.approx(-0.9)), (1, 0, pytest.approx(0.5))]
    assert correlation(table, 2 * table + 1) == pytest.approx(1.0)
