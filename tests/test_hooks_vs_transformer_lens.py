"""glassformer's hook points against TransformerLens itself, on the same random GPT-2.

A GPT-2 with random weights is written by ``transformers``' ``save_pretrained``; glassformer reads the
folder with ``load_hf_dir`` and TransformerLens boots it with ``TransformerBridge.boot_transformers``.
Every hook name both expose must hold the same tensor (within 1e-5), and an intervention written with
TransformerLens's hooks must give the logits glassformer's gives. ``transformer-lens`` is in the dev
extra, so ``make test`` runs this.
"""

from __future__ import annotations

import pytest
import torch

from glassformer.interop import load_hf_dir
from glassformer.interpret import ablate_heads, head_scores, hook_points, repeated_tokens, run_with_cache

transformer_lens = pytest.importorskip("transformer_lens", reason="transformer-lens is not installed (pip install "
                                                                  "'glassformer[dev]')")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(glassformer model, TransformerBridge) of one random GPT-2 folder."""
    from transformer_lens.model_bridge import TransformerBridge

    folder = tmp_path_factory.mktemp("gpt2-random")
    config = transformers.GPT2Config(vocab_size=97, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                     bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(config).eval().save_pretrained(folder)
    ours, _ = load_hf_dir(folder)
    theirs = TransformerBridge.boot_transformers(str(folder), device="cpu")
    theirs.eval()
    return ours, theirs


def test_every_shared_hook_holds_the_same_tensor(pair):
    ours, theirs = pair
    ids = torch.randint(0, 97, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        our_logits, our_cache = run_with_cache(ours, ids)
        their_logits, their_cache = theirs.run_with_cache(ids)
    shared = [name for name in hook_points(ours) if name in their_cache]
    assert len(shared) == len(hook_points(ours)) == 33  # every glassformer point of GPT-2 exists in TransformerLens
    torch.testing.assert_close(our_logits, their_logits, rtol=0, atol=1e-5)
    for name in shared:
        mine, reference = our_cache[name], their_cache[name]
        mine = mine.expand_as(reference)  # hook_pos_embed: (1, T, d), shared by the rows
        if name.endswith("hook_attn_scores"):  # masked: -inf here, the dtype's minimum there
            hidden = torch.isinf(mine)
            assert torch.equal(hidden, reference < -1e30), name
            mine, reference = mine[~hidden], reference[~hidden]
        torch.testing.assert_close(mine, reference, rtol=0, atol=1e-5, msg=name)


def test_an_intervention_gives_the_same_logits(pair):
    ours, theirs = pair
    ids = torch.randint(0, 97, (2, 10), generator=torch.Generator().manual_seed(1))

    def zero_head(z, hook):
        z[:, :, 2] = 0.0
        return z

    with torch.no_grad():
        theirs_ablated = theirs.run_with_hooks(ids, fwd_hooks=[("blocks.1.attn.hook_z", zero_head)])
        ours_ablated = ablate_heads(ours, ids, heads=[(1, 2)])
    torch.testing.assert_close(ours_ablated, theirs_ablated, rtol=0, atol=1e-5)


def test_head_scores_read_the_same_patterns(pair):
    ours, theirs = pair
    scores = head_scores(ours, length=6, batch=2, seed=3)
    ids = repeated_tokens(97, 6, 2, seed=3)
    with torch.no_grad():
        _, cache = theirs.run_with_cache(ids)
    for layer in range(2):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"]
        queries = torch.arange(6, 12)
        expected = pattern[:, :, queries, queries - 5].mean((0, 2))
        torch.testing.assert_close(scores.induction[layer], expected, rtol=0, atol=1e-5)
