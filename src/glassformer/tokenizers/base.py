"""The one interface every glassformer tokenizer has (char, byte, BPE, and wrapped Hugging Face ones)."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..errors import ArgumentTypeError, GlassformerError

SPECIAL_NAMES = ("pad", "bos", "eos", "mask", "unk")


def check_specials(specials: Sequence[str]) -> tuple[str, ...]:
    """Validate special-token names (a subset of SPECIAL_NAMES, no repeats); return them as a tuple."""
    if isinstance(specials, str):
        raise ArgumentTypeError(f"specials must be a list of names, got the string {specials!r}")
    specials = tuple(specials)
    unknown = [name for name in specials if name not in SPECIAL_NAMES]
    if unknown:
        raise GlassformerError(f"unknown special token(s) {unknown}; expected names among {list(SPECIAL_NAMES)}")
    if len(set(specials)) != len(specials):
        raise GlassformerError(f"special tokens repeat: {list(specials)}")
    return specials


def _special_id(kind: str) -> property:
    """A read-only property: the id of the ``kind`` special token, or None when there is none."""
    return property(lambda self: self.special_tokens.get(kind),
                    doc=f"Id of the {kind} token, or None when this tokenizer has none.")


class Tokenizer(ABC):
    """Text <-> token ids.

    Attributes:
        kind: the registry name written to JSON ("char", "byte", "bpe", ...).
        special_tokens: {name: id} for the special tokens this tokenizer has, names among
            "pad", "bos", "eos", "mask", "unk".
    """

    kind: ClassVar[str] = ""
    registry: ClassVar[dict[str, type[Tokenizer]]] = {}
    special_tokens: dict[str, int]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind:
            Tokenizer.registry[cls.kind] = cls

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of ids, specials included."""

    @abstractmethod
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Text -> ids (with bos/eos around them when ``add_special_tokens`` and they exist)."""

    @abstractmethod
    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Ids -> text."""

    @abstractmethod
    def id_to_token(self, token_id: int) -> str:
        """The printable piece of one id (for traces and attention plots)."""

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """Everything needed to rebuild this tokenizer; must include ``"kind"``."""

    @classmethod
    @abstractmethod
    def from_dict(cls, data: dict[str, Any]) -> Tokenizer:
        """Rebuild from :meth:`to_dict`'s output."""

    # -- special ids (None when the tokenizer has no such token)
    pad_id = _special_id("pad")
    bos_id = _special_id("bos")
    eos_id = _special_id("eos")
    mask_id = _special_id("mask")
    unk_id = _special_id("unk")

    def add_specials(self, ids: list[int]) -> list[int]:
        """``ids`` with bos before and eos after, for those of the two this tokenizer has."""
        return ([self.bos_id] if self.bos_id is not None else []) + ids + (
            [self.eos_id] if self.eos_id is not None else [])

    def check_id(self, token_id: int) -> int:
        """``token_id`` as an int, or a ValueError when it is outside [0, vocab_size)."""
        token_id = int(token_id)
        if not 0 <= token_id < self.vocab_size:
            raise GlassformerError(f"token id {token_id} is out of range: "
                                   f"expected 0 <= id < vocab_size={self.vocab_size}")
        return token_id

    def encode_to_array(self, text: str) -> np.ndarray:
        """Ids of ``text`` (no specials) as an int64 array; subclasses vectorise it for big corpora."""
        return np.asarray(self.encode(text), dtype=np.int64)

    def tokens(self, ids: Sequence[int]) -> list[str]:
        """The printable piece of each id."""
        return [self.id_to_token(int(i)) for i in ids]

    # -- files
    def save(self, path: str | Path) -> None:
        """Write the tokenizer as JSON (``tokenizer.json`` in a checkpoint)."""
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=False), encoding="utf-8")

    @staticmethod
    def load(path: str | Path) -> Tokenizer:
        """Read a tokenizer written by :meth:`save`, whatever its kind."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        kind = data.get("kind") if isinstance(data, dict) else None
        if kind not in Tokenizer.registry:
            raise GlassformerError(f"{path}: unknown tokenizer kind {kind!r}; known: {sorted(Tokenizer.registry)}")
        return Tokenizer.registry[kind].from_dict(data)
