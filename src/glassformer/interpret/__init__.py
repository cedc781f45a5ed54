"""See why, not only what: hooks, caches, patching, ablation, lenses, head detectors, attribution patching,
weight circuits, circuit discovery and sparse autoencoders (:mod:`.sae`) on every glassformer model, with
TransformerLens's hook names (docs/interpret.md).

    logits, cache = run_with_cache(model, ids)                      # every hook point, or names=...
    logits = run_with_hooks(model, ids, hooks=[("blocks.1.attn.hook_z", fn)])
"""

from . import sae  # sparse autoencoders: glassformer.interpret.sae
from .attribution import Attribution, attribution_patching, correlation, exact_head_patching, top_heads
from .circuits import Circuit, EdgeGraph, EdgeScores, circuit_metric, edge_attribution, find_circuit, path_patching
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
from .points import HookPoint, act_name, get_act_name, hook_points, resolve
from .weights import FactoredMatrix, Weights, composition_scores, weights

__all__ = [
    "hook_points", "HookPoint", "act_name", "get_act_name", "resolve",
    "weights", "Weights", "FactoredMatrix", "composition_scores",
    "hooks", "Hooks", "run_with_hooks", "run_with_cache", "ActivationCache", "record", "Recording",
    "patch_hooks", "run_with_patch", "patching_effects",
    "ablation_hooks", "ablate_heads", "head_ablation_effects", "next_token_loss", "attention_weights",
    "logit_lens", "TopTokens", "residual_names", "direct_logit_attribution", "LogitAttribution",
    "repeated_tokens", "previous_token_scores", "induction_scores", "duplicate_token_scores", "head_scores",
    "probe_lengths", "scores_over_lengths",
    "path_patching", "edge_attribution", "find_circuit", "Circuit", "EdgeGraph", "EdgeScores", "circuit_metric",
    "HeadScores", "sae", "attribution_patching", "Attribution", "exact_head_patching", "correlation", "top_heads",
]
