"""TransformerLens's per-head hooks, backward hooks, cache algebra and weight-space circuits against
TransformerLens 4.x itself, on the random GPT-2 (random norm gains) and Llama (RMSNorm, RoPE, GQA,
SwiGLU) folders of tests/test_hooks_vs_transformer_lens.py. TransformerLens runs in compatibility mode
without weight processing (``enable_compatibility_mode(no_processing=True)``: glassformer keeps the
model's own weights), with its flags on for the hooks it only has behind them.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from glassformer.interpret import hooks, run_with_cache, run_with_hooks

pytest.importorskip("transformer_lens", reason="transformer-lens is not installed (pip install 'glassformer[dev]')")
from test_hooks_vs_transformer_lens import _ids, _pair  # noqa: E402  (the same random folders)

ATOL = 1e-5


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def pair(request, tmp_path_factory):
    ours, theirs = _pair(request.param, tmp_path_factory.mktemp(request.param))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs.enable_compatibility_mode(no_processing=True, disable_warnings=True)
    return request.param, ours, theirs


def _flags(bridge, *, result=False, split=False, attn_in=False, mlp_in=False):
    """TransformerLens's hook flags (split q/k/v inputs and attn_in exclude each other there)."""
    bridge.set_use_split_qkv_input(False)
    bridge.set_use_attn_in(False)
    bridge.set_use_attn_result(result)
    bridge.set_use_split_qkv_input(split)
    bridge.set_use_attn_in(attn_in)
    bridge.set_use_hook_mlp_in(mlp_in)


def _close(mine, reference, name=""):
    assert mine.shape == reference.shape, name
    torch.testing.assert_close(mine, reference.to(mine.dtype), rtol=0, atol=ATOL, msg=name)


PER_HEAD = ["result", "q_input", "k_input", "v_input", "mlp_in"]


def test_per_head_hooks_hold_the_same_tensors(pair):
    _, ours, theirs = pair
    ids = _ids(0)
    _flags(theirs, result=True, split=True, mlp_in=True)
    with torch.no_grad():
        _, their_cache = theirs.run_with_cache(ids)
        logits, cache = run_with_cache(ours, ids, names=PER_HEAD)
        plain = ours(ids)
    torch.testing.assert_close(logits, plain, rtol=0, atol=ATOL)  # hooked per head, the same forward
    assert len(cache) == 10
    for name in cache:
        _close(cache[name], their_cache[name], name)
    _flags(theirs, attn_in=True)
    with torch.no_grad():
        _, their_cache = theirs.run_with_cache(ids)
        _, cache = run_with_cache(ours, ids, names="attn_in")
    for layer in range(2):
        name = f"blocks.{layer}.hook_attn_in"
        _close(cache[name], their_cache[name], name)


def _edit_head(index):
    """A hook adding a fixed vector to one head's slice (a per-head edit: not scale-invariant)."""
    def edit(x, hook):
        x = x.clone()
        x[:, :, index] += 5.0 * torch.linspace(-1.0, 1.0, x.shape[-1]) ** 3
        return x
    return edit


@pytest.mark.parametrize("name, flags", [
    ("blocks.1.attn.hook_result", dict(result=True)),
    ("blocks.0.hook_q_input", dict(split=True)),
    ("blocks.0.hook_k_input", dict(split=True)),
    ("blocks.1.hook_v_input", dict(split=True)),
    ("blocks.0.hook_attn_in", dict(attn_in=True)),
])
def test_editing_one_head_gives_the_same_logits(pair, name, flags):
    _, ours, theirs = pair
    ids = _ids(1)
    _flags(theirs, **flags)
    hook = [(name, _edit_head(1))]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = theirs.run_with_hooks(ids, fwd_hooks=hook)
        edited = run_with_hooks(ours, ids, fwd_hooks=hook)
        plain = ours(ids)
    torch.testing.assert_close(edited, reference, rtol=0, atol=ATOL)
    assert (edited - plain).abs().max() > 1e-4  # the edit changed something


def test_editing_mlp_in_leaves_the_residual_alone(pair):
    _, ours, theirs = pair
    ids = _ids(2)
    _flags(theirs, mlp_in=True)

    def shift(x, hook):
        return x + 0.5

    def shift_in_place(x, hook):  # edits the copy the MLP reads, not the stream (TransformerLens's Llama
        x += 0.5                  # bridge lets this one reach the stream: docs/interpret.md)
        return x

    with torch.no_grad():
        reference = theirs.run_with_hooks(ids, fwd_hooks=[("blocks.0.hook_mlp_in", shift)])
        edited = run_with_hooks(ours, ids, fwd_hooks=[("blocks.0.hook_mlp_in", shift)])
        in_place = run_with_hooks(ours, ids, fwd_hooks=[("blocks.0.hook_mlp_in", shift_in_place)])
        with hooks(ours, [("blocks.0.hook_mlp_in", shift_in_place)]):
            with_mid = run_with_cache(ours, ids, names="blocks.0.hook_resid_mid")[1]
        plain = run_with_cache(ours, ids, names="blocks.0.hook_resid_mid")[1]
    torch.testing.assert_close(edited, reference, rtol=0, atol=ATOL)
    torch.testing.assert_close(in_place, edited, rtol=0, atol=0)
    torch.testing.assert_close(with_mid["blocks.0.hook_resid_mid"], plain["blocks.0.hook_resid_mid"], rtol=0, atol=0)


def _loss(ids):
    """The next-token loss, TransformerLens's ``return_type="loss"``, as a metric of the logits."""
    def metric(logits):
        return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    return metric


@pytest.mark.filterwarnings("ignore::UserWarning")  # TransformerLens: its norms leave their fused path
def test_backward_cache_holds_the_same_gradients(pair):
    _, ours, theirs = pair
    ids = _ids(3)
    _flags(theirs)
    their_loss, their_cache = theirs.run_with_cache(ids, incl_bwd=True, return_type="loss")
    theirs.zero_grad(set_to_none=True)
    logits, cache = run_with_cache(ours, ids, incl_bwd=True, metric=_loss(ids))
    ours.zero_grad(set_to_none=True)
    torch.testing.assert_close(_loss(ids)(logits), their_loss, rtol=0, atol=ATOL)
    grads = [name for name in cache if name.endswith("_grad")]
    assert len(grads) == len([name for name in cache if not name.endswith("_grad")])  # norms' scale too
    compared = 0
    for name in grads:
        if "resid_mid" in name:  # TransformerLens's bridge hooks the MLP branch's input there (docs/interpret.md):
            mlp_branch, residual = their_cache[name], their_cache[name.replace("mid", "post")]
            _close(cache[name], mlp_branch + residual, name)  # ours is d loss / d resid_mid, both paths
            _close(cache[name.replace("resid_mid", "mlp_in")], mlp_branch, name)
        elif name in their_cache:
            _close(cache[name], their_cache[name], name)
        compared += 1
    assert compared >= 30


def test_backward_hooks_change_the_same_gradients(pair):
    _, ours, theirs = pair
    ids = _ids(4)
    _flags(theirs, result=True)

    def drop_head_1(grad, hook):  # the gradient through one head's write, removed
        grad = grad.clone()
        grad[:, :, 1] = 0.0
        return grad

    bwd = [("blocks.1.attn.hook_result", drop_head_1)]
    theirs.zero_grad(set_to_none=True)
    loss = theirs.run_with_hooks(ids, return_type="loss", bwd_hooks=bwd, reset_hooks_end=False)
    loss.backward()
    theirs.reset_hooks()
    reference = theirs.W_E.grad.clone()
    theirs.zero_grad(set_to_none=True)
    ours.zero_grad(set_to_none=True)
    run_with_hooks(ours, ids, bwd_hooks=bwd, metric=_loss(ids))
    hooked = ours.emb.weight.grad.clone()
    ours.zero_grad(set_to_none=True)
    _loss(ids)(ours(ids)).backward()
    plain = ours.emb.weight.grad.clone()
    ours.zero_grad(set_to_none=True)
    _close(hooked, reference, "W_E.grad")
    assert (hooked - plain).abs().max() > 1e-6  # the hook changed the gradient


@pytest.fixture(scope="module")
def caches(pair):
    """(arch, glassformer cache, TransformerLens cache) of one forward on the same ids."""
    arch, ours, theirs = pair
    _flags(theirs)
    ids = _ids(5)
    with torch.no_grad():
        _, their_cache = theirs.run_with_cache(ids)
        _, cache = run_with_cache(ours, ids)
    return arch, cache, their_cache


def _same(mine, reference):
    """Equal results, labels included when both return them."""
    if isinstance(reference, tuple):
        assert mine[1] == reference[1]
        mine, reference = mine[0], reference[0]
    _close(mine, reference)


@pytest.mark.parametrize("kw", [{}, dict(incl_mid=True, return_labels=True), dict(layer=1, mlp_input=True),
                                dict(apply_ln=True, return_labels=True), dict(layer=1, apply_ln=True, pos_slice=-1),
                                dict(layer=2, incl_mid=True, apply_ln=True, pos_slice=(2, 7)),
                                dict(layer=1, mlp_input=True, apply_ln=True, pos_slice=[0, 3, 9])])
def test_accumulated_resid(caches, kw):
    _, cache, theirs = caches
    _same(cache.accumulated_resid(**kw), theirs.accumulated_resid(**kw))


@pytest.mark.parametrize("kw", [dict(return_labels=True), dict(layer=1, mode="attn", return_labels=True),
                                dict(layer=1, mlp_input=True, apply_ln=True), dict(mode="mlp", apply_ln=True),
                                dict(incl_embeds=False, pos_slice=(1, 5), apply_ln=True, return_labels=True),
                                dict(layer=0, pos_slice=3)])
def test_decompose_resid(caches, kw):
    _, cache, theirs = caches
    _same(cache.decompose_resid(**kw), theirs.decompose_resid(**kw))


def test_decomposition_sums_to_the_stream(caches):
    _, cache, _ = caches
    torch.testing.assert_close(cache.decompose_resid().sum(0), cache["resid_post", 1], rtol=0, atol=ATOL)
    heads = cache.stack_head_results(layer=1, incl_remainder=True)
    torch.testing.assert_close(heads.sum(0), cache["resid_post", 0], rtol=0, atol=ATOL)


@pytest.mark.parametrize("kw", [dict(return_labels=True), dict(layer=1, incl_remainder=True, return_labels=True),
                                dict(apply_ln=True, pos_slice=-1), dict(layer=0), dict(layer=1, apply_ln=True)])
def test_stack_head_results(caches, kw):
    _, cache, theirs = caches
    _same(cache.stack_head_results(**kw), theirs.stack_head_results(**kw))


def test_compute_head_results(pair):
    _, ours, theirs = pair
    _flags(theirs)
    with torch.no_grad():
        _, their_cache = theirs.run_with_cache(_ids(6))
        _, cache = run_with_cache(ours, _ids(6), names="z")
    their_cache.compute_head_results()
    cache.compute_head_results()
    assert sorted(cache) == ["blocks.0.attn.hook_result", "blocks.0.attn.hook_z", "blocks.1.attn.hook_result",
                             "blocks.1.attn.hook_z"]
    for name in ("blocks.0.attn.hook_result", "blocks.1.attn.hook_result"):
        _close(cache[name], their_cache[name], name)


@pytest.mark.parametrize("kw", [{}, dict(layer=1), dict(layer=1, mlp_input=True), dict(pos_slice=(0, 4)),
                                dict(batch_slice=1), dict(layer=0, batch_slice=[1], pos_slice=[2, 3])])
def test_apply_ln_to_stack(caches, kw):
    _, cache, theirs = caches
    stack = cache.decompose_resid(layer=kw.get("layer", -1), pos_slice=kw.get("pos_slice"))
    _close(cache.apply_ln_to_stack(stack, **kw), theirs.apply_ln_to_stack(stack, **kw))


def test_stack_activation(caches):
    _, cache, theirs = caches
    for name, layer in [("pattern", -1), ("resid_post", 1), ("z", None), ("mlp_in", -1)]:
        if name == "mlp_in":
            assert cache.stack_activation(name).shape == (2, 2, 10, 32)
            continue
        _close(cache.stack_activation(name, layer), theirs.stack_activation(name, layer))
    _close(cache.stack_activation("z", sublayer_type="attn"), theirs.stack_activation("z", sublayer_type="attn"))


def test_logit_attrs(caches):
    _, cache, theirs = caches
    ids = _ids(5)
    heads = cache.stack_head_results(pos_slice=-1)
    parts = cache.decompose_resid()
    for stack, kw in [(heads, dict(tokens=ids[:, -1], pos_slice=-1)),
                      (heads, dict(tokens=ids[:, -1], incorrect_tokens=ids[:, 0], pos_slice=-1)),
                      (parts, dict(tokens=ids)), (parts, dict(tokens=7)),
                      (parts[:, :1], dict(tokens=ids[0], batch_slice=[0]))]:
        _close(cache.logit_attrs(stack, **kw), theirs.logit_attrs(stack, **kw))


def test_cache_algebra_refuses_bad_arguments(caches):
    _, cache, _ = caches
    from glassformer.errors import GlassformerError

    with pytest.raises(GlassformerError, match="layer"):
        cache.accumulated_resid(layer=5)
    with pytest.raises(GlassformerError, match="mode must be one of"):
        cache.decompose_resid(mode="heads")
    with pytest.raises(GlassformerError, match="pos_slice"):
        cache.accumulated_resid(pos_slice="last")
    with pytest.raises(GlassformerError, match=r"tokens must be ids in \[0, 97\)"):
        cache.logit_attrs(cache.decompose_resid(), tokens=97)


WEIGHTS = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "W_in", "W_gate", "W_out", "b_in", "b_out",
           "W_E", "W_pos", "W_U", "b_U")


def _their_weight(bridge, name):
    """TransformerLens's stacked weight, or None where it has none (a bias-free model's biases: ours are zeros)."""
    try:
        return getattr(bridge, name)
    except AttributeError:
        return None


def _compare_weights(mine, bridge):
    compared = 0
    for name in WEIGHTS:
        reference, ours = _their_weight(bridge, name), getattr(mine, name)
        if reference is None:
            assert ours is None or not ours.any(), name  # absent there: absent or zeros here
            continue
        _close(ours, reference.detach(), name)
        compared += 1
    return compared


def test_weight_views_are_transformer_lens_weights(pair):
    arch, ours, theirs = pair
    from glassformer.interpret.weights import weights

    mine = weights(ours)
    assert _compare_weights(mine, theirs) == {"gpt2": 16, "llama": 10}[arch]
    assert mine.W_Q.shape == (2, 4, 32, 8) and mine.W_O.shape == (2, 4, 8, 32)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_folded_weights_are_transformer_lens_fold_ln(arch, tmp_path):
    from glassformer.interpret.weights import weights

    ours, theirs = _pair(arch, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs.enable_compatibility_mode(fold_ln=True, center_writing_weights=False, center_unembed=False,
                                         fold_value_biases=False, disable_warnings=True)
    mine = weights(ours, fold_ln=True)
    assert _compare_weights(mine, theirs) >= 8
    assert (mine.W_Q - weights(ours).W_Q).abs().max() > 1e-2  # the gains are not 1: folding changed them


def test_circuits_and_composition_scores(pair):
    _, ours, theirs = pair
    from glassformer.interpret.weights import weights

    mine = weights(ours)
    for name in ("QK", "OV"):
        circuit, reference = getattr(mine, name), getattr(theirs, name)
        assert circuit.shape == reference.shape == (2, 4, 32, 32)
        _close(circuit.AB, reference.AB.detach(), name)
        _close(circuit.BA, reference.BA.detach(), name)
        _close(circuit.T.AB, reference.T.AB.detach(), name)
        _close(circuit.S, reference.S.detach(), name)
        _close(circuit.norm(), reference.norm().detach(), name)
        U, S, V = circuit.svd()
        _close(U @ torch.diag_embed(S) @ V.transpose(-2, -1), circuit.AB, name)  # M = U diag(S) Vᵀ
        ours_eig, their_eig = circuit.eigenvalues, reference.eigenvalues.detach()
        key = lambda e: e.real * 1e3 + e.imag  # noqa: E731  (the same multiset, in whatever order)
        _close(torch.sort(key(ours_eig)).values, torch.sort(key(their_eig)).values, name)
        _close(circuit[1, 2].AB, circuit.AB[1, 2], name)
        vector = torch.linspace(-1, 1, 32)
        _close(circuit @ vector, circuit.AB @ vector, name)
        _close(vector @ circuit, vector @ circuit.AB, name)
        _close((circuit @ mine.OV[0, 0]).AB, circuit.AB @ mine.OV[0, 0].AB, name)
        _close((2.0 * circuit).AB, 2.0 * circuit.AB, name)
    for mode in "QKV":
        scores, reference = mine.all_composition_scores(mode), theirs.all_composition_scores(mode)
        assert scores.shape == (2, 4, 2, 4)
        _close(scores, reference.scores.detach(), mode)
        assert (scores[1, :, 0] == 0).all() and (scores[0, :, 1] > 0).all()  # earlier -> later only


def test_weights_refuse_bad_input():
    from glassformer import TransformerLM
    from glassformer.errors import GlassformerError
    from glassformer.interpret.weights import FactoredMatrix, weights

    with pytest.raises(GlassformerError, match="TransformerLM"):
        weights(torch.nn.Linear(2, 2))
    model = TransformerLM(vocab_size=11, d_model=16, n_heads=2, n_layers=2, d_ff=32)
    with pytest.raises(GlassformerError, match="mode must be one of"):
        weights(model).all_composition_scores("O")
    with pytest.raises(GlassformerError, match="inner size"):
        FactoredMatrix(torch.ones(3, 2), torch.ones(3, 4))
    with pytest.raises(GlassformerError, match="square"):
        _ = FactoredMatrix(torch.ones(3, 2), torch.ones(2, 4)).BA
    post_norm = TransformerLM(vocab_size=11, d_model=16, n_heads=2, n_layers=1, d_ff=32, norm_first=False)
    with pytest.raises(GlassformerError, match="pre-norm"):
        weights(post_norm, fold_ln=True)
