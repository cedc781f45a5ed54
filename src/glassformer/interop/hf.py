"""Hugging Face models <-> glassformer models: ``from_hf`` and ``to_hf`` (which import ``transformers`` lazily).

The conversion works on plain data (a config dict and a state dict), so :func:`load_hf_dir` needs no transformers.
"""

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ..config import ModelConfig
from ..errors import ArgumentTypeError, GlassformerError
from ..io.safetensors_header import Header
from ..models import EncoderDecoder, TransformerLM, build_model
from ..training.weights import check_sizes, meta_shapes, meta_tensors
from .families import Family, family_of_class, family_of_config
from .mapping import export_state, import_state


def _with_prefix(family: Family, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Their state with the base model's prefix ("bert.") on base tensors, as in the head class."""
    if any(name.startswith(family.prefix) for name in state):
        return dict(state)
    return {family.prefix + name: tensor for name, tensor in state.items()}


def model_from_hf_state(class_name: str, hf_config: dict[str, Any], state: Mapping[str, torch.Tensor],
                        source: str = "Hugging Face checkpoint") -> TransformerLM | EncoderDecoder:
    """A glassformer model (eval mode) from a transformers class name, its config dict and its state dict.

    ValueError for an unsupported architecture or config field, and for missing, unexpected, untied or wrongly
    shaped tensors (each named).
    """
    family, has_head = family_of_class(class_name)
    config = family.config_from_hf(hf_config, has_head)
    model = build_model(config)
    expected = {name: t.shape for name, t in model.state_dict().items()}
    ours = import_state(family.rules(config, has_head), _with_prefix(family, state), expected, family.ignore,
                        source=f"{source} ({class_name})")
    model.load_state_dict(ours)
    return model.eval()


def check_hf_state(class_name: str, hf_config: dict[str, Any], header: Header,
                   source: str = "Hugging Face checkpoint") -> ModelConfig:
    """The ModelConfig, checked against the safetensors ``header`` (names, shapes) before any weight exists.

    The same errors as loading, found on shapes alone; a config asking for more weights than the files hold
    is refused at once. ``source``: the folder, for messages.
    """
    family, has_head = family_of_class(class_name)
    try:
        config = family.config_from_hf(hf_config, has_head)
    except GlassformerError as error:
        raise type(error)(f"{source}/config.json: {error}") from None
    check_sizes(config, header, f"{source}/config.json")
    import_state(family.rules(config, has_head), _with_prefix(family, meta_tensors(header)), meta_shapes(config),
                 family.ignore, source=f"{source} ({class_name})")
    return config


def hf_state_from_model(model: nn.Module) -> tuple[str, dict[str, Any], dict[str, torch.Tensor]]:
    """(transformers class name, hf config dict, hf state dict) for a glassformer model.

    Tied tensors appear once; tensors the family has and the model lacks are constants (``Family.fill``).
    ValueError when no family fits.
    """
    if not isinstance(model, (TransformerLM, EncoderDecoder)):
        raise ArgumentTypeError(f"model must be a glassformer TransformerLM or EncoderDecoder, "
                                f"got {type(model).__name__}")
    config = model.config
    family = family_of_config(config)
    has_head = family.has_head(config)
    class_name = family.head_class if has_head else family.base_class
    state = export_state(family.rules(config, has_head), model.state_dict())
    dtype = next(iter(state.values())).dtype
    state.update({name: torch.full(shape, value, dtype=dtype) for name, (shape, value) in family.fill(config).items()})
    if not has_head:
        state = {name.removeprefix(family.prefix): tensor for name, tensor in state.items()}
    # pad, bos, eos None: not the class's defaults (GPT-2's 50256), which may be outside the vocabulary
    hf_config = {**family.config_to_hf(config), "architectures": [class_name],
                 "pad_token_id": None, "bos_token_id": None, "eos_token_id": None}
    return class_name, hf_config, state


def from_hf(hf_model: Any) -> TransformerLM | EncoderDecoder:
    """A float32 glassformer model with the weights of a ``transformers`` model (in eval mode).

    GPT-2, GPT-NeoX (sequential residual, full rotary), Llama, BERT and BART, with or without head; a base
    model's output layer is the tied embedding (use ``model.hidden_states``).
    """
    if not isinstance(hf_model, nn.Module) or not hasattr(hf_model, "config"):
        raise ArgumentTypeError(f"hf_model must be a transformers PreTrainedModel, got {type(hf_model).__name__}")
    # Float tensors become float32; any other (an int8 or bool weight) stays as it is, for import_state to refuse.
    state = {name: t.detach().to("cpu", torch.float32 if t.is_floating_point() else t.dtype)
             for name, t in hf_model.state_dict().items()}
    return model_from_hf_state(type(hf_model).__name__, hf_model.config.to_dict(), state, "transformers model")


def to_hf(model: nn.Module) -> Any:
    """The ``transformers`` model (eval mode) with this model's weights; the class follows the config
    (ValueError names the field that keeps it from every family)."""
    import transformers

    class_name, hf_config, state = hf_state_from_model(model)
    config_class = transformers.AutoConfig.for_model(hf_config.pop("model_type"), **hf_config)
    kwargs = {"add_pooling_layer": False} if class_name == "BertModel" else {}
    hf_model = getattr(transformers, class_name)(config_class, **kwargs)
    missing, unexpected = hf_model.load_state_dict(state, strict=False)
    tied = {name for name, _ in hf_model.named_parameters(remove_duplicate=False)} - {
        name for name, _ in hf_model.named_parameters()}  # second names of tied parameters
    untied = sorted(set(missing) - tied)
    if untied or unexpected:
        raise GlassformerError(f"export to {class_name} left tensors unset {untied} or unused {sorted(unexpected)}")
    return hf_model.eval()
