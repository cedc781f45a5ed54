"""Cached decoding steps are the model's own forward on a preallocated (static) cache: the same tokens and
logits as a recomputation, hooks fire at every step, fixed-shape steps (CUDA graphs) give the same numbers,
and ids are checked once where they enter (never by the decoder's or the trainer's steps)."""

from __future__ import annotations

import os

import pytest
import torch

import glassformer.generation.incremental as incremental
import glassformer.models.encdec as encdec_module
import glassformer.models.inputs
import glassformer.models.lm as lm_module
from glassformer import EncoderDecoder, TransformerLM
from glassformer.errors import GlassformerError
from glassformer.generation import IncrementalDecoder, generate

V = 53
CASES = {
    "gpt2": dict(pos="learned", activation="gelu_tanh", init_std=0.02),
    "llama": dict(pos="rope", norm="rmsnorm", activation="swiglu", n_kv_heads=2, bias=False),
    "post-norm": dict(pos="sinusoidal", norm_first=False, activation="relu"),
    "alibi-mqa": dict(pos="alibi", n_kv_heads=1),
    "attn-only": dict(attn_only=True),
    "prefix": dict(attn="prefix"),
}


def lm(**kw) -> TransformerLM:
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=V, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_len=48, **kw)
    with torch.no_grad():  # trained-looking norms (gains not 1)
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.mul_(1.5).add_(0.1 * torch.randn_like(p))
    return model.eval()


@pytest.mark.parametrize("case", sorted(CASES))
def test_cached_steps_give_the_models_tokens_and_logits(case):
    """Every cached step is the model's own forward on its preallocated cache: the logits of a recomputation
    from scratch, and the tokens of generation without a cache."""
    model = lm(**CASES[case])
    prompts = [[3, 5, 7, 9, 11], [2, 4]]  # left-padded: per-row positions and a padding mask
    cached = generate(model, prompts, 20, do_sample=False)
    prefix = {"prefix_len": 4} if case == "prefix" else {}
    decoder = IncrementalDecoder(model, torch.tensor([[1, 2, 3, 4]]), None, 6,
                                 prefix_len=torch.tensor([4]) if prefix else None)
    with torch.inference_mode():
        logits = decoder.start()
        for _ in range(6):
            decoder.append(logits.argmax(-1))
            logits = decoder.next_logits()
            full = model(decoder.sequences(), **prefix)[:, -1]  # recomputed from scratch by the model
            torch.testing.assert_close(logits, full, rtol=0, atol=1e-5)
    if case != "prefix":
        assert torch.equal(cached, generate(model, prompts, 20, do_sample=False, use_cache=False))


def test_cached_steps_follow_the_sliding_window():
    """Past max_len the window is recomputed by the model; the cached steps go on in the new cache."""
    model = lm(**CASES["gpt2"])
    assert torch.equal(generate(model, [1, 2, 3], 70), generate(model, [1, 2, 3], 70, use_cache=False))


def test_hooks_fire_at_every_step():
    """The steps are the model's forward: module hooks and hook points see the prompt, then each new token."""
    model = lm()
    seen = []
    handle = model.blocks[1].register_forward_hook(lambda module, args, out: seen.append(out[0].shape[1]))
    generate(model, [1, 2, 3], 5)
    handle.remove()
    assert seen == [3, 1, 1, 1, 1]  # the prompt, then each cached step
    model.blocks[0].ffn.hook_post.fn = lambda x: seen.append(x.shape[1]) or x  # a hook point
    generate(model, [1, 2, 3], 3)
    model.blocks[0].ffn.hook_post.fn = None
    assert seen[5:] == [3, 1, 1]


def test_generation_replaces_no_forward_and_restores_the_products():
    """The few-row product is a flag each linear layer's own forward reads (set while generating on the layers
    large enough for the route, then restored); no module gets an instance ``forward``."""
    from glassformer.nn.linear import Linear
    from glassformer.runtime.linear import MIN_WEIGHT, FewRowProduct

    torch.manual_seed(0)
    model = TransformerLM(vocab_size=V, d_model=128, n_heads=4, n_layers=1, d_ff=1024, max_len=48).eval()
    big, small = model.blocks[0].ffn.up, model.blocks[0].self_attn.o_proj
    assert big.weight.numel() >= MIN_WEIGHT > small.weight.numel()
    layers = [m for m in model.modules() if isinstance(m, Linear)]
    seen = []
    for layer in (big, small):
        layer.register_forward_pre_hook(lambda m, args: seen.append((m is big, type(m.product))))
    generate(model, [1, 2, 3], 3)
    assert seen == [(False, type(None)), (True, FewRowProduct)] * 3  # o_proj, then ffn.up, each step
    assert all(m.product is None and "forward" not in vars(m) for m in model.modules() if m in layers)
    assert not any("forward" in vars(m) for m in model.modules())


def test_the_cache_is_allocated_once_when_it_is_small():
    model = lm()
    decoder = IncrementalDecoder(model, torch.tensor([[1, 2, 3]]), None, 20)
    with torch.inference_mode():
        logits = decoder.start()
        buffers = [layer.k.data_ptr() for layer in decoder.cache]
        assert all(layer.capacity == 23 for layer in decoder.cache)  # prompt + max_new_tokens, at once
        for _ in range(20):
            decoder.append(logits.argmax(-1))
            logits = decoder.next_logits() if decoder.length < 23 else logits
    assert [layer.k.data_ptr() for layer in decoder.cache] == buffers  # never reallocated


# ---------------------------------------------------------------------- ids checked once, where they enter
def count_id_checks(monkeypatch) -> list[str]:
    """Count every call of the id range check, wherever it is imported from."""
    calls = []
    real = glassformer.models.inputs.check_token_ids

    def counted(ids, vocab_size, name="ids"):
        calls.append(name)
        return real(ids, vocab_size, name)

    for module in (lm_module, encdec_module, incremental):
        monkeypatch.setattr(module, "check_token_ids", counted)
    return calls


def test_decoding_steps_never_check_ids(monkeypatch):
    calls = count_id_checks(monkeypatch)
    for model in (lm(), lm(**CASES["llama"])):
        decoder = IncrementalDecoder(model, torch.tensor([[1, 2, 3]]), None, 8)
        assert calls == ["ids"]  # once, where the prompt enters
        with torch.inference_mode():
            logits = decoder.start()
            for _ in range(8):
                decoder.append(logits.argmax(-1))
                logits = decoder.next_logits()
        assert calls == ["ids"]
        calls.clear()
    generate(lm(), [1, 2, 3], 6)  # the model's own forward, called by the decoder, does not check either
    assert calls == ["ids"]


def test_seq2seq_decoding_checks_the_source_once(monkeypatch):
    torch.manual_seed(0)
    model = EncoderDecoder(vocab_size=V, d_model=16, n_heads=2, n_enc=1, n_dec=1, d_ff=32).eval()
    calls = count_id_checks(monkeypatch)
    generate(model, [4, 5, 6], 6, decoder_start_token_id=1)
    assert sorted(calls) == ["ids", "src"]  # the source (encode) and the start tokens (the decoder), once each


def test_a_training_step_never_checks_ids(tmp_path, monkeypatch):
    from glassformer.training import Trainer, prepare_run
    from training_helpers import config

    cfg = config(tmp_path)
    run = prepare_run(cfg)
    trainer = Trainer(cfg, run.model, run.tokenizer, run.batches)
    calls = count_id_checks(monkeypatch)
    trainer.train_step()
    trainer.train_step()
    assert trainer.step == 2 and calls == []


def test_a_users_ids_are_still_checked():
    model = lm()
    with pytest.raises(GlassformerError, match=f"token id {V} .*vocab_size={V}|{V}.*out of range"):
        model(torch.tensor([[1, V]]))
    with pytest.raises(GlassformerError, match="out of range|vocab_size"):
        generate(model, torch.tensor([[1, -1]]), 3)
    with pytest.raises(GlassformerError, match="out of range|vocab_size"):
        generate(model, [[1, V + 5]], 3)
    with pytest.raises(GlassformerError, match="out of range|vocab_size"):
        IncrementalDecoder(model, torch.tensor([[V]]), None, 3)
    seq2seq = EncoderDecoder(vocab_size=V, d_model=16, n_heads=2, n_enc=1, n_dec=1, d_ff=32).eval()
    with pytest.raises(GlassformerError, match="src"):
        seq2seq(torch.tensor([[V]]), torch.tensor([[1]]))


DEVICE = os.environ.get("GLASSFORMER_CUDA_TESTS_DEVICE") or "cuda"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (pytest -m cuda on a GPU machine)")
def test_training_and_decoding_steps_never_wait_for_the_gpu(tmp_path):
    """Under torch.cuda.set_sync_debug_mode("error") (any host-device synchronisation raises), a training
    step (after a first one) and 32 greedy decoding steps run: nothing checks ids on the device."""
    from glassformer.training import Trainer, prepare_run
    from training_helpers import config

    cfg = config(tmp_path, device="cuda")
    run = prepare_run(cfg)
    trainer = Trainer(cfg, run.model, run.tokenizer, run.batches)
    trainer.train_step()
    model = lm().to("cuda")
    decoder = IncrementalDecoder(model, torch.tensor([[1, 2, 3]], device="cuda"), None, 40)
    with torch.inference_mode():
        logits = decoder.start()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        trainer.train_step()
        with torch.inference_mode():
            for _ in range(32):
                decoder.append(logits.argmax(-1))
                logits = decoder.next_logits()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert trainer.step == 2 and decoder.length == 3 + 32


# ---------------------------------------------------------------------- fixed-shape steps (CUDA graphs)
@pytest.fixture
def static_steps():
    from glassformer.runtime.decode import set_static_steps

    previous = set_static_steps("static")
    yield
    set_static_steps(previous)


@pytest.mark.parametrize("case", sorted(set(CASES) - {"alibi-mqa"}))
def test_fixed_shape_steps_give_the_models_logits(case, static_steps):
    """set_static_steps("static"): every step writes its keys at a slot given as a tensor and attends over
    the whole preallocated cache under a mask (the shapes a CUDA graph replays); the logits equal the
    model's from scratch, and the tokens the ordinary steps'."""
    from glassformer.runtime.decode import set_static_steps

    model = lm(**CASES[case])
    prefix = {"prefix_len": 4} if case == "prefix" else {}
    decoder = IncrementalDecoder(model, torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]]), None, 10,
                                 prefix_len=torch.tensor([4, 4]) if prefix else None)
    with torch.inference_mode():
        logits = decoder.start()
        for _ in range(10):
            decoder.append(logits.argmax(-1))
            logits = decoder.next_logits()
            full = model(decoder.sequences(), **prefix)[:, -1]
            torch.testing.assert_close(logits, full, rtol=0, atol=1e-5)
    assert decoder.static is not None and decoder.static.steps == 10 and decoder.static.graphs is False
    fixed = generate(model, [[3, 5, 7], [9, 11, 13]], 60)  # max_len 48: the window slides, a new cache
    set_static_steps("off")
    assert torch.equal(fixed, generate(model, [[3, 5, 7], [9, 11, 13]], 60))


def test_fixed_shape_steps_only_where_the_shapes_can_be_fixed(static_steps, monkeypatch):
    """Padding (per-row masks), ALiBi (a bias that follows the slot), a hook, or the mode off: the
    ordinary cached step, never the fixed-shape step."""
    from glassformer.runtime.decode import StaticSteps, set_static_steps

    taken = []
    real = StaticSteps.__call__
    monkeypatch.setattr(StaticSteps, "__call__", lambda self, *a: taken.append(1) or real(self, *a))
    generate(lm(), [[1, 2, 3], [4, 5]], 5)  # left padding
    generate(lm(**CASES["alibi-mqa"]), [1, 2, 3], 5)
    model = lm()
    model.blocks[0].ffn.hook_post.fn = lambda x: x
    generate(model, [1, 2, 3], 5)
    model.blocks[0].ffn.hook_post.fn = None
    assert taken == []
    set_static_steps("graphs")  # no CUDA here: the same fixed-shape step, without a graph
    generate(model, [1, 2, 3], 5)
    assert len(taken) == 4
    set_static_steps("off")
    generate(model, [1, 2, 3], 5)
    assert len(taken) == 4
    with pytest.raises(GlassformerError, match="mode must be 'off', 'static' or 'graphs', got 'on'"):
        set_static_steps("on")


def test_fixed_shape_steps_under_bfloat16_autocast(static_steps):
    """Under autocast the projections give bfloat16 keys, written into the float32 cache as the ordinary
    step writes them: the same tokens."""
    from glassformer.runtime.decode import set_static_steps

    model = lm(**CASES["llama"])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fixed = generate(model, [3, 5, 7, 9], 16)
        set_static_steps("off")
        assert torch.equal(fixed, generate(model, [3, 5, 7, 9], 16))
