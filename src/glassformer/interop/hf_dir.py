"""Hugging Face model folders (config.json + model.safetensors + tokenizer files), without transformers.

``load_hf_dir`` reads what ``save_pretrained`` writes; ``save_hf_dir`` writes what ``from_pretrained`` loads.
"""

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from ..errors import ArgumentTypeError, BadFileError, GlassformerError, MissingFileError
from ..io.checks import check_inside, shown
from ..io.fileio import atomic_directory, rust_path
from ..io.loaders import MAX_CONFIG_BYTES, load_json
from ..io.safetensors_header import read_header
from ..models import EncoderDecoder, TransformerLM
from ..tokenizers import Tokenizer
from ..tokenizers.hf import HFTokenizer
from ..training.weights import load_tensors
from .families import FAMILIES
from .hf import check_hf_state, hf_state_from_model, model_from_hf_state

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json")


def weight_files(path: Path) -> list[Path]:
    """model.safetensors, or the shards model.safetensors.index.json names (plain file names in the folder)."""
    single = check_inside(path, "model.safetensors")
    if single.is_file():
        return [single]
    index = check_inside(path, "model.safetensors.index.json")
    if index.is_file():
        data = load_json(index, "shard index")
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            raise BadFileError(f"{str(index)!r} has no \"weight_map\" of tensor names to shard files")
        if not all(isinstance(v, str) for v in weight_map.values()):
            raise BadFileError(f"{str(index)!r}: every shard in \"weight_map\" must be a file name")
        shards = []
        for shard in sorted(set(weight_map.values())):
            file = check_inside(path, shard, "shard")
            if not file.is_file():
                raise MissingFileError(f"{str(index)!r} names the shard {shard!r}, which is not in the folder")
            shards.append(file)
        return shards
    if any((path / name).is_file() for name in ("pytorch_model.bin", "model.bin")):
        raise BadFileError(f"{str(path)!r} holds only pickled PyTorch weights (pytorch_model.bin), which "
                           "glassformer does not unpickle; re-save them as safetensors (save_pretrained(..., "
                           "safe_serialization=True))")
    raise MissingFileError(f"{str(path)!r} has no model.safetensors")


def _class_name(hf_config: dict[str, Any], state: Mapping[str, Any], path: Path) -> str:
    """The transformers class: config.json's "architectures", else guessed from model_type and tensors."""
    architectures = hf_config.get("architectures") or []
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        return architectures[0]
    if architectures:
        raise BadFileError(f"{path / 'config.json'}: \"architectures\" must be a list of class names, "
                           f"got {shown(architectures)}")
    model_type = hf_config.get("model_type")
    for family in FAMILIES:
        if family.model_type == model_type:
            under = [name.startswith(family.prefix) for name in state]
            return family.head_class if any(under) and not all(under) else family.base_class
    raise GlassformerError(f"{path / 'config.json'}: unsupported model_type {shown(model_type)}; glassformer converts "
                           f"{', '.join(f.model_type for f in FAMILIES)}")


def is_hf_dir(path: str | Path) -> bool:
    """Whether ``path`` is a Hugging Face model folder (its config.json has "model_type"), not a checkpoint."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return False
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (ValueError, RecursionError, OSError):
        return False
    return isinstance(data, dict) and "model_type" in data


def load_hf_dir(path: str | Path, dtype: torch.dtype | None = None) -> tuple[TransformerLM | EncoderDecoder,
                                                                             HFTokenizer | None]:
    """Read a Hugging Face model folder into ``(model in eval mode, tokenizer or None)``.

    Args:
        path: config.json, model.safetensors (or shards) and tokenizer.json, vocab.txt (BERT) or
            vocab.json + merges.txt (GPT-2).
        dtype: cast the model to this dtype (default: float32).
    Raises MissingFileError for a missing folder or file, GlassformerError for an unsupported architecture
    or config field, a corrupt file, or weights that do not match (named), before any weight is allocated.
    """
    path = Path(path)
    if not path.is_dir():
        raise MissingFileError(f"Hugging Face model folder {str(path)!r} does not exist")
    if not (path / "config.json").is_file():
        raise MissingFileError(f"{str(path)!r} has no config.json (is it a Hugging Face model folder?)")
    hf_config = load_json(check_inside(path, "config.json"), "config file", MAX_CONFIG_BYTES)
    if not isinstance(hf_config, dict):
        raise BadFileError(f"{str(path / 'config.json')!r} must hold a JSON object, got {type(hf_config).__name__}")
    files = weight_files(path)
    header = read_header(files)
    class_name = _class_name(hf_config, header, path)
    check_hf_state(class_name, hf_config, header, source=str(path))
    state = load_tensors(files)
    model = model_from_hf_state(class_name, hf_config, state, source=str(path))
    if dtype is not None:
        model.to(dtype)
    tokenizer = HFTokenizer.from_dir(path) if any((path / n).is_file() for n in TOKENIZER_FILES) else None
    return model, tokenizer


def _as_hf_tokenizer(tokenizer: Tokenizer) -> HFTokenizer:
    if isinstance(tokenizer, HFTokenizer):
        return tokenizer
    rust = getattr(tokenizer, "hf", None)  # the BPE tokenizer is a Hugging Face one inside
    if rust is None and tokenizer.kind == "char":
        rust = _char_as_hf(tokenizer)
    if rust is None:
        raise ArgumentTypeError(f"tokenizer of kind {tokenizer.kind!r} has no Hugging Face form; pass tokenizer=None "
                                "(char, BPE and Hugging Face tokenizers can be exported)")
    return HFTokenizer(rust, {role: rust.id_to_token(i) for role, i in tokenizer.special_tokens.items()})


def _char_as_hf(tokenizer: Tokenizer) -> Any:
    """A character tokenizer as a ``tokenizers.Tokenizer``: one token per character, same ids and specials."""
    from tokenizers import Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as RustTokenizer

    pieces = [tokenizer.id_to_token(i) for i in range(tokenizer.vocab_size)]
    rust = RustTokenizer(models.WordLevel({piece: i for i, piece in enumerate(pieces)}, unk_token=None))
    rust.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    rust.decoder = decoders.Fuse()
    rust.add_special_tokens([tokenizer.id_to_token(i) for i in tokenizer.special_tokens.values()])
    return rust


def save_hf_dir(model: nn.Module, tokenizer: Tokenizer | None, path: str | Path) -> Path:
    """Write a Hugging Face model folder atomically (replacing one there); returns its path.

    Args:
        model: a model whose config fits GPT-2, GPT-NeoX, Llama, BERT or BART (ValueError otherwise).
        tokenizer: an HFTokenizer, BPE or char tokenizer (its specials become pad/bos/eos ids), or None.
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
        with rust_path(temp / "model.safetensors", write=True) as name_for_rust:
            save_file(weights, name_for_rust, metadata={"format": "pt"})
        if hf_tokenizer is not None:
            hf_tokenizer.save_hf(temp)
    return path
