"""Hugging Face and torch.nn models <-> glassformer models, and Hugging Face folders (no ``transformers`` needed)."""

from .families import FAMILIES, Family
from .hf import from_hf, hf_state_from_model, model_from_hf_state, to_hf
from .hf_dir import load_hf_dir, save_hf_dir
from .torch_nn import BlockStack, EncoderDecoderStack, from_torch

__all__ = ["from_hf", "to_hf", "from_torch", "load_hf_dir", "save_hf_dir", "FAMILIES",
           "Family", "hf_state_from_model", "model_from_hf_state", "BlockStack", "EncoderDecoderStack"]
