"""Transcoders: sparse features that stand in for a model's MLPs, in circuit-tracer's local folder layout
(:mod:`.format`), for attribution graphs (:mod:`glassformer.interpret.graph`, docs/graphs.md).

    tc = load_transcoders("out/transcoders", model)      # per-layer (PLT) or cross-layer (CLT)
    save_transcoders(tc, "out/copy")                      # circuit_tracer reads the same folder
"""

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

__all__ = ["Transcoders", "LayerTranscoder", "load_transcoders", "save_transcoders", "write_transcoder_files",
           "file_names", "is_transcoder_folder", "random_transcoders"]
