"""See why, not only what: hooks, caches, patching, ablation, lenses and head detectors on every
glassformer model, with TransformerLens's hook names (docs/interpret.md).

    logits, cache = run_with_cache(model, ids)                      # every hook point, or names=...
    cache["blocks.0.attn.hook_pattern"], cache["resid_post", 1]
    logits = run_with_hooks(model, ids, hooks=[("blocks.1.attn.hook_z", fn)])
    with hooks(model, [("pattern", fn)]): generate(model, ids, 8)   # fires at every cached step
    logits = ablate_heads(model, ids, heads=[(1, 3)])
    lens = logit_lens(model, ids)                                   # (L + 1, B, T, V); lens[-1] == logits
    scores = head_scores(model)                                     # previous-token and induction heads
    sae.train_sae(model, tok, "blocks.2.hook_resid_post", ["input.txt"], out_dir="out/sae")  # docs/sae.md
    estimate = attribution_patching(model, clean, corrupted, metric)  # every point's patching, 3 passes
    cache.decompose_resid(), cache.stack_head_results(), cache.logit_attrs(stack, tokens)  # TL's cache algebra
    w = weights(model); w.W_Q, w.OV.S, w.all_composition_scores("K")  # per-head weights, circuits
    circuit = find_circuit(model, clean, corrupted, metric)          # EAP-IG edges, faithful to 0.9
"""

from . import sae  # sparse autoencoders: glassformer.interpret.sae
from .attribution import Attribution, attribution_patching, correlation, exact_head_patching, top_heads
from .circuits import Circuit, EdgeGraph, edge_attribution, find_circuit, path_patching
from .detectors import (
    HeadScores,
    duplicate_token_scores,
    head_scores,
    induction_scores,
    previous_token_scores,
    probe_lengths,
    repeated_tokens,
    scores_over_lengths,
)
from .hooks import ActivationCache, Hooks, Recording, hooks, record, run_with_cache, run_with_hooks
from .lens import LogitAttribution, TopTokens, direct_logit_attribution, logit_lens, residual_names
from .patching import (
    ablate_heads,
    ablation_hooks,
    attention_weights,
    head_ablation_effects,
    next_token_loss,
    patch_hooks,
    patching_effects,
    run_with_patch,
)
from .points import HookPoint, act_name, hook_points, resolve
from .weights import FactoredMatrix, Weights, composition_scores, weights

__all__ = [
    "hook_points", "HookPoint", "act_name", "resolve",
    "weights", "Weights", "FactoredMatrix", "composition_scores",
    "hooks", "Hooks", "run_with_hooks", "run_with_cache", "ActivationCache", "record", "Recording",
    "patch_hooks", "run_with_patch", "patching_effects",
    "ablation_hooks", "ablate_heads", "head_ablation_effects", "next_token_loss", "attention_weights",
    "logit_lens", "TopTokens", "residual_names", "direct_logit_attribution", "LogitAttribution",
    "repeated_tokens", "previous_token_scores", "induction_scores", "duplicate_token_scores", "head_scores",
    "probe_lengths", "scores_over_lengths",
    "path_patching", "edge_attribution", "find_circuit", "Circuit", "EdgeGraph",
    "HeadScores", "sae", "attribution_patching", "Attribution", "exact_head_patching", "correlation", "top_heads",
]
