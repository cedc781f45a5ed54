"""runtime.linear and runtime.decode: the few-row route equals F.linear, is taken only where it should be,
is a flag the model's own linear layers read (parameters, state dict, hooks untouched), and can be turned off."""

import pytest
import torch
import torch.nn.functional as F

from glassformer import TransformerLM
from glassformer.generation import generate
from glassformer.nn import TransformerBlock
from glassformer.runtime import kernel_choice
from glassformer.runtime.decode import few_row_products
from glassformer.runtime.linear import FEW_ROWS, MIN_WEIGHT, FewRowProduct, linear, set_batched_matvec


@pytest.fixture
def bmm_calls(monkeypatch):
    """Count torch.bmm and torch.baddbmm calls (the few-row route's product; baddbmm adds a bias), with the
    route chosen for every shape (as if measured faster on this machine: the choice itself is tested in
    test_kernel_choice.py)."""
    monkeypatch.setattr(kernel_choice, "_choices", {})
    monkeypatch.setattr(kernel_choice, "faster", lambda plain, special, pairs=7: True)
    calls = []
    for name in ("bmm", "baddbmm"):
        real = getattr(torch, name)

        def spy(*args, real=real, **kwargs):
            calls.append(args[0].shape)
            return real(*args, **kwargs)

        monkeypatch.setattr(torch, name, spy)
    return calls


# (out, in): a multiple of 4 rows, and GPT-2's vocabulary (50257 = 4 * 12564 + 1: one row left over)
@pytest.mark.parametrize("shape", [(1536, 384), (50257, 8)])
@pytest.mark.parametrize("x_shape", [(1, 1), (1,), (4, 1), (2, 2), (3,)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_few_rows_equal_f_linear(shape, x_shape, with_bias, bmm_calls):
    torch.manual_seed(0)
    n_out, n_in = shape
    weight, bias = torch.randn(n_out, n_in), (torch.randn(n_out) if with_bias else None)
    x = torch.randn(*x_shape, n_in)
    with torch.no_grad():
        got, want = linear(x, weight, bias), F.linear(x, weight, bias)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
    assert len(bmm_calls) == 1 and bmm_calls[0] == (4, n_out // 4, n_in)


@pytest.mark.parametrize("case", ["grad", "many rows", "small weight", "float64", "off"])
def test_other_cases_are_exactly_f_linear(case, bmm_calls):
    torch.manual_seed(0)
    weight = torch.randn(16 if case == "small weight" else 1536, 384)
    x = torch.randn(FEW_ROWS + 1 if case == "many rows" else 1, 384)
    if case == "float64":
        weight, x = weight.double(), x.double()
    previous = set_batched_matvec(case != "off")
    try:
        with torch.set_grad_enabled(case == "grad"):
            got = linear(x, weight)
        assert torch.equal(got, F.linear(x, weight))  # bit for bit: the plain path
    finally:
        set_batched_matvec(previous)
    assert bmm_calls == []


def test_weight_size_threshold():
    assert 1536 * 384 >= MIN_WEIGHT > 512 * 128  # baby's matrices take the route, small's do not


def test_the_route_is_a_flag_the_layers_own_forward_reads_and_leaves_the_model_as_it_was(bmm_calls):
    """Inside ``few_row_products`` the big projections and the output layer take the route (same logits to
    rounding, same hooks firing) through their own forward; parameters and state dict never change, no
    forward is replaced, and on leaving every layer's ``product`` is None again."""
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=600, d_model=256, n_heads=4, n_layers=1, d_ff=1024, max_len=16).eval()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    fired = []
    model.blocks[0].ffn.up.register_forward_hook(lambda m, args, out: fired.append(out.shape))
    ids = torch.randint(0, 600, (1, 1))
    with torch.no_grad():
        plain = model(ids)
        assert bmm_calls == []
        with few_row_products(model):
            routed = model(ids)
            assert isinstance(model.blocks[0].ffn.up.product, FewRowProduct) and model.head.product is not None
        after = model(ids)
    assert len(bmm_calls) == 4  # ffn.up, ffn.down (256 x 1024), the tied head (600 x 256); qkv (768 x 256)
    torch.testing.assert_close(routed, plain, rtol=1e-5, atol=1e-5)
    assert torch.equal(after, plain) and len(fired) == 3
    assert not any("forward" in vars(m) for m in model.modules())
    assert all(getattr(m, "product", None) is None for m in model.modules())
    assert model.state_dict().keys() == state.keys()
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


def test_set_batched_matvec_needs_a_bool():
    with pytest.raises(TypeError, match="enabled must be a bool, got int"):
        set_batched_matvec(1)


def test_generation_is_the_same_with_the_route_on_and_off(bmm_calls):
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=50, d_model=256, n_heads=4, n_layers=2, d_ff=1024, max_len=64).eval()
    prompt = torch.randint(0, 50, (2, 5))
    on = generate(model, prompt, 12)
    assert bmm_calls  # the decoding steps took the route
    previous = set_batched_matvec(False)
    try:
        off = generate(model, prompt, 12)
    finally:
        set_batched_matvec(previous)
    assert torch.equal(on, off)


def test_block_drops_each_sublayer_output_once():
    """Dropout acts once on each sub-layer's output, and nowhere inside the feed-forward."""
    torch.manual_seed(0)
    block = TransformerBlock(8, 2, 32, dropout=0.5).train()  # pre-norm: x + dropout(f(norm(x)))
    seen = {}
    block.attn_norm.register_forward_pre_hook(lambda m, args: seen.update(x0=args[0]))
    block.self_attn.register_forward_hook(lambda m, args, out: seen.update(attn=out[0]))  # before any dropout
    block.ffn_norm.register_forward_pre_hook(lambda m, args: seen.update(x1=args[0]))
    block.ffn.register_forward_pre_hook(lambda m, args: seen.update(ffn_in=args[0]))
    block.ffn.down.register_forward_hook(lambda m, args, out: seen.update(hidden=args[0], ffn=out))
    out, _ = block(torch.randn(3, 5, 8))
    for residual, before, branch in (("x1", "x0", "attn"), ("out", "x1", "ffn")):
        after = out if residual == "out" else seen[residual]
        ratio = (after - seen[before]) / seen[branch]  # 0 where dropped, 1/(1-p) = 2 where kept
        kept = ratio.abs() > 0.5
        assert torch.allclose(ratio[kept], torch.tensor(2.0), atol=1e-4), branch  # twice would give 4s
        assert (~kept).any() and torch.allclose(ratio[~kept], torch.tensor(0.0), atol=1e-4), branch
    # the feed-forward's hidden activations are not dropped
    assert torch.equal(seen["hidden"], F.gelu(block.ffn.up(seen["ffn_in"])))


@pytest.mark.parametrize("batch", [1, 8])
def test_where_the_route_does_not_pay_the_product_is_f_linear(monkeypatch, batch):
    """Measured slower (or too many rows, batch 8): each shape's choice is F.linear itself, asked once;
    results are bit for bit the plain ones."""
    monkeypatch.setattr(kernel_choice, "_choices", {})
    monkeypatch.setattr(kernel_choice, "faster", lambda plain, special, pairs=7: False)
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=600, d_model=256, n_heads=4, n_layers=1, d_ff=1024, max_len=16).eval()
    prompt, step = torch.randint(0, 600, (batch, 5)), torch.randint(0, 600, (batch, 1))
    with torch.no_grad():
        plain = model(step)
        with few_row_products(model):
            model(prompt)
            routed = model(step)
            product = model.blocks[0].ffn.up.product
    assert product.ways and all(way is F.linear for way in product.ways.values())
    torch.testing.assert_close(routed, plain, rtol=0, atol=0)


def test_decoding_attention_turns_cudnn_off_for_cuda_only_and_restores_it():
    """While generating on a GPU, fused attention skips cuDNN (a plan per new key length); the CPU is untouched."""
    from glassformer.runtime.decode import decoding_attention

    before = (torch.backends.cuda.cudnn_sdp_enabled(), torch.backends.cuda.flash_sdp_enabled(),
              torch.backends.cuda.mem_efficient_sdp_enabled(), torch.backends.cuda.math_sdp_enabled())
    with decoding_attention("cpu"):
        assert torch.backends.cuda.cudnn_sdp_enabled() == before[0]
    with decoding_attention(torch.device("cuda", 0)):  # sets the backend flags only: needs no GPU
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
        assert torch.backends.cuda.math_sdp_enabled()
    assert (torch.backends.cuda.cudnn_sdp_enabled(), torch.backends.cuda.flash_sdp_enabled(),
            torch.backends.cuda.mem_efficient_sdp_enabled(), torch.backends.cuda.math_sdp_enabled()) == before


def test_generation_asks_for_the_decoding_attention_of_the_models_device(monkeypatch):
    import contextlib

    import glassformer.generation.api as api

    asked = []

    def recording(device):
        asked.append(torch.device(device))
        return contextlib.nullcontext()

    monkeypatch.setattr(api, "decoding_attention", recording)
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=17, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=16)
    api.generate(model, torch.tensor([[1, 2, 3]]), 4)
    assert asked == [torch.device("cpu")]


def test_a_compiled_decoding_step_is_not_recompiled_by_the_route():
    """The bench's decode compile (and a user's): ``hidden_states`` replaced by its torch.compile'd self.
    The route's instance ``forward``s would change what the compiled code guards on at every
    generation (recompiles up to torch's limit, then eager); on such a model the route stays off."""
    import torch._dynamo

    torch._dynamo.reset()
    compiles = []

    def counting(graph, example_inputs):
        compiles.append(len(example_inputs))
        return graph.forward

    torch.manual_seed(0)
    model = TransformerLM(vocab_size=50, d_model=256, n_heads=4, n_layers=2, d_ff=1024, max_len=64).eval()
    assert model.blocks[0].ffn.up.weight.numel() >= MIN_WEIGHT  # big enough for the route
    eager = generate(model, torch.tensor([[1, 2, 3]]), 12)
    model.hidden_states = torch.compile(model.hidden_states, dynamic=True, backend=counting)
    first = generate(model, torch.tensor([[1, 2, 3]]), 12)
    after_first = len(compiles)
    for _ in range(3):
        assert torch.equal(generate(model, torch.tensor([[1, 2, 3]]), 12), first)
    assert len(compiles) == after_first  # later generations reuse the compiled graphs
    assert torch.equal(first, eager)


def test_under_autocast_each_weight_is_cast_once_per_generation_not_once_per_step():
    """Generation runs under torch.no_grad, where autocast keeps its 16-bit copies of the weights for the
    whole ``with`` block (under inference_mode it cast every weight again at every step: on a CPU 70% of
    a bfloat16 decoding step was those copies)."""
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    model = TransformerLM(vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=96, max_len=64)
    shape = (96, 32)  # the FFN's up and the fused q/k/v projection; no activation has this shape
    weights = sum(tuple(p.shape) == shape for p in model.parameters())
    assert weights == 4
    for new_tokens in (4, 12):
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof, \
                torch.autocast("cpu", torch.bfloat16):
            generate(model, torch.tensor([[1, 2, 3]]), new_tokens)
        casts = [e for e in prof.events() if e.name == "aten::_to_copy" and e.input_shapes
                 and tuple(e.input_shapes[0]) == shape]
        assert len(casts) == weights, new_tokens  # once each, however many steps


def test_generation_runs_in_inference_mode_except_under_autocast():
    """inference_mode where it is cheapest; no_grad under autocast (its weight copies survive the steps)."""
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=50, d_model=32, n_heads=4, n_layers=1, d_ff=64, max_len=32)
    seen = []
    model.blocks[0].register_forward_hook(
        lambda *_: seen.append((torch.is_inference_mode_enabled(), torch.is_grad_enabled())))
    generate(model, torch.tensor([[1, 2]]), 3)
    assert set(seen) == {(True, False)}
    seen.clear()
    with torch.autocast("cpu", torch.bfloat16):
        generate(model, torch.tensor([[1, 2]]), 3)
    assert set(seen) == {(False, False)}


def test_a_streamed_choice_is_timed_on_weights_read_from_memory(monkeypatch):
    """For a model larger than the last cache the route is timed as decoding reads the weight: each call on
    another copy, the copies together twice the cache, each way its own copies (one way must not find in the
    cache what the other has just read), and the case says so."""
    import glassformer.runtime.linear as linear_module

    weight = torch.randn(MIN_WEIGHT // 256, 256)
    monkeypatch.setattr(linear_module, "last_level_cache_bytes", lambda: 3 * weight.numel() * 4)  # 6 copies
    monkeypatch.setattr(kernel_choice, "_choices", {})
    monkeypatch.setattr(kernel_choice, "_save", lambda choices: None)
    seen = {"plain": [], "special": []}
    real_linear, real_bmm = F.linear, torch.bmm
    monkeypatch.setattr(F, "linear", lambda x, w, b=None: seen["plain"].append(w.data_ptr()) or real_linear(x, w, b))
    monkeypatch.setattr(torch, "bmm", lambda a, b: seen["special"].append(a.data_ptr()) or real_bmm(a, b))

    def faster(plain, special, pairs=7):
        for _ in range(12):
            plain(), special()
        return True

    monkeypatch.setattr(kernel_choice, "faster", faster)
    with torch.no_grad():
        assert linear_module.route_pays(torch.zeros(1, 256), weight, streamed=True) is True
    assert len(set(seen["plain"])) == 6 and len(set(seen["special"])) == 6
    assert not set(seen["plain"]) & set(seen["special"])
    assert weight.data_ptr() in seen["plain"]
    assert list(kernel_choice.choices()) == [f"linear few-row route: 1 x 256 -> {MIN_WEIGHT // 256}, streamed"]
    seen["plain"].clear()
    with torch.no_grad():  # a model that fits in the cache: timed on the weight itself, a case of its own
        linear_module.route_pays(torch.zeros(1, 256), weight)
    assert set(seen["plain"]) == {weight.data_ptr()}
    assert f"linear few-row route: 1 x 256 -> {MIN_WEIGHT // 256}" in kernel_choice.choices()


@pytest.mark.parametrize("cache_mb", [1, 1024])
def test_decoding_measures_the_route_as_the_model_reads_its_weights(monkeypatch, bmm_calls, cache_mb):
    """LeanStep and few_row_route ask for streamed choices exactly when the model's weights exceed the last
    cache; the tokens are the same either way."""
    import glassformer.runtime.linear as linear_module

    monkeypatch.setattr(linear_module, "last_level_cache_bytes", lambda: cache_mb << 20)
    monkeypatch.setattr(kernel_choice, "_save", lambda choices: None)
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=50, d_model=256, n_heads=4, n_layers=2, d_ff=1024, max_len=64).eval()
    assert linear_module.streams(model) is (cache_mb == 1)  # 2 layers of d 256: about 6 MB
    on = generate(model, torch.randint(0, 50, (1, 5)), 6)
    cases = list(kernel_choice.choices())
    assert cases and all((", streamed" in case) is (cache_mb == 1) for case in cases)  # (", huge pages" after it
    # where generation moved the weights there: glassformer.runtime.pages)
    previous = set_batched_matvec(False)
    try:
        assert torch.equal(on, generate(model, torch.randint(0, 50, (1, 5)).copy_(on[:, :5]), 6))
    finally:
        set_batched_matvec(previous)


@pytest.mark.parametrize("rows", [1, 2, FEW_ROWS])
def test_the_route_returns_rows_in_their_usual_layout(rows, bmm_calls):
    """The route's (rows, out) result is contiguous like F.linear's: a column-major one sent a batch's
    attention to the slow math kernel (the old 0.7x at 8 rows)."""
    weight, x = torch.randn(1536, 384), torch.randn(rows, 1, 384)
    with torch.no_grad():
        y = linear(x, weight)
    assert bmm_calls and y.is_contiguous() and y.stride() == F.linear(x, weight).stride()
