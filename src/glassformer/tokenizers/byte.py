"""ByteTokenizer: the 256 bytes of UTF-8 as tokens, so no text is ever unknown."""

from collections.abc import Sequence
from itertools import groupby
from typing import Any

import numpy as np

from .base import Tokenizer, check_specials, check_text, field


class ByteTokenizer(Tokenizer):
    """Ids 0-255 are the bytes of the UTF-8 encoding (a Chinese character is three ids); special tokens
    follow from 256 on. A character cut in the middle decodes as U+FFFD."""

    kind = "byte"

    def __init__(self, specials: Sequence[str] = ()):
        self.specials = check_specials(specials)
        self.special_tokens = {name: 256 + i for i, name in enumerate(self.specials)}

    @property
    def vocab_size(self) -> int:
        """256 bytes + specials."""
        return 256 + len(self.specials)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Text -> its UTF-8 bytes as ids; ``add_special_tokens`` wraps them in bos/eos."""
        ids = list(check_text(text).encode("utf-8"))
        return self.add_specials(ids) if add_special_tokens else ids

    def encode_to_array(self, text: str) -> np.ndarray:
        """A whole corpus -> int64 ids (its UTF-8 bytes)."""
        return np.frombuffer(check_text(text).encode("utf-8"), dtype=np.uint8).astype(np.int64)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Ids -> text; invalid UTF-8 becomes U+FFFD; specials dropped unless ``skip_special_tokens=False``."""
        out = []
        for is_byte, run in groupby(map(self.check_id, ids), key=lambda token_id: token_id < 256):
            if is_byte:  # a run of bytes decodes together (a character may span several)
                out.append(bytes(run).decode("utf-8", errors="replace"))
            elif not skip_special_tokens:
                out += [self.id_to_token(token_id) for token_id in run]
        return "".join(out)

    def id_to_token(self, token_id: int) -> str:
        """One id as printable text: the character, ``<0xNN>`` for other bytes, ``<name>`` for specials."""
        token_id = self.check_id(token_id)
        if token_id >= 256:
            return f"<{self.specials[token_id - 256]}>"
        return chr(token_id) if 32 <= token_id < 127 else f"<0x{token_id:02X}>"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: kind and specials."""
        return {"kind": self.kind, "specials": list(self.specials)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ByteTokenizer":
        """Rebuild from :meth:`to_dict`'s output."""
        return cls(field(data, "specials", list, ()))
