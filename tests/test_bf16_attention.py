"""bfloat16 attention on the bfloat16 units (runtime/attention.py): the blocked kernel equals float32 attention
within bfloat16's rounding, forward and gradients, for every mask kind; a model takes it only where asked and
measured faster, and a CPU without bfloat16 units keeps the block's fused kernel."""

from __future__ import annotations

import pytest
import torch

from glassformer.nn.attention import AttentionInputs, MultiHeadAttention, fused_attention, scaled_dot_product_attention
from glassformer.nn.masks import padding_mask, prefix_mask
from glassformer.runtime import attention as bf16_attention
from glassformer.runtime import kernel_choice
from glassformer.runtime.attention import Bf16Attention, blocked_attention, use_bf16_attention

B, H, T, D = 2, 3, 21, 16  # T not a multiple of the block: a last, shorter block


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Blocks of 8 queries, so the short sequences here cross several blocks (and the causal diagonal)."""
    monkeypatch.setattr(bf16_attention, "BLOCK_Q", 8)


def _padding() -> torch.Tensor:
    pad = torch.zeros(B, T, dtype=torch.bool)
    pad[0, -5:] = True  # row 0's last 5 keys are padding
    return padding_mask(pad)  # (B, 1, 1, T)


MASKS = {  # name: (mask, is_causal, number of queries)
    "none": (None, False, T),
    "causal": (None, True, T),
    "causal, fewer queries (a cached prefix)": (None, True, 6),
    "padding": ("padding", False, T),
    "causal and padding": ("padding", True, T),
    "prefix": ("prefix", False, T),
    "per-row prefix": ("rows", False, T),
}


def _mask(kind: str | None) -> torch.Tensor | None:
    if kind == "padding":
        return _padding()
    if kind == "prefix":
        return prefix_mask(T, 7)  # (T, T)
    if kind == "rows":
        return prefix_mask(T, torch.tensor([3, 12]))  # (B, 1, T, T)
    return None


def _inputs(n_queries: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    shapes = [(B, H, n_queries, D), (B, H, T, D), (B, H, T, D)]
    return [torch.randn(s, generator=g).to(torch.bfloat16) for s in shapes]


@pytest.mark.parametrize("kept", [True, False], ids=["weights kept", "weights recomputed"])
@pytest.mark.parametrize("name", list(MASKS))
def test_forward_and_gradients_equal_float32_attention_within_bfloat16_rounding(name, kept, monkeypatch):
    monkeypatch.setattr(bf16_attention, "KEEP_WEIGHTS_KEYS", T if kept else T - 1)
    kind, is_causal, n_queries = MASKS[name]
    mask = _mask(kind)
    inputs = _inputs(n_queries)
    low = [x.clone().requires_grad_() for x in inputs]
    high = [x.float().requires_grad_() for x in inputs]  # the same numbers, in float32
    out = blocked_attention(*low, mask, is_causal=is_causal)
    ref, _ = scaled_dot_product_attention(*high, mask, is_causal=is_causal)  # float32, explicit softmax
    assert out.dtype == torch.bfloat16 and out.shape == ref.shape
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)
    grad = torch.randn(ref.shape, generator=torch.Generator().manual_seed(2))
    out.backward(grad.to(torch.bfloat16))
    ref.backward(grad)
    for a, b in zip(low, high, strict=True):
        assert a.grad.dtype == torch.bfloat16
        torch.testing.assert_close(a.grad.float(), b.grad, atol=4e-2, rtol=3e-2)


def test_a_query_with_no_visible_key_gets_zeros_and_no_gradient():
    mask = torch.ones(B, 1, T, T, dtype=torch.bool)
    mask[1, :, 4] = False  # row 1's query 4 sees nothing
    q, k, v = (x.requires_grad_() for x in _inputs(T))
    out = blocked_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and (out[1, :, 4] == 0).all()
    out.sum().backward()
    assert (q.grad[1, :, 4] == 0).all() and all(torch.isfinite(x.grad).all() for x in (q, k, v))


def test_the_scale_is_applied_and_the_default_is_one_over_root_d():
    q, k, v = _inputs(T)
    ref = fused_attention(q.float(), k.float(), v.float(), None, is_causal=True, score_bias=None, dropout_p=0.0,
                          scale=0.3)
    torch.testing.assert_close(blocked_attention(q, k, v, is_causal=True, scale=0.3).float(), ref, atol=2e-2,
                               rtol=2e-2)
    torch.testing.assert_close(blocked_attention(q, k, v, is_causal=True),
                               blocked_attention(q, k, v, is_causal=True, scale=D ** -0.5))


@pytest.fixture
def measured(monkeypatch):
    """Choices made in this test alone, the CPU shown with bfloat16 units and every measurement scripted:
    returns the list of (plain, special) measurements asked for; ``verdict[0]`` is their answer."""
    monkeypatch.setattr(kernel_choice, "_choices", {})
    monkeypatch.setattr(kernel_choice, "_save", lambda choices: None)
    monkeypatch.setattr(bf16_attention, "cpu_features", lambda: ["avx2", "avx512f", "avx512_bf16"])
    asked: list[tuple] = []
    verdict = [True]

    def faster(plain, special, pairs=7):
        asked.append((plain, special))
        return verdict[0]

    monkeypatch.setattr(kernel_choice, "faster", faster)
    return asked, verdict


def _attention() -> MultiHeadAttention:
    torch.manual_seed(0)
    return MultiHeadAttention(48, 3)


def test_a_model_asked_for_it_takes_the_blocked_kernel_where_measured_faster(measured, monkeypatch):
    asked, _ = measured
    calls = []
    monkeypatch.setattr(bf16_attention, "blocked_attention",
                        lambda *a, **k: calls.append(a[0].shape) or blocked_attention(*a, **k))
    attn, x = _attention(), torch.randn(2, T, 48)
    causal = AttentionInputs(is_causal=True, need_weights=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain, _ = attn(x, inputs=causal)
        assert use_bf16_attention(attn) == 1
        blocked, _ = attn(x, inputs=causal)
        blocked.float().sum().backward()
        attn(x, inputs=causal)  # the same shape class: not measured again
    assert calls == [(2, 3, T, 16)] * 2 and len(asked) == 1
    torch.testing.assert_close(blocked.float(), plain.float(), atol=2e-2, rtol=2e-2)
    assert list(kernel_choice.choices()) == ["attention bfloat16 blocked: train causal 6 rows Tq~32 Tk~32 d16"]
    fp32, _ = attn(x, inputs=causal)  # float32 work: the fused kernel, bit for bit
    use_bf16_attention(attn, enabled=False)
    assert attn.kernel is None and torch.equal(fp32, attn(x, inputs=causal)[0])


def test_where_not_measured_faster_the_fused_kernel_runs(measured, monkeypatch):
    asked, verdict = measured
    verdict[0] = False
    monkeypatch.setattr(bf16_attention, "blocked_attention", lambda *a, **k: pytest.fail("blocked kernel taken"))
    q, k, v = _inputs(T)
    out = Bf16Attention()(q, k, v, None, is_causal=True, score_bias=None, dropout_p=0.0, scale=D ** -0.5)
    assert len(asked) == 1
    assert torch.equal(out, fused_attention(q, k, v, None, is_causal=True, score_bias=None, dropout_p=0.0,
                                            scale=D ** -0.5))


def test_a_cpu_without_bfloat16_units_keeps_todays_kernel_without_measuring(measured, monkeypatch):
    asked, _ = measured
    monkeypatch.setattr(bf16_attention, "cpu_features", lambda: ["avx2"])  # AMD Zen 3: bfloat16 emulated
    monkeypatch.setattr(bf16_attention, "blocked_attention", lambda *a, **k: pytest.fail("blocked kernel taken"))
    attn, x = _attention(), torch.randn(2, T, 48)
    causal = AttentionInputs(is_causal=True, need_weights=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        today, _ = attn(x, inputs=causal)
        use_bf16_attention(attn)
        taken, _ = attn(x, inputs=causal)
    assert asked == [] and kernel_choice.choices() == {}
    assert torch.equal(taken, today)


@pytest.mark.parametrize("why", ["dropout", "score bias", "one query"])
def test_work_the_blocked_kernel_does_not_cover_goes_to_the_fused_kernel(measured, monkeypatch, why):
    asked, _ = measured
    monkeypatch.setattr(bf16_attention, "blocked_attention", lambda *a, **k: pytest.fail("blocked kernel taken"))
    q, k, v = _inputs(1 if why == "one query" else T)
    bias = torch.zeros(1, H, q.shape[2], T, dtype=torch.bfloat16) if why == "score bias" else None
    dropout = 0.5 if why == "dropout" else 0.0
    torch.manual_seed(3)
    out = Bf16Attention()(q, k, v, None, is_causal=True, score_bias=bias, dropout_p=dropout, scale=0.25)
    torch.manual_seed(3)
    assert torch.equal(out, fused_attention(q, k, v, None, is_causal=True, score_bias=bias, dropout_p=dropout,
                                            scale=0.25))
    assert asked == []


@pytest.mark.parametrize("precision", ["bfloat16", "float32"])
def test_the_trainer_asks_for_it_in_a_bfloat16_run_on_a_cpu(tmp_path, measured, monkeypatch, precision):
    from training_helpers import config, train

    asked, _ = measured
    calls = []
    monkeypatch.setattr(bf16_attention, "blocked_attention",
                        lambda *a, **k: calls.append(a[0].shape) or blocked_attention(*a, **k))
    trainer, result = train(config(tmp_path, "x", max_steps=2, eval_every=0, precision=precision))
    kernels = {type(m.kernel).__name__ for m in trainer.model.modules() if isinstance(m, MultiHeadAttention)}
    assert result["step"] == 2 and result["precision"] == precision
    if precision == "bfloat16":  # every layer has the kernel; the training step's shape was measured and taken
        assert kernels == {"Bf16Attention"} and asked and calls
    else:
        assert kernels == {"NoneType"} and not asked and not calls
