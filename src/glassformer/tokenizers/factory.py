"""make_tokenizer: build the tokenizer a training config names from the training text."""

from collections.abc import Iterable, Sequence

from ..errors import GlassformerError
from ..validate import check_choice
from .base import Tokenizer
from .bpe import BPETokenizer
from .byte import ByteTokenizer
from .char import CharTokenizer

KINDS = ("char", "byte", "bpe")


def make_tokenizer(kind: str, texts: Iterable[str], specials: Sequence[str] = (),
                   vocab_size: int | None = None) -> Tokenizer:
    """A new tokenizer of ``kind`` ("char", "byte" or "bpe") fitted to ``texts`` (char reads their
    characters, bpe learns merges up to ``vocab_size``, required there; byte ignores them)."""
    check_choice("tokenizer", kind, KINDS)
    if kind == "char":
        seen: set[str] = set()
        for text in texts:  # one set, not one per text (a pairs file gives millions of sentences)
            seen.update(text)
        return CharTokenizer(sorted(seen), specials)
    if kind == "byte":
        return ByteTokenizer(specials)
    if vocab_size is None:
        raise GlassformerError("tokenizer='bpe' needs a vocab_size (e.g. 1024)")
    return BPETokenizer.train(texts, vocab_size, specials)
