"""CharTokenizer: one id per character, the vocabulary read off the corpus."""

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError, GlassformerError
from .base import Tokenizer, check_specials, field


class CharTokenizer(Tokenizer):
    """Every distinct character of the corpus is a token (the tiny char LM and nanoGPT's shakespeare_char).

    Special tokens (``<pad>``, ``<bos>``...) come first, then the characters in the order given
    (``from_text``: sorted). An unknown character is an error naming it, unless ``unk`` is a special."""

    kind = "char"

    def __init__(self, chars: Iterable[str], specials: Sequence[str] = ()):
        chars = list(chars)
        bad = [c for c in chars if not isinstance(c, str) or len(c) != 1]
        if bad:
            raise GlassformerError(f"chars must be single characters, got {bad[:3]!r}")
        if len(set(chars)) != len(chars):
            raise GlassformerError("chars must not repeat")
        self.specials = check_specials(specials)
        self.special_tokens = {name: i for i, name in enumerate(self.specials)}
        self.chars = chars
        self._pieces = [f"<{name}>" for name in self.specials] + chars
        codes = np.array([ord(c) for c in chars] + [0x110000], dtype=np.int64)  # a sentinel past every code point
        self._order = np.argsort(codes)
        self._sorted_codes = codes[self._order]

    @classmethod
    def from_text(cls, text: str, specials: Sequence[str] = ()) -> "CharTokenizer":
        """The tokenizer whose characters are ``sorted(set(text))``."""
        if not text:
            raise GlassformerError("cannot build a CharTokenizer from empty text")
        return cls(sorted(set(text)), specials)

    @property
    def vocab_size(self) -> int:
        """Distinct characters + specials."""
        return len(self._pieces)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Text -> one id per character; an unknown character is an error naming it (or ``unk``)."""
        ids = self.encode_to_array(text).tolist()
        return self.add_specials(ids) if add_special_tokens else ids

    def encode_to_array(self, text: str) -> np.ndarray:
        """:meth:`encode` as an int64 array, vectorised for large corpora: characters are looked up by code point."""
        # surrogatepass: a lone surrogate is looked up like any character (unknown unless in the vocabulary)
        if not isinstance(text, str):
            raise ArgumentTypeError(f"text must be a str, got {type(text).__name__}")
        codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.int64)
        where = np.searchsorted(self._sorted_codes, codes)  # (N,) the sentinel's place for a character past them all
        known = self._sorted_codes[where] == codes
        ids = self._order[where] + len(self.specials)
        if not known.all():
            if self.unk_id is None:
                position = int(np.argmin(known))
                raise GlassformerError(
                    f"character {text[position]!r} (U+{ord(text[position]):04X}) at position {position} is not in "
                    f"this tokenizer's vocabulary of {len(self.chars)} characters (configure an 'unk' special token "
                    "to map unknown characters)")
            ids[~known] = self.unk_id
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Ids -> text; specials dropped unless ``skip_special_tokens=False``."""
        first = len(self.specials) if skip_special_tokens else 0
        return "".join(self._pieces[i] for i in map(self.check_id, ids) if i >= first)

    def id_to_token(self, token_id: int) -> str:
        """One id's character (a special token as ``<name>``)."""
        return self._pieces[self.check_id(token_id)]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: kind, characters and specials."""
        return {"kind": self.kind, "specials": list(self.specials), "chars": "".join(self.chars)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CharTokenizer":
        """Rebuild from :meth:`to_dict`'s output."""
        return cls(list(field(data, "chars", str)), field(data, "specials", list, ()))
