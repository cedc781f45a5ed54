"""HFTokenizer: a pretrained Hugging Face tokenizer (tokenizer.json, BERT's vocab.txt, GPT-2's
vocab.json + merges.txt) behind glassformer's tokenizer interface. Needs only ``tokenizers``."""

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as RustTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors

from ..errors import ArgumentTypeError, BadFileError, GlassformerError, MissingFileError
from ..io.checks import check_inside
from ..io.fileio import atomic_write, check_output_file, rust_path
from ..io.loaders import MAX_CONFIG_BYTES, load_json, rust_call, rust_errors, rust_tokenizer
from .base import Tokenizer, check_text, field

# Where Hugging Face's tokenizer_config.json names each of our special roles, in order of preference.
ROLE_KEYS = {"pad": ("pad_token",), "bos": ("bos_token", "cls_token"), "eos": ("eos_token", "sep_token"),
             "mask": ("mask_token",), "unk": ("unk_token",)}
# Token strings to look for when no tokenizer_config.json names them.
ROLE_GUESSES = {"pad": ("[PAD]", "<pad>"), "bos": ("[CLS]", "<s>", "<|endoftext|>"),
                "eos": ("[SEP]", "</s>", "<|endoftext|>"), "mask": ("[MASK]", "<mask>"), "unk": ("[UNK]", "<unk>")}


class HFTokenizer(Tokenizer):
    """A ``tokenizers.Tokenizer`` (the Rust library of transformers' fast tokenizers) as a glassformer one.

    ``encode(text)`` adds the tokenizer's own specials (``[CLS] ... [SEP]`` for BERT) as transformers
    does by default, so ids match. Its padding and truncation are off (the caller batches).
    ``special_tokens``: {role: token string}; None guesses from the usual names ([PAD], [CLS], <s>...)."""

    kind = "hf"

    def __init__(self, tokenizer: RustTokenizer, special_tokens: dict[str, str] | None = None):
        if not isinstance(tokenizer, RustTokenizer):
            raise ArgumentTypeError(f"tokenizer must be a tokenizers.Tokenizer, got {type(tokenizer).__name__}")
        self.hf = tokenizer
        if special_tokens is None:
            special_tokens = _first_known(tokenizer, ROLE_GUESSES)
        self.special_strings = dict(special_tokens)
        self.special_tokens = adopt(tokenizer, self.special_strings)

    @classmethod
    def from_dir(cls, path: str | Path) -> "HFTokenizer":
        """The tokenizer of a Hugging Face model folder: ``tokenizer.json``, else ``vocab.txt`` (BERT
        WordPiece), else ``vocab.json`` + ``merges.txt`` (GPT-2 BPE); special tokens and lower-casing from
        ``tokenizer_config.json`` / ``special_tokens_map.json`` when present."""
        path = Path(path)
        settings: dict[str, Any] = {}
        for name in ("tokenizer_config.json", "special_tokens_map.json"):
            if check_inside(path, name).is_file():
                data = load_json(path / name, "tokenizer settings", MAX_CONFIG_BYTES)
                if not isinstance(data, dict):
                    raise BadFileError(f"{str(path / name)!r} must hold a JSON object, got {type(data).__name__}")
                settings.update(data)
        files = {name: check_inside(path, name) for name in ("tokenizer.json", "vocab.txt", "vocab.json", "merges.txt")}
        if files["tokenizer.json"].is_file():
            file = files["tokenizer.json"]
            tokenizer = rust_tokenizer(load_json(file, "tokenizer file"), file)
        elif files["vocab.txt"].is_file():
            lowercase = settings.get("do_lower_case", True)
            tokenizer = rust_call(lambda: wordpiece(files["vocab.txt"], lowercase=lowercase is not False),
                                  files["vocab.txt"])
        elif files["vocab.json"].is_file() and files["merges.txt"].is_file():
            tokenizer = rust_call(lambda: byte_level_bpe(files["vocab.json"], files["merges.txt"]),
                                  files["vocab.json"])
        else:
            raise MissingFileError(f"{str(path)!r} has no tokenizer.json, vocab.txt or vocab.json + merges.txt")
        named = {role: [t.get("content") if isinstance(t, dict) else t for t in map(settings.get, keys)]
                 for role, keys in ROLE_KEYS.items()}  # a token is a string or {"content": string, ...}
        return cls(tokenizer, _first_known(tokenizer, named) or None)

    @property
    def vocab_size(self) -> int:
        """The ``tokenizers`` vocabulary's size, added tokens included."""
        return self.hf.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Text -> ids, as ``transformers`` encodes: by default with the tokenizer's own specials."""
        text = check_text(text)
        with rust_errors("the tokenizer could not encode the text", GlassformerError):
            return self.hf.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = True) -> list[list[int]]:
        """Several texts at once (in parallel, in Rust); no padding."""
        if isinstance(texts, str):
            raise ArgumentTypeError("texts must be a sequence of str")
        texts = [check_text(text, f"texts[{i}]") for i, text in enumerate(texts)]  # each a str of valid Unicode
        with rust_errors("the tokenizer could not encode the text", GlassformerError):
            return [e.ids for e in self.hf.encode_batch(texts, add_special_tokens=add_special_tokens)]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Ids -> text by the tokenizer's decoder; specials dropped unless ``skip_special_tokens=False``."""
        ids = [self.check_id(i) for i in ids]
        with rust_errors("the tokenizer could not decode the text", GlassformerError):
            return self.hf.decode(ids, skip_special_tokens=skip_special_tokens)

    def id_to_token(self, token_id: int) -> str:
        """One id's token string as the vocabulary spells it."""
        return self.hf.id_to_token(self.check_id(token_id))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: kind, special token names and the ``tokenizers`` JSON."""
        return {"kind": self.kind, "special_tokens": self.special_strings, "hf": json.loads(self.hf.to_str())}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "HFTokenizer":
        """Rebuild from :meth:`to_dict`'s output."""
        specials = field(data, "special_tokens", (dict, type(None)), None)
        if specials is not None and not all(isinstance(v, str) for v in specials.values()):
            raise GlassformerError(f"tokenizer field 'special_tokens' must map roles to token strings, got {specials}")
        return cls(rust_tokenizer(field(data, "hf", dict), "the 'hf' field"), specials)

    def save_hf(self, path: str | Path) -> None:
        """Write ``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json`` into the
        folder ``path``, for ``transformers.AutoTokenizer.from_pretrained``."""
        path = Path(path)
        tokens = {f"{role}_token": token for role, token in self.special_strings.items()}
        for role, name in (("bos", "cls_token"), ("eos", "sep_token")):  # BERT calls them cls and sep
            if role in self.special_strings:
                tokens[name] = self.special_strings[role]
        config = {"tokenizer_class": "PreTrainedTokenizerFast", **tokens}
        files = {"tokenizer.json": self.hf.to_str(pretty=True), "special_tokens_map.json": json.dumps(tokens, indent=2),
                 "tokenizer_config.json": json.dumps(config, indent=2)}
        for name, text in files.items():  # all three, before any is written
            check_output_file(path / name, (), "tokenizer file", text + "\n")
        path.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            atomic_write(path / name, text + "\n", what="tokenizer file")


def adopt(tokenizer: RustTokenizer, special_strings: dict[str, str]) -> dict[str, int]:
    """Turn ``tokenizer``'s own padding and truncation off (a tokenizer.json that pads or truncates would change the
    ids of every text: glassformer cuts and batches itself) and return {role: id} of ``special_strings``; a string
    the vocabulary lacks is an error naming it."""
    tokenizer.no_padding()
    tokenizer.no_truncation()
    ids = {role: tokenizer.token_to_id(token) for role, token in special_strings.items()}
    missing = [role for role, token_id in ids.items() if token_id is None]
    if missing:
        raise GlassformerError(f"special token {missing[0]}={special_strings[missing[0]]!r} is not in the "
                               "tokenizer's vocabulary")
    return ids


def _first_known(tokenizer: RustTokenizer, candidates: dict[str, Sequence[Any]]) -> dict[str, str]:
    """{role: the first of its candidate token strings the vocabulary holds}, for the roles that have one."""
    found = {role: [t for t in tokens if isinstance(t, str) and tokenizer.token_to_id(t) is not None]
             for role, tokens in candidates.items()}
    return {role: tokens[0] for role, tokens in found.items() if tokens}


def wordpiece(vocab_file: str | Path, lowercase: bool = True) -> RustTokenizer:
    """BERT's tokenizer from its ``vocab.txt`` (the pipeline of transformers' ``BertTokenizerFast``)."""
    with rust_path(vocab_file) as vocab:
        tokenizer = RustTokenizer(models.WordPiece.from_file(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.add_special_tokens([t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
                                  if tokenizer.token_to_id(t) is not None])
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    if cls_id is not None and sep_id is not None:
        tokenizer.post_processor = processors.BertProcessing(("[SEP]", sep_id), ("[CLS]", cls_id))
    return tokenizer


def byte_level_bpe(vocab_file: str | Path, merges_file: str | Path) -> RustTokenizer:
    """GPT-2's tokenizer from ``vocab.json`` and ``merges.txt`` (byte-level BPE, no added specials)."""
    with rust_path(vocab_file) as vocab, rust_path(merges_file) as merges:
        tokenizer = RustTokenizer(models.BPE.from_file(vocab, merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer
