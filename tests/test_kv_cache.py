"""The KV cache must give the logits of full recomputation, at every step, for every architecture."""

from __future__ import annotations

import pytest
import torch

from glassformer import EncoderDecoder, KVCache, TransformerLM
from glassformer.generation import IncrementalDecoder

V, D, H = 40, 32, 4


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models: one thread is fastest, and far faster than two on a loaded 2-core machine."""
    torch.set_num_threads(1)
LM_CASES = {
    "sinusoidal": dict(pos="sinusoidal"),
    "learned": dict(pos="learned"),
    "rope": dict(pos="rope"),
    "alibi": dict(pos="alibi"),
    "gqa-rope": dict(pos="rope", n_kv_heads=2),
    "mqa-alibi": dict(pos="alibi", n_kv_heads=1),
    "post-norm-learned": dict(pos="learned", norm_first=False),
    "llama-style": dict(pos="rope", norm="rmsnorm", activation="swiglu", bias=False, tie=False, n_kv_heads=2),
}


def lm(**kw) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(vocab_size=V, d_model=D, n_heads=H, n_layers=2, d_ff=64, max_len=32, **kw).eval()


@pytest.mark.parametrize("case", sorted(LM_CASES))
@torch.inference_mode()
def test_lm_cache_equals_recomputation_every_step(case):
    model = lm(**LM_CASES[case])
    ids = torch.randint(0, V, (2, 12), generator=torch.Generator().manual_seed(1))
    prompt = 4
    cache = model.new_cache(2, 12)
    logits = model(ids[:, :prompt], cache=cache)
    torch.testing.assert_close(logits, model(ids[:, :prompt]), rtol=0, atol=1e-5)
    for t in range(prompt, 12):
        step = model(ids[:, t:t + 1], cache=cache)[:, -1]
        full = model(ids[:, :t + 1])[:, -1]
        torch.testing.assert_close(step, full, rtol=0, atol=1e-5)
    assert cache[0].length == 12


@pytest.mark.parametrize("pos", ["learned", "rope", "alibi", "sinusoidal"])
@torch.inference_mode()
def test_prefix_lm_cache_encodes_prefix_bidirectionally(pos):
    model = lm(pos=pos, attn="prefix")
    ids = torch.randint(0, V, (2, 10), generator=torch.Generator().manual_seed(2))
    prefix = 5
    cache = model.new_cache(2, 10)
    first = model(ids[:, :prefix], prefix_len=prefix, cache=cache)
    torch.testing.assert_close(first, model(ids[:, :prefix], prefix_len=prefix), rtol=0, atol=1e-5)
    # the prefix really is bidirectional: its first position sees the last prefix token
    changed = ids[:, :prefix].clone()
    changed[:, prefix - 1] = (changed[:, prefix - 1] + 1) % V
    assert not torch.allclose(model(changed, prefix_len=prefix)[:, 0], first[:, 0])
    for t in range(prefix, 10):
        step = model(ids[:, t:t + 1], prefix_len=prefix, cache=cache)[:, -1]
        full = model(ids[:, :t + 1], prefix_len=prefix)[:, -1]
        torch.testing.assert_close(step, full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("kw", [dict(pos="sinusoidal"), dict(pos="learned"), dict(pos="rope", n_kv_heads=2),
                                dict(pos="alibi", n_kv_heads=1)], ids=["sinusoidal", "learned", "gqa-rope",
                                                                       "mqa-alibi"])
@torch.inference_mode()
def test_encoder_decoder_cache_equals_recomputation(kw):
    torch.manual_seed(0)
    model = EncoderDecoder(vocab_size=V, d_model=D, n_heads=H, n_enc=2, n_dec=2, d_ff=64, max_len=32, **kw)
    model.eval()
    g = torch.Generator().manual_seed(3)
    src, tgt = torch.randint(0, V, (2, 7), generator=g), torch.randint(0, V, (2, 9), generator=g)
    src_pad = torch.zeros(2, 7, dtype=torch.bool)
    src_pad[1, 5:] = True  # the second source is shorter
    memory = model.encode(src, src_pad)
    cache = model.new_cache(2, 9, 7)
    for t in range(9):
        step = model.decode(tgt[:, t:t + 1], memory if t == 0 else None, src_pad, cache=cache)[:, -1]
        full = model.decode(tgt[:, :t + 1], memory, src_pad)[:, -1]
        torch.testing.assert_close(step, full, rtol=0, atol=1e-5)
    assert cache[0].cross_attn.length == 7  # cross-attention keys/values were computed once


@pytest.mark.parametrize("case", ["learned", "rope", "alibi", "gqa-rope"])
@torch.inference_mode()
def test_left_padded_rows_with_cache_equal_unpadded(case):
    """Positions count real tokens only, and padded keys are masked, so padding changes nothing."""
    model = lm(**LM_CASES[case])
    ids = torch.randint(0, V, (1, 9), generator=torch.Generator().manual_seed(4))
    n_pad = 3
    padded = torch.cat([torch.zeros(1, n_pad, dtype=torch.long), ids], dim=1)
    pad = torch.zeros(1, 9 + n_pad, dtype=torch.bool)
    pad[:, :n_pad] = True
    decoder = IncrementalDecoder(model, padded[:, :n_pad + 4], pad[:, :n_pad + 4], 5)
    logits = decoder.start()
    for t in range(4, 9):
        torch.testing.assert_close(logits, model(ids[:, :t])[:, -1], rtol=0, atol=1e-5)
        decoder.append(ids[:, t])
        logits = decoder.next_logits()


def test_kv_cache_rejects_overflow_and_reorders_rows():
    cache = KVCache(3, 2, 4, 8)
    k = torch.arange(3.0)[:, None, None, None].expand(3, 2, 3, 8)
    cache.update(k, k)
    cache.reorder(torch.tensor([2, 2, 0]))
    assert cache.keys()[:, 0, 0, 0].tolist() == [2.0, 2.0, 0.0]
    assert cache.length == 3
    with pytest.raises(ValueError, match="holds 4 positions"):
        cache.update(k[:, :, :2], k[:, :, :2])
