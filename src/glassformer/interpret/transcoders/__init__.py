"""Transcoders: sparse features that stand in for a model's MLPs, trained on your own model
(:func:`train_transcoders`, ``glassformer transcoders``; docs/transcoders.md) and kept in circuit-tracer's
local folder layout (:mod:`.format`), for attribution graphs (:mod:`glassformer.interpret.graph`, docs/graphs.md).

    tc = train_transcoders(model, tokenizer, ["input.txt"], out_dir="out/transcoders", kind="plt")
    files = load_transcoders("out/transcoders", model)   # per-layer (PLT) or cross-layer (CLT)
    save_transcoders(files, "out/copy")                   # circuit_tracer reads the same folder
"""

from .features import LayerFeatures, transcoder_feature_summaries
from .format import (
    LayerTranscoder,
    Transcoders,
    file_names,
    is_transcoder_folder,
    load_transcoders,
    random_transcoders,
    save_transcoders,
    write_transcoder_files,
)
from .metrics import evaluate_transcoders, replacement_hooks
from .model import TrainableTranscoders, TranscoderConfig
from .run import run_transcoders, train_transcoders
from .train import TranscoderTrainConfig, TranscoderTrainer, mlp_hooks

__all__ = ["Transcoders", "LayerTranscoder", "load_transcoders", "save_transcoders", "write_transcoder_files",
           "file_names", "is_transcoder_folder", "random_transcoders",
           "TrainableTranscoders", "TranscoderConfig", "TranscoderTrainConfig", "TranscoderTrainer", "mlp_hooks",
           "train_transcoders", "run_transcoders", "evaluate_transcoders", "replacement_hooks",
           "transcoder_feature_summaries", "LayerFeatures"]
