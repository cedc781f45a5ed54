"""Models: the lessons' usage, configs and presets, no leaks, padding, positions, transparency."""

import json

import pytest
import torch

import glassformer
from glassformer import (
    EncoderDecoder,
    ModelConfig,
    TransformerLM,
    build_model,
    check_causality,
    count_params,
    shape_trace,
)
from glassformer.models import EncoderDecoderOutput, HiddenStates, LMOutput, OutputHead
from glassformer.nn import apply_rope, rope_angles

POS = ["sinusoidal", "learned", "rope", "alibi", "none"]


def test_seed_usage_runs_unchanged():
    ids = torch.randint(0, 100, (2, 10))
    model = TransformerLM(vocab_size=100, d_model=64, n_heads=4, n_layers=2, d_ff=256, attn="causal")
    logits = model(ids)
    assert logits.shape == (2, 10, 100)
    logits2, attn = model(ids, return_attn=True)
    assert len(attn) == 2 and all(a.shape == (2, 4, 10, 10) for a in attn)
    torch.testing.assert_close(logits, logits2, atol=1e-5, rtol=0)
    assert model.hidden_states(ids).shape == (2, 10, 64)
    assert model.make_mask(10).shape == (10, 10)


def test_a_prefix_lm_mask_takes_one_length_or_one_per_row():
    """make_mask builds a mask for any batch: a (1,) prefix tensor is one row's; forward checks it per row."""
    model = TransformerLM(vocab_size=30, d_model=16, n_heads=2, n_layers=1, d_ff=32, attn="prefix")
    one = model.make_mask(5, prefix_len=torch.tensor([3]))
    assert torch.equal(one[0, 0], model.make_mask(5, prefix_len=3))
    assert one[0, 0, 0, :3].all() and not one[0, 0, 0, 3:].any() and one[0, 0, 4].all()
    with pytest.raises(glassformer.errors.GlassformerError, match=r"one length per row: shape \(2,\), got \(1,\)"):
        model(torch.zeros(2, 5, dtype=torch.long), prefix_len=torch.tensor([3]))


def test_return_attn_gives_named_results_that_unpack_as_tuples():
    ids = torch.randint(0, 30, (2, 6))
    model = TransformerLM(vocab_size=30, d_model=32, n_heads=4, n_layers=2, d_ff=64).eval()
    out = model(ids, return_attn=True)
    assert isinstance(out, LMOutput) and out.logits.shape == (2, 6, 30) and len(out.attn) == 2
    hidden = model.hidden_states(ids, return_attn=True)
    assert isinstance(hidden, HiddenStates) and hidden.hidden.shape == (2, 6, 32)
    assert isinstance(model(ids), torch.Tensor) and isinstance(model.hidden_states(ids), torch.Tensor)
    encdec = EncoderDecoder(vocab_size=30, d_model=32, n_heads=4, n_enc=1, n_dec=2, d_ff=64).eval()
    logits, attn = result = encdec(ids, ids[:, :4], return_attn=True)
    assert isinstance(result, EncoderDecoderOutput) and result.logits is logits
    assert sorted(attn) == ["cross", "enc", "self"] and len(attn["cross"]) == 2


def test_both_models_share_one_output_head():
    lm = TransformerLM(vocab_size=30, d_model=32, n_heads=4, n_layers=1, d_ff=64, tie=False, head_bias=True)
    encdec = EncoderDecoder(vocab_size=30, d_model=32, n_heads=4, n_enc=1, n_dec=1, d_ff=64, head_bias=True)
    assert isinstance(lm.head, OutputHead) and isinstance(encdec.head, OutputHead)
    assert lm.head.weight.shape == (30, 32) and encdec.head.weight is None  # tied: the embedding serves
    hidden = torch.randn(2, 3, 32)
    with torch.no_grad():
        encdec.head.bias.normal_()
    torch.testing.assert_close(lm.logits(hidden), hidden @ lm.head.weight.T + lm.head.bias)
    torch.testing.assert_close(encdec.logits(hidden), hidden @ encdec.emb.weight.T + encdec.head.bias)
    assert not hasattr(lm, "generate") and not hasattr(encdec, "fill_mask")  # see glassformer.generation


def test_seed_positional_arguments_and_config_construction_agree():
    torch.manual_seed(3)
    a = TransformerLM(50, 32, 4, 2, 64, 128, "prefix", "learned")
    torch.manual_seed(3)
    b = TransformerLM(ModelConfig(vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_len=128,
                                  attn="prefix", pos="learned"))
    assert a.config == b.config
    ids = torch.randint(0, 50, (2, 7))
    torch.testing.assert_close(a(ids, prefix_len=3), b(ids, prefix_len=3), atol=0, rtol=0)


def test_config_round_trips_through_json(tmp_path):
    for name in ModelConfig.presets():
        config = ModelConfig.preset(name)
        assert ModelConfig.from_json(config.to_json()) == config
    path = tmp_path / "config.json"
    ModelConfig.preset("llama-tiny").to_json(path)
    assert ModelConfig.from_json(path) == ModelConfig.preset("llama-tiny")
    assert json.loads(path.read_text())["pos"] == "rope"


def test_config_choices_are_the_ones_nn_implements():
    from glassformer import config
    from glassformer.nn import feedforward, norms

    x = torch.linspace(-3, 3, 7)
    assert set(feedforward.ACTIVATION_FUNCTIONS) == set(config.ACTIVATIONS)
    for name in config.ACTIVATIONS:  # each one computes
        assert torch.isfinite(feedforward.activate(name, x)).all()
    with pytest.raises(ValueError, match="activation must be one of"):  # the config refuses the rest
        config.ModelConfig(vocab_size=10, activation="tanh")
    x = torch.randn(3, 8) * 5 + 2
    for kind in config.NORMS:  # each one normalises: zero mean / unit variance, or unit root-mean-square
        y = norms.make_norm(kind, 8, 1e-5)(x)
        spread = y.pow(2).mean(-1) if kind == "rmsnorm" else y.var(-1, unbiased=False)
        torch.testing.assert_close(spread, torch.ones(3), atol=1e-3, rtol=0)
    with pytest.raises(ValueError, match="norm must be one of"):
        config.ModelConfig(vocab_size=10, norm="batchnorm")


def test_model_config_is_given_back():
    config = ModelConfig.preset("lesson2-encdec")
    model = build_model(config)
    assert isinstance(model, EncoderDecoder) and model.config == config


def test_gpt2_small_preset_has_exactly_124439808_parameters():
    with torch.device("meta"):
        model = TransformerLM(ModelConfig.preset("gpt2-small"))
    assert count_params(model) == 124_439_808


def test_vaswani_base_is_within_5_percent_of_65M():
    with torch.device("meta"):
        model = EncoderDecoder(ModelConfig.preset("vaswani-base"))
    assert abs(count_params(model) - 65e6) / 65e6 < 0.05


def test_llama_and_bert_presets_have_their_layout():
    llama = ModelConfig.preset("llama-tiny")
    layout = (llama.pos, llama.norm, llama.activation, llama.bias, llama.tie)
    assert layout == ("rope", "rmsnorm", "swiglu", False, False)
    assert llama.kv_heads < llama.n_heads
    with torch.device("meta"):
        model = TransformerLM(llama)
    assert all("bias" not in name for name, _ in model.named_parameters())
    bert = ModelConfig.preset("bert-base")
    assert bert.attn == "bidirectional" and not bert.norm_first


@pytest.mark.parametrize("attn", ["causal", "prefix", "bidirectional"])
@pytest.mark.parametrize("pos", POS)
@pytest.mark.parametrize("explicit", [False, True])
def test_no_leak_for_every_position_scheme_and_path(attn, pos, explicit):
    model = TransformerLM(vocab_size=30, d_model=32, n_heads=4, n_layers=2, d_ff=64, attn=attn, pos=pos,
                          n_kv_heads=2)
    ids = torch.randint(0, 30, (2, 9))
    pad = torch.zeros(2, 9, dtype=torch.bool)
    pad[1, 6:] = True
    prefix = torch.tensor([3, 5]) if attn == "prefix" else None
    report = check_causality(model, ids, prefix_len=prefix, pad=pad, return_attn=explicit)
    assert report.max_leak == 0.0
    assert report.max_visible_change > 1e-3  # the probe does change what may see it
    if attn != "bidirectional":
        assert report.checks > 0


@pytest.mark.parametrize("pos", ["sinusoidal", "rope", "alibi"])
def test_no_leak_in_encoder_decoder(pos):
    model = EncoderDecoder(vocab_size=30, d_model=32, n_heads=4, n_enc=2, n_dec=2, d_ff=64, pos=pos)
    src, tgt = torch.randint(0, 30, (2, 7)), torch.randint(0, 30, (2, 6))
    src_pad = torch.zeros(2, 7, dtype=torch.bool)
    src_pad[0, 4:] = True
    tgt_pad = torch.zeros(2, 6, dtype=torch.bool)
    tgt_pad[1, 4:] = True
    for explicit in (False, True):
        report = check_causality(model, tgt, src=src, src_pad=src_pad, pad=tgt_pad, return_attn=explicit)
        assert report.max_leak == 0.0 and report.checks > 0


def test_check_causality_finds_a_leak(monkeypatch):
    model = TransformerLM(vocab_size=30, d_model=32, n_heads=4, n_layers=1, d_ff=64, attn="causal")
    # sabotage the mask (everything visible, not causal): the config, and so the rule, still says causal
    monkeypatch.setattr(model, "_attention_mask", lambda *args, **kwargs: (None, False))
    report = check_causality(model, torch.randint(0, 30, (1, 6)))
    assert report.max_leak > 1e-3 and report.worst is not None


@pytest.mark.parametrize("attn", ["causal", "bidirectional", "prefix"])
@pytest.mark.parametrize("pos", POS)
def test_padding_does_not_change_real_positions(attn, pos):
    model = TransformerLM(vocab_size=30, d_model=32, n_heads=4, n_layers=2, d_ff=64, attn=attn, pos=pos).eval()
    ids = torch.randint(1, 30, (1, 6))
    padded = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    pad = torch.tensor([[False] * 6 + [True] * 3])
    kw = {"prefix_len": 2} if attn == "prefix" else {}
    with torch.no_grad():
        alone = model(ids, **kw)
        for explicit in (False, True):
            out = model(padded, pad=pad, return_attn=explicit, **kw)
            out = out[0] if explicit else out
            torch.testing.assert_close(out[:, :6], alone, atol=1e-5, rtol=0)


def test_padding_does_not_change_encoder_decoder_outputs():
    model = EncoderDecoder(vocab_size=30, d_model=32, n_heads=4, n_enc=2, n_dec=2, d_ff=64).eval()
    src, tgt = torch.randint(1, 30, (1, 5)), torch.randint(1, 30, (1, 4))
    src_p = torch.cat([src, torch.zeros(1, 2, dtype=torch.long)], 1)
    tgt_p = torch.cat([tgt, torch.zeros(1, 3, dtype=torch.long)], 1)
    sp, tp = torch.tensor([[False] * 5 + [True] * 2]), torch.tensor([[False] * 4 + [True] * 3])
    with torch.no_grad():
        torch.testing.assert_close(model(src_p, tgt_p, src_pad=sp, tgt_pad=tp)[:, :4], model(src, tgt),
                                   atol=1e-5, rtol=0)


def test_permutation_equivariance_without_positions():
    model = TransformerLM(vocab_size=30, d_model=32, n_heads=4, n_layers=2, d_ff=64, attn="bidirectional",
                          pos="none").eval()
    ids, perm = torch.randint(0, 30, (2, 8)), torch.randperm(8)
    with torch.no_grad():
        torch.testing.assert_close(model(ids[:, perm]), model(ids)[:, perm], atol=1e-5, rtol=0)
        sinus = TransformerLM(vocab_size=30, d_model=32, n_heads=4, n_layers=2, d_ff=64, attn="bidirectional").eval()
        assert (sinus(ids[:, perm]) - sinus(ids)[:, perm]).abs().max() > 1e-3


def test_rope_scores_depend_only_on_relative_offset():
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(m, n):
        cq, sq = rope_angles(torch.tensor([m]), 16)
        ck, sk = rope_angles(torch.tensor([n]), 16)
        return float((apply_rope(q, cq, sq) * apply_rope(k, ck, sk)).sum())

    assert score(5, 2) == pytest.approx(score(13, 10), abs=1e-4)
    assert score(7, 7) == pytest.approx(score(0, 0), abs=1e-4)
    assert abs(score(5, 2) - score(5, 4)) > 1e-3


def test_fused_and_explicit_paths_agree_for_every_architecture():
    ids = torch.randint(0, 30, (2, 8))
    for attn in ("causal", "bidirectional", "prefix"):
        model = TransformerLM(vocab_size=30, d_model=32, n_heads=4, n_layers=2, d_ff=64, attn=attn, pos="alibi").eval()
        kw = {"prefix_len": 3} if attn == "prefix" else {}
        with torch.no_grad():
            torch.testing.assert_close(model(ids, **kw), model(ids, return_attn=True, **kw)[0], atol=1e-5, rtol=0)
    model = EncoderDecoder(vocab_size=30, d_model=32, n_heads=4, n_enc=1, n_dec=1, d_ff=64).eval()
    with torch.no_grad():
        logits, log = model(ids, ids[:, :5], return_attn=True)
        torch.testing.assert_close(model(ids, ids[:, :5]), logits, atol=1e-5, rtol=0)
    assert [w.shape for w in log["cross"]] == [(2, 4, 5, 8)] and [w.shape for w in log["enc"]] == [(2, 4, 8, 8)]


def test_attention_weights_are_returned_only_when_asked():
    model = TransformerLM(vocab_size=30, d_model=32, n_heads=4, n_layers=2, d_ff=64)
    _, attn = model(torch.randint(0, 30, (1, 5)), return_attn=True)
    assert all(torch.allclose(a.sum(-1), torch.ones(1, 4, 5)) for a in attn)
    assert torch.equal(attn[0][0, 0].triu(1), torch.zeros(5, 5))  # causal: nothing above the diagonal


def test_shape_trace_names_every_step_in_order():
    model = TransformerLM(vocab_size=30, d_model=32, n_heads=4, n_layers=2, d_ff=64)
    trace = shape_trace(model, torch.randint(0, 30, (2, 5)))
    assert list(trace) == ["ids", "embeddings", "blocks.0", "blocks.1", "norm_f", "head", "logits"]
    assert trace["blocks.1"] == [2, 5, 32] and trace["logits"] == [2, 5, 30]
    deep = shape_trace(model, torch.randint(0, 30, (2, 5)), depth=2)
    assert deep["blocks.0.ffn"] == [2, 5, 32] and "blocks.0.self_attn" in deep


def test_swiglu_rmsnorm_gqa_model_trains_one_step():
    model = TransformerLM(ModelConfig.preset("llama-tiny", vocab_size=50, d_model=32, n_heads=4, n_kv_heads=1,
                                             n_layers=2, d_ff=48, max_len=32))
    model.double()
    ids = torch.randint(0, 50, (2, 8), generator=torch.Generator().manual_seed(0))

    def loss_fn() -> torch.Tensor:
        return torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())

    loss_fn().backward()
    params = list(model.parameters())
    # every parameter takes part: a finite, non-zero gradient (a part left out of the graph gets none)
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
    # and the gradient is the true one: the loss's slope along the unit gradient direction u,
    # measured by central differences in float64, equals g·u = |g| (to 0.1%: RMSNorm computes in
    # float32, as Llama does, which bounds how small a step can be measured)
    grads = [p.grad.clone() for p in params]
    norm = torch.sqrt(sum((g * g).sum() for g in grads))
    eps = 1e-3
    with torch.no_grad():
        for p, g in zip(params, grads, strict=True):
            p.add_(g / norm, alpha=eps)
        up = loss_fn()
        for p, g in zip(params, grads, strict=True):
            p.add_(g / norm, alpha=-2 * eps)
        down = loss_fn()
    slope = (up - down) / (2 * eps)
    torch.testing.assert_close(slope, norm, rtol=1e-3, atol=0.0)


# ---------------------------------------------------------------- bad input: one test each
def small(**kw):
    return TransformerLM(vocab_size=20, d_model=16, n_heads=2, n_layers=1, d_ff=32, **kw)


def test_token_id_out_of_range():
    with pytest.raises(ValueError, match=r"token id 20 in ids is out of range: expected 0 <= id < vocab_size=20"):
        small()(torch.tensor([[1, 20]]))
    with pytest.raises(ValueError, match="token id -1"):
        small()(torch.tensor([[-1, 2]]))


def test_non_integer_ids():
    with pytest.raises(TypeError, match="ids must be a tensor of dtype torch.long"):
        small()(torch.tensor([[1.0, 2.0]]))
    with pytest.raises(TypeError, match="ids must be a torch.Tensor"):
        small()([[1, 2]])


def test_sequence_longer_than_max_len_with_learned_positions():
    with pytest.raises(ValueError, match="longer than max_len=4"):
        small(pos="learned", max_len=4)(torch.zeros(1, 5, dtype=torch.long))


def test_prefix_without_prefix_len():
    with pytest.raises(ValueError, match="attn='prefix' needs prefix_len"):
        small(attn="prefix")(torch.zeros(1, 5, dtype=torch.long))


def test_prefix_len_out_of_range():
    expected = r"prefix_len=6 is out of range: expected 0 <= prefix_len <= sequence length 5"
    with pytest.raises(ValueError, match=expected):
        small(attn="prefix")(torch.zeros(1, 5, dtype=torch.long), prefix_len=6)
    with pytest.raises(ValueError, match="out of range"):
        small(attn="prefix")(torch.zeros(2, 5, dtype=torch.long), prefix_len=torch.tensor([1, -1]))
    with pytest.raises(ValueError, match=r"one length per row: shape \(2,\), got \(3,\)"):
        small(attn="prefix")(torch.zeros(2, 5, dtype=torch.long), prefix_len=torch.tensor([1, 2, 3]))
    with pytest.raises(TypeError, match="prefix_len must be an int or a"):
        small(attn="prefix")(torch.zeros(2, 5, dtype=torch.long), prefix_len=torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="prefix_len is only meaningful with attn='prefix'"):
        small()(torch.zeros(1, 5, dtype=torch.long), prefix_len=2)


def test_d_model_not_divisible_by_heads():
    with pytest.raises(ValueError, match="d_model=30 must be divisible by n_heads=4"):
        TransformerLM(vocab_size=10, d_model=30, n_heads=4)


def test_heads_not_divisible_by_kv_heads():
    with pytest.raises(ValueError, match="n_heads=4 must be divisible by n_kv_heads=3"):
        TransformerLM(vocab_size=10, d_model=32, n_heads=4, n_kv_heads=3)


def test_odd_width_for_sinusoidal_and_rope():
    with pytest.raises(ValueError, match="pos='sinusoidal' needs an even d_model, got d_model=27"):
        TransformerLM(vocab_size=10, d_model=27, n_heads=3)
    with pytest.raises(ValueError, match="pos='rope' needs an even head_dim"):
        TransformerLM(vocab_size=10, d_model=27, n_heads=3, pos="rope")


def test_cross_attention_without_memory():
    model = EncoderDecoder(vocab_size=10, d_model=16, n_heads=2, n_enc=1, n_dec=1, d_ff=32)
    with pytest.raises(ValueError, match="pass the encoder output as memory"):
        model.decode(torch.zeros(1, 3, dtype=torch.long), None)


def test_mask_shape_that_does_not_broadcast():
    with pytest.raises(ValueError, match=r"pad must have shape \(B, T\) = \(1, 5\), got \(1, 4\)"):
        small()(torch.zeros(1, 5, dtype=torch.long), pad=torch.zeros(1, 4, dtype=torch.bool))


def test_unknown_and_impossible_config_values():
    with pytest.raises(ValueError, match=r"unknown config key\(s\) \['widht'\]"):
        ModelConfig.from_dict({"vocab_size": 10, "widht": 3})
    with pytest.raises(ValueError, match=r"pos must be one of"):
        ModelConfig(vocab_size=10, pos="relative")
    with pytest.raises(TypeError, match="d_model must be an int, got '64'"):
        ModelConfig(vocab_size=10, d_model="64")
    with pytest.raises(ValueError, match="attn='bidirectional' does not apply to arch='encoder-decoder'"):
        ModelConfig(vocab_size=10, arch="encoder-decoder", attn="bidirectional")
    with pytest.raises(ValueError, match=r"preset must be one of \[.*\], got 'gpt5'"):
        ModelConfig.preset("gpt5")
    with pytest.raises(TypeError, match="not both"):
        TransformerLM(ModelConfig(vocab_size=10), d_model=32)


def test_default_init_starts_near_uniform_loss_for_every_embedding_choice():
    """Tied output + unscaled embeddings once started at loss ~18 (logits √d too large)."""
    ids = torch.randint(0, 65, (4, 32))
    for scale in (True, False):
        for tie in (True, False):
            torch.manual_seed(0)
            model = TransformerLM(vocab_size=65, d_model=128, n_heads=4, n_layers=2, d_ff=256,
                                  scale_embeddings=scale, tie=tie)
            loss = torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
            assert loss < 2 * torch.log(torch.tensor(65.0)), (scale, tie, float(loss))


# ------------------------------------------------------------------------------------------ a core read in one sitting
def test_from_forward_to_the_softmax_is_five_functions_in_three_files(monkeypatch):
    """The call stack at the softmax (return_attn=True) holds at most 5 functions of nn/ and models/,
    in at most 3 files; without return_attn the fused kernel runs and the softmax is never called."""
    import inspect
    from pathlib import Path

    core = [str(Path(glassformer.__file__).parent / room) for room in ("nn", "models")]
    stacks, real = [], torch.softmax

    def softmax(*args, **kwargs):
        stacks.append([(f.filename, f.function) for f in inspect.stack() if f.filename.startswith(tuple(core))])
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "softmax", softmax)
    model = TransformerLM(vocab_size=30, n_layers=1).eval()
    ids = torch.randint(0, 30, (1, 6))
    model(ids)
    assert stacks == []  # the fused kernel: no explicit softmax
    model(ids, return_attn=True)
    (stack,) = stacks
    assert [name for _, name in stack][::-1] == ["forward", "hidden_states", "forward", "forward",
                                                 "scaled_dot_product_attention"]
    assert len({file for file, _ in stack}) == 3


def test_the_core_holds_the_math_alone():
    """nn/ and models/ stay short (at most 1,750 lines: 1,600 until TransformerLens's per-head hooks and the
    preallocated KV cache came in) and hold no speed policy: no timing, no CPU detection, no cache files,
    no runtime/ imports."""
    from pathlib import Path

    root = Path(glassformer.__file__).parent
    files = [p for room in ("nn", "models") for p in (root / room).glob("*.py")]
    assert sum(len(p.read_text(encoding="utf-8").splitlines()) for p in files) <= 1750
    for path in files:
        text = path.read_text(encoding="utf-8")
        for policy in ("/proc/cpuinfo", "perf_counter", "kernel_choice", "runtime", "json.dump"):
            assert policy not in text, f"{path.name} mentions {policy}"
