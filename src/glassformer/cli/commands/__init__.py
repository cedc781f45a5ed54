"""One module per CLI verb (see glassformer.cli), plus ``overrides``: the only layer that reads argv; and what
several verbs share: :func:`load_model_folder`."""

from pathlib import Path
from typing import Any


def load_model_folder(path: Path) -> tuple[Any, Any]:
    """(model, tokenizer) of a Hugging Face model folder (read without transformers) or a glassformer checkpoint;
    a GlassformerError when the folder has no tokenizer files."""
    from ...errors import GlassformerError
    from ...interop.hf_dir import is_hf_dir, load_hf_dir
    from ...training.checkpoint import load

    model, tokenizer = load_hf_dir(path) if is_hf_dir(path) else load(path)
    if tokenizer is None:  # a Hugging Face folder without tokenizer files
        raise GlassformerError(f"{str(path)!r} has no tokenizer files (tokenizer.json, vocab.txt or vocab.json + "
                               "merges.txt)")
    return model, tokenizer
