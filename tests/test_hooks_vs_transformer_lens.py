"""glassformer's hook points against TransformerLens itself, on trained-looking weights.

Three random models are written by ``transformers``' ``save_pretrained`` — GPT-2, a Llama (RMSNorm,
RoPE, grouped-query attention, SwiGLU) and BERT — each with random norm gains and biases and non-zero
biases everywhere (a fresh model's norms are the identity, which hides where a hook sits relative to
the gain). glassformer reads each folder with ``load_hf_dir``; TransformerLens boots it with
``TransformerBridge.boot_transformers``. Every hook name both expose must hold the same tensor within
1e-5, except the BERT hooks listed in ``BERT_DIFFERENT`` (docs/interpret.md says why), and an
intervention written with TransformerLens's hooks must give the logits glassformer's gives.
``transformer-lens`` is in the dev extra, so ``make test`` runs this.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from glassformer.interop import load_hf_dir
from glassformer.interpret import ablate_heads, head_scores, hook_points, repeated_tokens, run_with_cache

transformer_lens = pytest.importorskip("transformer_lens", reason="transformer-lens is not installed (pip install "
                                                                  "'glassformer[dev]')")
transformers = pytest.importorskip("transformers")

V = 97
# BERT hooks whose meaning differs in TransformerLens's bridge (see docs/interpret.md, "Equal to TransformerLens"):
# its hook_embed is the embedding norm's output, its hook_attn_out the attention block's output after the
# residual and ln1, its hook_resid_mid ln2's input, its ln_final the MLM head's norm; its attention scores
# differ from the usual q·k/√d by a constant per query row (the pattern is equal).
BERT_DIFFERENT = {"hook_embed", "ln_final.hook_out"} | {
    f"blocks.{i}.{name}" for i in range(2) for name in ("hook_attn_out", "hook_resid_mid", "attn.hook_attn_scores")}
# Points TransformerLens has only behind its flags (use_attn_result, use_split_qkv_input, use_attn_in,
# use_hook_mlp_in); tests/test_tl_parity.py compares them with the flags on.
BEHIND_FLAGS = ("attn.hook_result", "hook_attn_in", "hook_q_input", "hook_k_input", "hook_v_input", "hook_mlp_in")


def _hf_model(arch: str):
    """A random transformers model of ``arch`` with non-trivial norms and biases."""
    if arch == "gpt2":
        config = transformers.GPT2Config(vocab_size=V, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                         bos_token_id=None, eos_token_id=None)
        model = transformers.GPT2LMHeadModel(config)
    elif arch == "llama":
        config = transformers.LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                          bos_token_id=None, eos_token_id=None, pad_token_id=None)
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.BertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=64, max_position_embeddings=64)
        model = transformers.BertForMaskedLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name.lower() or ".ln_" in name or name.startswith("transformer.ln_f"):
                p.normal_(1.0, 0.5) if name.endswith("weight") else p.normal_(0.0, 0.5)  # gains not 1, biases not 0
            elif name.endswith("bias"):
                p.normal_(0.0, 0.1)
    return model.eval()


def _tokenizer():
    """A word-level tokenizer of V tokens (TransformerLens needs one to boot a Llama folder)."""
    from tokenizers import Tokenizer, models

    table = Tokenizer(models.WordLevel({f"t{i}": i for i in range(V)}, unk_token="t0"))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=table, unk_token="t0")


def _pair(arch: str, folder):
    """(glassformer model, TransformerBridge) of one random folder of ``arch``."""
    from transformer_lens.model_bridge import TransformerBridge

    torch.manual_seed(0)
    _hf_model(arch).save_pretrained(folder)
    ours, _ = load_hf_dir(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = TransformerBridge.boot_transformers(str(folder), device="cpu", tokenizer=_tokenizer())
    return ours.eval(), theirs.eval()


@pytest.fixture(scope="module", params=["gpt2", "llama", "bert"])
def pair(request, tmp_path_factory):
    return request.param, *_pair(request.param, tmp_path_factory.mktemp(request.param))


def _ids(seed: int) -> torch.Tensor:
    return torch.randint(0, V, (2, 10), generator=torch.Generator().manual_seed(seed))


def test_every_shared_hook_holds_the_same_tensor(pair):
    arch, ours, theirs = pair
    ids = _ids(0)
    with torch.no_grad():
        our_logits, our_cache = run_with_cache(ours, ids)
        their_logits, their_cache = theirs.run_with_cache(ids)
    torch.testing.assert_close(our_logits, their_logits, rtol=0, atol=1e-5)
    points = hook_points(ours)
    only_ours = sorted(name for name in points if name not in their_cache)
    flagged = sorted(f"blocks.{i}.{name}" for i in range(2) for name in BEHIND_FLAGS  # tests/test_tl_parity.py
                     if not (arch == "bert" and name == "hook_mlp_in"))  # BERT's bridge always has hook_mlp_in
    assert only_ours == sorted((["hook_token_type_embed"] if arch == "bert" else []) + flagged)
    different = BERT_DIFFERENT if arch == "bert" else set()
    compared = [name for name in points if name in their_cache and name not in different]
    assert len(compared) == {"gpt2": 43, "llama": 48, "bert": 38}[arch]
    for name in compared:
        mine, reference = our_cache[name], their_cache[name]
        assert mine.shape == reference.shape, name
        if name.endswith("hook_attn_scores"):  # masked: -inf here, the dtype's minimum there
            hidden = torch.isinf(mine)
            assert torch.equal(hidden, reference < -1e30), name
            mine, reference = mine[~hidden], reference[~hidden]
        torch.testing.assert_close(mine, reference, rtol=0, atol=1e-5, msg=name)
    for name in different:  # documented differences stay differences (a fix upstream should update the docs)
        assert not torch.allclose(our_cache[name], their_cache[name], atol=1e-5), name


def test_norm_hooks_are_before_the_gain(pair):
    arch, ours, _ = pair
    with torch.no_grad():
        _, cache = run_with_cache(ours, _ids(2), names=["ln1", "ln1_scale", "ln1_out", "resid_pre", "resid_mid"])
    norm = ours.blocks[0].attn_norm
    normalized, out = cache["blocks.0.ln1.hook_normalized"], cache["blocks.0.ln1.hook_out"]
    affine = normalized * norm.weight + (norm.bias if getattr(norm, "bias", None) is not None else 0.0)
    torch.testing.assert_close(affine, out, rtol=0, atol=1e-5)
    assert cache["blocks.0.ln1.hook_scale"].shape == (2, 10, 1)
    assert (normalized - out).abs().max() > 0.1  # the gains are not 1: the two points differ


def test_an_intervention_gives_the_same_logits(pair):
    arch, ours, theirs = pair
    ids = _ids(1)

    def zero_head(z, hook):
        z[:, :, 2] = 0.0
        return z

    with torch.no_grad():
        theirs_ablated = theirs.run_with_hooks(ids, fwd_hooks=[("blocks.1.attn.hook_z", zero_head)])
        ours_ablated = ablate_heads(ours, ids, heads=[(1, 2)])
    torch.testing.assert_close(ours_ablated, theirs_ablated, rtol=0, atol=1e-5)


def test_editing_normalized_and_pos_embed_gives_the_same_logits(pair):
    arch, ours, theirs = pair
    ids = _ids(3)

    def halve(x, hook):
        return x * 0.5

    def shift_second_row(x, hook):  # one row only: the hook sees (B, T, d)
        x = x.clone()
        x[1] += 0.3
        return x

    edits = [("blocks.0.ln1.hook_normalized", halve), ("ln_final.hook_normalized", halve)]
    if arch == "gpt2":
        edits.append(("hook_pos_embed", shift_second_row))
    if arch == "bert":  # its ln_final is the MLM head's norm there (see BERT_DIFFERENT)
        edits = [("blocks.0.ln1.hook_normalized", halve), ("embed_ln.hook_normalized", halve)]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TransformerLens warns that an edited norm hook leaves HF's kernel
        theirs_edited = theirs.run_with_hooks(ids, fwd_hooks=edits)
    from glassformer.interpret import run_with_hooks

    with torch.no_grad():
        ours_edited = run_with_hooks(ours, ids, hooks=edits)
        plain = ours(ids)
    torch.testing.assert_close(ours_edited, theirs_edited, rtol=0, atol=1e-5)
    assert (ours_edited - plain).abs().max() > 1e-2  # the edits changed something


def test_head_scores_read_the_same_patterns(pair):
    arch, ours, theirs = pair
    if arch == "bert":
        pytest.skip("head scores read causal models")
    scores = head_scores(ours, length=6, batch=2, seed=3)
    ids = repeated_tokens(V, 6, 2, seed=3)
    with torch.no_grad():
        _, cache = theirs.run_with_cache(ids)
    for layer in range(2):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"]
        queries = torch.arange(6, 12)
        expected = pattern[:, :, queries, queries - 5].mean((0, 2))
        torch.testing.assert_close(scores.induction[layer], expected, rtol=0, atol=1e-5)
