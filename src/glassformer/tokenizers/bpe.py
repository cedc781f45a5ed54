"""BPETokenizer: byte-level byte-pair encoding trained with Hugging Face ``tokenizers`` (GPT-2's scheme)."""

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from ..io.checks import check_int
from ..io.loaders import rust_tokenizer
from ..io.progress import Heartbeat
from .base import Tokenizer, check_specials, check_text, field
from .hf import adopt

MAX_VOCAB = 1 << 22  # 4,194,304 ids, 16x Gemma's; a larger request aborts the Rust trainer


class BPETokenizer(Tokenizer):
    """Byte-level BPE: text is mapped to bytes, so any language encodes with no unknowns; frequent
    byte pairs are merged into tokens up to ``vocab_size``. Hugging Face ``tokenizers`` (Rust) trains
    and encodes; its JSON is stored inside ours. Special tokens take the first ids, in the order given."""

    kind = "bpe"

    def __init__(self, hf: HFTokenizer, specials: Sequence[str] = ()):
        self.hf = hf
        self.specials = check_specials(specials)
        self.special_tokens = adopt(hf, {name: f"<{name}>" for name in self.specials})

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int, specials: Sequence[str] = (),
              min_frequency: int = 2) -> "BPETokenizer":
        """Learn merges from ``texts`` (strings: lines or chunks of a corpus) up to ``vocab_size`` (at least
        the 256 bytes + specials), merging pairs seen ``min_frequency`` times; a long training prints
        its progress to stderr every ~10 s."""
        specials = check_specials(specials)
        check_int("vocab_size", vocab_size, 256 + len(specials), MAX_VOCAB)
        hf = HFTokenizer(models.BPE())
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        hf.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                      special_tokens=[f"<{name}>" for name in specials],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        with Heartbeat("training the BPE tokenizer", unit="characters read") as heartbeat, heartbeat.beating():
            hf.train_from_iterator(_counted(texts, heartbeat, vocab_size), trainer=trainer)
        return cls(hf, specials)

    @property
    def vocab_size(self) -> int:
        """Learned merges + byte alphabet + specials."""
        return self.hf.get_vocab_size()

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Text -> ids by byte-level BPE; ``add_special_tokens`` wraps them in bos/eos."""
        ids = self.hf.encode(check_text(text), add_special_tokens=False).ids
        return self.add_specials(ids) if add_special_tokens else ids

    def encode_to_array(self, text: str) -> np.ndarray:
        """A whole corpus -> int64 ids, encoded line by line in parallel (no specials)."""
        encodings = self.hf.encode_batch(check_text(text).splitlines(keepends=True), add_special_tokens=False)
        return np.fromiter((i for enc in encodings for i in enc.ids), dtype=np.int64)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Ids -> text; special tokens dropped unless ``skip_special_tokens=False``."""
        ids = [self.check_id(i) for i in ids]
        return self.hf.decode(ids, skip_special_tokens=skip_special_tokens)

    def id_to_token(self, token_id: int) -> str:
        """One id's text (a special token as ``<name>``)."""
        token_id = self.check_id(token_id)
        if token_id in self.special_tokens.values():
            return self.hf.id_to_token(token_id)
        return self.decode([token_id])

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: kind, specials and the ``tokenizers`` model."""
        return {"kind": self.kind, "specials": list(self.specials), "hf": json.loads(self.hf.to_str())}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BPETokenizer":
        """Rebuild from :meth:`to_dict`'s output."""
        return cls(rust_tokenizer(field(data, "hf", dict), "the 'hf' field"), field(data, "specials", list, ()))


def _counted(texts: Iterable[str], heartbeat: Heartbeat, vocab_size: int) -> Iterator[str]:
    """``texts`` unchanged, their characters counted on ``heartbeat``."""
    for text in texts:
        heartbeat.update(advance=len(text) if isinstance(text, str) else 0)
        yield text
    heartbeat.update(note=f"all read, merging pairs up to {vocab_size:,} tokens")
