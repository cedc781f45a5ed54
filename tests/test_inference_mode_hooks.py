"""Hooks on the norms work under torch.inference_mode (inference tensors have no version counter)."""

import torch

from glassformer import TransformerLM
from glassformer.interpret import run_with_cache, run_with_hooks


def test_run_with_cache_under_inference_mode_equals_no_grad():
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=40, d_model=16, n_heads=2, n_layers=2, d_ff=32, attn="causal").eval()
    for norm in (m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)):
        torch.nn.init.normal_(norm.weight, 1.0, 0.5)
        torch.nn.init.normal_(norm.bias, 0.0, 0.5)
    ids = torch.randint(0, 40, (2, 7))
    with torch.no_grad():
        logits, cache = run_with_cache(model, ids)
    with torch.inference_mode():
        logits_inf, cache_inf = run_with_cache(model, ids)
    torch.testing.assert_close(logits_inf, logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cache_inf["blocks.1.ln1.hook_normalized"], cache["blocks.1.ln1.hook_normalized"])


def test_an_edit_of_hook_normalized_under_inference_mode_is_carried_through():
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=40, d_model=16, n_heads=2, n_layers=1, d_ff=32, attn="causal").eval()
    ids = torch.randint(0, 40, (1, 5))

    def zero(t, hook=None):
        return torch.zeros_like(t)

    with torch.no_grad():
        edited = run_with_hooks(model, ids, hooks=[("ln_final.hook_normalized", zero)])
    with torch.inference_mode():
        edited_inf = run_with_hooks(model, ids, hooks=[("ln_final.hook_normalized", zero)])
        plain = model(ids)
    torch.testing.assert_close(edited_inf, edited)
    assert not torch.allclose(edited_inf, plain)
