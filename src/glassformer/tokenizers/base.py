"""The one interface every glassformer tokenizer has (char, byte, BPE, and wrapped Hugging Face ones)."""

import json
import operator
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..errors import ArgumentTypeError, BadFileError, GlassformerError
from ..io.checks import check_token_id, shown
from ..io.loaders import load_json

SPECIAL_NAMES = ("pad", "bos", "eos", "mask", "unk")


def check_specials(specials: Sequence[str]) -> tuple[str, ...]:
    """Validate special-token names (a subset of SPECIAL_NAMES, no repeats); return them as a tuple."""
    if not isinstance(specials, (list, tuple)) or not all(isinstance(name, str) for name in specials):
        raise ArgumentTypeError(f"specials must be a list of names, got {shown(specials)}")
    specials = tuple(specials)
    unknown = [name for name in specials if name not in SPECIAL_NAMES]
    if unknown:
        raise GlassformerError(f"unknown special token(s) {unknown}; expected names among {list(SPECIAL_NAMES)}")
    if len(set(specials)) != len(specials):
        raise GlassformerError(f"special tokens repeat: {list(specials)}")
    return specials


def check_text(text: Any, name: str = "text") -> str:
    """``text`` if it is a str of valid Unicode; a one-line error otherwise (a lone surrogate, left by
    bytes that are not UTF-8 decoded with ``surrogateescape``, has no UTF-8 encoding)."""
    if not isinstance(text, str):
        raise ArgumentTypeError(f"{name} must be a str, got {type(text).__name__}")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise GlassformerError(f"{name} has a lone surrogate U+{ord(text[error.start]):04X} at position "
                                   f"{error.start}, which is not valid Unicode (was it decoded from bytes that "
                                   "are not UTF-8?)") from None
    return text


def field(data: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    """``data[key]`` (or ``default`` when absent) if it is of ``kind``; else an error naming the key
    (for ``from_dict``: never a KeyError or a TypeError from deep inside)."""
    if key not in data:
        if default is ...:
            raise GlassformerError(f"tokenizer data has no {key!r}")
        return default
    value = data[key]
    if not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise GlassformerError(f"tokenizer field {key!r} must be a {names}, got {shown(value)}")
    return value


def _special_id(kind: str) -> property:
    return property(lambda self: self.special_tokens.get(kind),
                    doc=f"Id of the {kind} token, or None when this tokenizer has none.")


class Tokenizer(ABC):
    """Text <-> token ids. ``kind``: the registry name written to JSON ("char", "byte", "bpe", ...);
    ``special_tokens``: {name: id} for the special tokens it has, names among :data:`SPECIAL_NAMES`."""

    kind: ClassVar[str] = ""
    registry: "ClassVar[dict[str, type[Tokenizer]]]" = {}
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
    def from_dict(cls, data: dict[str, Any]) -> "Tokenizer":
        """Rebuild from :meth:`to_dict`'s output (a GlassformerError when a field is missing or wrong)."""

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
        """``token_id`` as an int; an error when it is outside [0, vocab_size) or not an integer."""
        try:
            if isinstance(token_id, bool):  # True is 1 to operator.index, not an id
                raise TypeError
            token_id = operator.index(token_id)
        except TypeError:
            raise ArgumentTypeError(f"token id must be an int, got {shown(token_id)}") from None
        return check_token_id("", token_id, self.vocab_size)

    def encode_to_array(self, text: str) -> np.ndarray:
        """Ids of ``text`` (no specials) as an int64 array; subclasses vectorise it for big corpora."""
        return np.asarray(self.encode(text, add_special_tokens=False), dtype=np.int64)

    def tokens(self, ids: Sequence[int]) -> list[str]:
        """The printable piece of each id."""
        return [self.id_to_token(int(i)) for i in ids]

    def save(self, path: str | Path) -> None:
        """Write the tokenizer as JSON (``tokenizer.json`` in a checkpoint) by
        :func:`glassformer.io.fileio.atomic_write` (a link, a FIFO or a file glassformer did not write at ``path`` is
        refused)."""
        from ..io.fileio import atomic_write

        atomic_write(path, json.dumps(self.to_dict(), ensure_ascii=False), what="tokenizer file")

    @staticmethod
    def load(path: str | Path) -> "Tokenizer":
        """Read a tokenizer written by :meth:`save`, whatever its kind (a BadFileError naming the file when
        it is not one)."""
        data = load_json(path, "tokenizer file")
        kind = data.get("kind") if isinstance(data, dict) else None
        if not isinstance(kind, str) or kind not in Tokenizer.registry:
            raise BadFileError(f"{path}: unknown tokenizer kind {shown(kind)}; known: {sorted(Tokenizer.registry)}")
        try:
            return Tokenizer.registry[kind].from_dict(data)
        except GlassformerError as error:
            raise BadFileError(f"{path}: {error}") from None
