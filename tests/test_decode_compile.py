"""``generate(..., compile=...)``: one-token steps through the model's own forward on a static cache, compiled by
``torch.compile`` where asked; the same tokens as the eager steps. ``torch.compile`` itself is replaced by a
stand-in here (compiling a tiny model's step takes 46-87 s on one thread of a busy 2-core machine); the real
compile runs with GLASSFORMER_COMPILE_TESTS=1."""

from __future__ import annotations

import os

import pytest
import torch

from glassformer import TransformerLM
from glassformer.errors import GlassformerError
from glassformer.generation import GenerationConfig, generate
from glassformer.runtime import decode


def lm(**kw) -> TransformerLM:
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=53, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_len=48, **kw)
    with torch.no_grad():  # trained-looking norms (gains not 1)
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.mul_(1.5).add_(0.1 * torch.randn_like(p))
    return model.eval()


@pytest.fixture
def fake_compile(monkeypatch):
    """``torch.compile`` replaced by a stand-in that returns the function itself and records each request; the
    compiled step and what this process knows of compiled models start afresh."""
    asked = []

    def compile_(fn, **options):
        asked.append(options)
        return fn

    monkeypatch.setattr(torch, "compile", compile_)
    monkeypatch.setattr(decode, "_compiled_step", [])
    monkeypatch.setattr(decode, "compiled_models", decode.weakref.WeakKeyDictionary())
    return asked


@pytest.mark.parametrize("case", [dict(pos="learned", activation="gelu_tanh"),
                                  dict(pos="rope", norm="rmsnorm", activation="swiglu", n_kv_heads=2, bias=False),
                                  dict(pos="sinusoidal", norm_first=False, attn_only=True)])
def test_compiled_steps_give_the_eager_tokens(fake_compile, case):
    """compile=True: the fixed-shape step (static cache, a slot given as a tensor) through torch.compile, asked
    once for every call and shape; greedy tokens equal the eager steps'; the window slides past max_len."""
    model = lm(**case)
    prompts = [[3, 5, 7], [9, 11, 13]]
    for new in (20, 60):  # 60: past max_len 48, the window is recomputed and a new cache made
        assert torch.equal(generate(model, prompts, new, compile=True), generate(model, prompts, new))
    assert fake_compile == [{"fullgraph": True}]
    known = decode.compiled_models[model]
    assert (2, 23) in known.shapes and known.gain is not None and known.compile_s >= 0


def test_compile_auto_compiles_only_what_pays(fake_compile, monkeypatch):
    """compile="auto": a short generation of a model not compiled yet stays eager (no torch.compile); enough
    tokens compile; after that the same shapes take the compiled step where it measured faster, and the eager
    one where it measured slower."""
    model = lm()
    eager = generate(model, [1, 2, 3], 10)
    assert torch.equal(generate(model, [1, 2, 3], 10, compile="auto"), eager)
    assert fake_compile == [] and model not in decode.compiled_models
    monkeypatch.setattr(decode, "AUTO_COMPILE_TOKENS", 10)
    assert torch.equal(generate(model, [1, 2, 3], 10, compile="auto"), eager)
    assert decode.compiled_models[model].shapes == {(1, 13)}
    monkeypatch.setattr(decode, "AUTO_COMPILE_TOKENS", 10**9)
    decode.compiled_models[model].gain = 2.0
    assert decode.wants_compiled(model, "auto", 1, 13, 10) is True
    assert decode.wants_compiled(model, "auto", 1, 14, 10) is False  # another shape would compile again
    decode.compiled_models[model].gain = 1.0  # not faster: the eager step
    assert decode.wants_compiled(model, "auto", 1, 13, 10) is False
    assert decode.wants_compiled(model, True, 1, 14, 1) is True
    assert decode.wants_compiled(model, False, 1, 13, 10**9) is False


def test_compile_auto_drops_a_compiled_step_measured_slower(fake_compile, monkeypatch):
    """The first compiled step of a shape is timed against the eager one; under "auto" a slower one is left
    for the eager step at once (compile=True keeps it: asked for)."""
    monkeypatch.setattr(decode.StaticSteps, "_gain", lambda self, pairs=5, steps=4: 0.5)
    monkeypatch.setattr(decode, "AUTO_COMPILE_TOKENS", 1)
    model = lm()
    taken = []
    real = decode.StaticSteps._run_compiled
    monkeypatch.setattr(decode.StaticSteps, "_run_compiled", lambda self: taken.append(1) or real(self))
    assert torch.equal(generate(model, [1, 2, 3], 10, compile="auto"), generate(model, [1, 2, 3], 10))
    assert len(taken) == 1 and decode.compiled_models[model].gain == 0.5
    generate(model, [1, 2, 3], 10, compile=True)
    assert len(taken) == 1 + 9


def test_compile_auto_falls_back_to_eager_where_compiling_fails(monkeypatch):
    """A compile that fails (no C compiler, say): "auto" decodes eagerly, the same tokens, and does not try those
    shapes again in this process; compile=True, asked for, shows the error."""
    def failing(fn, **options):
        def compiled(*args):
            raise RuntimeError("no compiler here")
        return compiled

    monkeypatch.setattr(torch, "compile", failing)
    monkeypatch.setattr(decode, "_compiled_step", [])
    monkeypatch.setattr(decode, "compiled_models", decode.weakref.WeakKeyDictionary())
    monkeypatch.setattr(decode, "AUTO_COMPILE_TOKENS", 1)
    model = lm()
    assert torch.equal(generate(model, [1, 2, 3], 10, compile="auto"), generate(model, [1, 2, 3], 10))
    assert decode.compiled_models[model].gain == 0.0
    assert decode.wants_compiled(model, "auto", 1, 13, 10) is False
    with pytest.raises(RuntimeError, match="no compiler here"):
        generate(model, [1, 2, 3], 10, compile=True)


def test_compiled_steps_only_where_the_shapes_can_be_fixed(fake_compile):
    """Left padding and hooks keep the ordinary cached step (a hook attached during generation too: the next
    step runs it); nothing is compiled for them."""
    model = lm()
    generate(model, [[1, 2, 3], [4, 5]], 5, compile=True)  # left padding
    seen = []
    model.blocks[0].ffn.hook_post.fn = lambda x: seen.append(1) or x
    generate(model, [1, 2, 3], 5, compile=True)
    assert fake_compile == [] and len(seen) == 5  # the prompt and 4 steps
    model.blocks[0].ffn.hook_post.fn = None
    from glassformer.generation.api import iter_steps, setup_generation

    with torch.inference_mode():
        setup = setup_generation(model, [1, 2, 3], compile=True, max_new_tokens=6)
        for i, _ in enumerate(iter_steps(setup)):
            if i == 2:
                model.blocks[0].ffn.hook_post.fn = lambda x: seen.append(1) or x
    model.blocks[0].ffn.hook_post.fn = None
    assert len(seen) == 5 + 3  # steps after the hook was attached ran it
    assert setup.decoder.static is not None and setup.decoder.static.steps == 2


@pytest.mark.parametrize("bad", ["yes", 1, None, "Auto"])
def test_compile_takes_true_false_or_auto(bad):
    with pytest.raises(GlassformerError, match=f"compile must be True, False or 'auto', got {bad!r}"):
        GenerationConfig(compile=bad)


@pytest.mark.skipif(not os.environ.get("GLASSFORMER_COMPILE_TESTS"),
                    reason="torch.compile of a tiny model's step takes 46-87 s on one thread of the 2-core CI machine; "
                           "run with GLASSFORMER_COMPILE_TESTS=1")
def test_really_compiled_steps_give_the_eager_tokens():
    model = lm(pos="rope", norm="rmsnorm", activation="swiglu", n_kv_heads=2, bias=False)
    prompts = [[3, 5, 7]]
    assert torch.equal(generate(model, prompts, 20, compile=True), generate(model, prompts, 20))


def test_the_route_switch_holds_from_one_generation_to_the_next(monkeypatch):
    """Each model keeps one few-row product per setting across generate calls: the route taken where measured
    faster, and set_batched_matvec(False) turns it off for the next call on the same model (no bmm)."""
    from glassformer.runtime import kernel_choice
    from glassformer.runtime.linear import MIN_WEIGHT, set_batched_matvec

    monkeypatch.setattr(kernel_choice, "_choices", {})
    monkeypatch.setattr(kernel_choice, "_kept_in", False)
    monkeypatch.setattr(kernel_choice, "faster", lambda plain, special, pairs=7, rounds=3: True)
    monkeypatch.setattr(kernel_choice, "load_now", lambda: 0)
    bmm = []
    for name in ("bmm", "baddbmm"):  # the route's product (baddbmm: with the bias added inside)
        real = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda *a, real=real, **k: bmm.append(1) or real(*a, **k))
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=50, d_model=256, n_heads=4, n_layers=1, d_ff=1024, max_len=32).eval()
    assert model.blocks[0].ffn.up.weight.numel() >= MIN_WEIGHT
    routed = generate(model, [1, 2, 3], 6)
    assert bmm
    bmm.clear()
    previous = set_batched_matvec(False)
    try:
        plain = generate(model, [1, 2, 3], 6)
    finally:
        set_batched_matvec(previous)
    assert bmm == [] and torch.equal(routed, plain)
