"""Tokenizers with one interface: character-level, byte-level and BPE (Hugging Face `tokenizers`)."""

from .base import SPECIAL_NAMES, Tokenizer

__all__ = ["SPECIAL_NAMES", "Tokenizer"]
