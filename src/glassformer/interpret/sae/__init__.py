"""Sparse autoencoders on your own model: train one on any hook point, measure it, splice it in, and
read its features (docs/sae.md).

    sae = train_sae(model, tokenizer, "blocks.2.hook_resid_post", ["input.txt"], out_dir="out/sae")
    logits = run_with_hooks(model, ids, hooks=[reconstruction_hook(sae)])   # the model reads x̂
"""

from .activations import ActivationBuffer, ActivationSource, InputBatch, hook_point, hook_width
from .features import feature_summary
from .metrics import evaluate_sae, reconstruction_metrics
from .model import SAEConfig, SparseAutoencoder, identity_sae, load_sae, read_sae_info, save_sae
from .run import run_sae, train_sae
from .steer import clamp_hook, reconstruction_hook
from .train import SAETrainConfig, SAETrainer

__all__ = [
    "SparseAutoencoder", "SAEConfig", "identity_sae", "save_sae", "load_sae", "read_sae_info",
    "ActivationSource", "ActivationBuffer", "InputBatch", "hook_point", "hook_width",
    "SAETrainConfig", "SAETrainer", "train_sae", "run_sae",
    "evaluate_sae", "reconstruction_metrics", "feature_summary",
    "reconstruction_hook", "clamp_hook",
]
