"""Hugging Face model folders (config.json + model.safetensors + tokenizer files), without transformers.

``load_hf_dir`` reads what ``save_pretrained`` writes (or what the Hub serves); ``save_hf_dir``
writes a folder that ``transformers.AutoModel...from_pretrained`` and ``AutoTokenizer`` load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ..errors import ArgumentTypeError, BadFileError, GlassformerError, MissingFileError
from ..fileio import atomic_directory
from ..models import EncoderDecoder, TransformerLM
from ..tokenizers import Tokenizer
from ..tokenizers.hf import HFTokenizer
from .families import FAMILIES
from .hf import hf_state_from_model, model_from_hf_state

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json")


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    """model.safetensors, or the shards listed by model.safetensors.index.json."""
    if (path / "model.safetensors").is_file():
        return load_file(str(path / "model.safetensors"))
    index = path / "model.safetensors.index.json"
    if index.is_file():
        state: dict[str, torch.Tensor] = {}
        for shard in sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())):
            state.update(load_file(str(path / shard)))
        return state
    if any((path / name).is_file() for name in ("pytorch_model.bin", "model.bin")):
        raise BadFileError(f"{str(path)!r} holds only pickled PyTorch weights (pytorch_model.bin), which "
                           "glassformer does not unpickle; re-save them as safetensors (save_pretrained(..., "
                           "safe_serialization=True))")
    raise MissingFileError(f"{str(path)!r} has no model.safetensors")


def _class_name(hf_config: dict[str, Any], state: dict[str, torch.Tensor], path: Path) -> str:
    """The transformers class: config.json's "architectures", else guessed from model_type and tensors."""
    architectures = hf_config.get("architectures") or []
    if architectures:
        return architectures[0]
    model_type = hf_config.get("model_type")
    for family in FAMILIES:
        if family.model_type == model_type:
            under = [name.startswith(family.prefix) for name in state]
            return family.head_class if any(under) and not all(under) else family.base_class
    raise GlassformerError(f"{path / 'config.json'}: unsupported model_type {model_type!r}; glassformer converts "
                           f"{', '.join(f.model_type for f in FAMILIES)}")


def is_hf_dir(path: str | Path) -> bool:
    """Whether ``path`` is a Hugging Face model folder (its config.json has "model_type"), as opposed to
    a glassformer checkpoint (whose config.json is a ModelConfig)."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return False
    try:
        return "model_type" in json.loads(config.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return False


def load_hf_dir(path: str | Path, dtype: torch.dtype | None = None) -> tuple[TransformerLM | EncoderDecoder,
                                                                             HFTokenizer | None]:
    """Read a Hugging Face model folder into ``(model, tokenizer)``; ``transformers`` is not needed.

    Args:
        path: a folder with config.json, model.safetensors (or its shards) and tokenizer.json, or
            vocab.txt (BERT), or vocab.json + merges.txt (GPT-2).
        dtype: cast the model to this dtype (default: float32).
    Returns:
        (model in eval mode, tokenizer or None when the folder has no tokenizer files).
    Raises:
        FileNotFoundError for a missing folder or file; ValueError for an unsupported architecture,
        a config field glassformer cannot honour, or weights that do not match (named).
    """
    path = Path(path)
    if not path.is_dir():
        raise MissingFileError(f"Hugging Face model folder {str(path)!r} does not exist")
    if not (path / "config.json").is_file():
        raise MissingFileError(f"{str(path)!r} has no config.json (is it a Hugging Face model folder?)")
    hf_config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    state = _read_weights(path)
    model = model_from_hf_state(_class_name(hf_config, state, path), hf_config, state, source=str(path))
    if dtype is not None:
        model.to(dtype)
    tokenizer = HFTokenizer.from_dir(path) if any((path / n).is_file() for n in TOKENIZER_FILES) else None
    return model, tokenizer


def _as_hf_tokenizer(tokenizer: Tokenizer) -> HFTokenizer:
    if isinstance(tokenizer, HFTokenizer):
        return tokenizer
    rust = getattr(tokenizer, "hf", None)  # glassformer's BPE tokenizer is a Hugging Face one inside
    if rust is None:
        raise ArgumentTypeError(f"tokenizer of kind {tokenizer.kind!r} has no Hugging Face form; pass tokenizer=None "
                                "(only BPE and Hugging Face tokenizers can be exported)")
    return HFTokenizer(rust, {role: rust.id_to_token(i) for role, i in tokenizer.special_tokens.items()})


def save_hf_dir(model: nn.Module, tokenizer: Tokenizer | None, path: str | Path) -> Path:
    """Write a Hugging Face model folder (atomically: temp folder + rename; an existing one is replaced).

    Writes config.json (with "architectures", so ``AutoModel``/``AutoModelFor...`` pick the class),
    model.safetensors under transformers' tensor names, and the tokenizer's tokenizer.json,
    tokenizer_config.json and special_tokens_map.json.

    Args:
        model: a glassformer model whose config fits GPT-2, Llama, BERT or BART (ValueError otherwise).
        tokenizer: an HFTokenizer or BPE tokenizer, or None for weights only. Its special ids become
            the config's pad/bos/eos ids.
    Returns:
        The folder path.
    """
    class_name, hf_config, state = hf_state_from_model(model)
    hf_tokenizer = _as_hf_tokenizer(tokenizer) if tokenizer is not None else None
    if hf_tokenizer is not None and hf_tokenizer.vocab_size > model.config.vocab_size:
        raise GlassformerError(f"tokenizer has {hf_tokenizer.vocab_size} ids but the model's vocab_size is "
                               f"{model.config.vocab_size}")
    special = hf_tokenizer.special_tokens if hf_tokenizer is not None else {}
    for role in ("pad", "bos", "eos"):  # explicit None rather than a class default outside the vocabulary
        hf_config[f"{role}_token_id"] = special.get(role)
    if hf_config["model_type"] == "bart":  # BART's decoder starts from </s>; no forced tokens
        hf_config.update(decoder_start_token_id=special.get("eos"), forced_bos_token_id=None,
                         forced_eos_token_id=None)
    path = Path(path)
    with atomic_directory(path) as temp:
        (temp / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n", encoding="utf-8")
        weights = {name: t.detach().to("cpu").contiguous() for name, t in state.items()}
        save_file(weights, str(temp / "model.safetensors"), metadata={"format": "pt"})
        if hf_tokenizer is not None:
            hf_tokenizer.save_hf(temp)
    return path
