"""Tokenizers with one interface: character-level, byte-level and BPE (Hugging Face `tokenizers`)."""

from .base import SPECIAL_NAMES, Tokenizer, check_specials
from .bpe import BPETokenizer
from .byte import ByteTokenizer
from .char import CharTokenizer
from .factory import KINDS, make_tokenizer
from .hf import HFTokenizer

__all__ = ["SPECIAL_NAMES", "Tokenizer", "check_specials", "CharTokenizer", "ByteTokenizer", "BPETokenizer",
           "KINDS", "make_tokenizer", "HFTokenizer"]
