"""Tokenizers: char (vocabulary from the corpus, clear unknown-character errors), byte, BPE; one interface."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glassformer.errors import BadFileError
from glassformer.tokenizers import (
    BPETokenizer,
    ByteTokenizer,
    CharTokenizer,
    Tokenizer,
    make_tokenizer,
)

TEXT = "春天来了，花开了。\nSpring came; flowers opened.\n"


def test_char_vocabulary_is_sorted_set_and_roundtrips():
    tok = CharTokenizer.from_text(TEXT)
    assert tok.chars == sorted(set(TEXT))
    assert tok.vocab_size == len(set(TEXT)) and tok.special_tokens == {}
    ids = tok.encode(TEXT)
    assert ids == [sorted(set(TEXT)).index(c) for c in TEXT]
    assert tok.decode(ids) == TEXT
    np.testing.assert_array_equal(tok.encode_to_array(TEXT), ids)


def test_char_unknown_character_is_named():
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(ValueError, match=r"character 'z' \(U\+007A\) at position 2 is not in"):
        tok.encode("abz")
    with pytest.raises(ValueError, match=r"character '龍'"):
        tok.encode_to_array("ab龍")


def test_char_unk_and_specials_come_first():
    tok = CharTokenizer.from_text("ba", specials=["pad", "bos", "eos", "unk"])
    assert tok.special_tokens == {"pad": 0, "bos": 1, "eos": 2, "unk": 3}
    assert tok.encode("abz") == [4, 5, 3]
    assert tok.encode_to_array("abz").tolist() == [4, 5, 3]
    assert tok.encode("ab", add_special_tokens=True) == [1, 4, 5, 2]
    assert tok.decode([1, 4, 5, 2]) == "ab"
    assert tok.decode([1, 4, 5, 2], skip_special_tokens=False) == "<bos>ab<eos>"
    with pytest.raises(ValueError, match="token id 9 is out of range"):
        tok.decode([9])


def test_char_vocabulary_of_specials_only_maps_every_character_to_unk():
    tok = CharTokenizer([], specials=["unk"])  # the vectorised lookup once indexed an empty table here
    assert tok.encode("ab\ud800") == tok.encode_to_array("ab\ud800").tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match=r"character 'a' \(U\+0061\) at position 0 .* vocabulary of 0 characters"):
        CharTokenizer([]).encode("a")


def test_bad_specials_are_rejected():
    with pytest.raises(ValueError, match="unknown special token"):
        CharTokenizer.from_text("ab", specials=["cls"])
    with pytest.raises(TypeError, match="list of names"):
        ByteTokenizer(specials="pad")


def test_byte_tokenizer_never_unknown():
    tok = ByteTokenizer(specials=["pad", "eos"])
    assert tok.vocab_size == 258 and tok.special_tokens == {"pad": 256, "eos": 257}
    ids = tok.encode("春a")
    assert ids == [0xE6, 0x98, 0xA5, 0x61]
    assert tok.decode(ids + [257]) == "春a"
    assert tok.decode(ids[:2]) == "\ufffd"  # a character cut in the middle
    assert tok.tokens([0x61, 0xE6, 257]) == ["a", "<0xE6>", "<eos>"]


def test_bpe_trains_roundtrips_and_saves(tmp_path):
    texts = ["the cat sat on the mat. 春天来了，花开了。"] * 30 + ["a dog, the dog!"] * 30
    tok = BPETokenizer.train(texts, vocab_size=300, specials=["pad", "eos", "mask"])
    assert tok.special_tokens == {"pad": 0, "eos": 1, "mask": 2}
    assert 258 < tok.vocab_size <= 300
    sample = "the cat and the dog: 夏天 ü"
    ids = tok.encode(sample)
    assert len(ids) < len(sample.encode("utf-8"))  # merges happened
    assert tok.decode(ids) == sample
    tok.save(tmp_path / "tok.json")
    again = Tokenizer.load(tmp_path / "tok.json")
    assert isinstance(again, BPETokenizer) and again.encode(sample) == ids
    assert again.special_tokens == tok.special_tokens
    with pytest.raises(ValueError, match=r"vocab_size must be an int in \[259, 4194304\], got 100"):
        BPETokenizer.train(texts, vocab_size=100, specials=["pad", "eos", "mask"])


@pytest.mark.parametrize("tok", [CharTokenizer.from_text(TEXT, ["pad", "unk"]), ByteTokenizer(["bos"])])
def test_save_load_roundtrip(tmp_path, tok):
    tok.save(tmp_path / "t.json")
    again = Tokenizer.load(tmp_path / "t.json")
    assert type(again) is type(tok) and again.to_dict() == tok.to_dict()
    assert again.encode(TEXT) == tok.encode(TEXT)


def test_load_unknown_kind(tmp_path):
    (tmp_path / "t.json").write_text('{"kind": "sentencepiece"}', encoding="utf-8")
    with pytest.raises(ValueError, match="unknown tokenizer kind 'sentencepiece'"):
        Tokenizer.load(tmp_path / "t.json")


def test_make_tokenizer():
    assert make_tokenizer("char", ["ba", "c"]).chars == ["a", "b", "c"]
    assert make_tokenizer("byte", [], ["eos"]).vocab_size == 257
    with pytest.raises(ValueError, match="needs a vocab_size"):
        make_tokenizer("bpe", ["abc"])
    with pytest.raises(ValueError, match="tokenizer must be one of"):
        make_tokenizer("word", ["abc"])


@settings(max_examples=50, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_char_and_byte_roundtrip_any_text(text):
    char = CharTokenizer.from_text(text)
    assert char.decode(char.encode(text)) == text
    assert char.encode_to_array(text).tolist() == char.encode(text)
    assert ByteTokenizer().decode(ByteTokenizer().encode(text)) == text


# ---------------------------------------------------------------- a checkpoint's tokenizer.json as found
def _edited_bpe(tmp_path, edit) -> tuple[BPETokenizer, Path]:
    """A trained BPE tokenizer, and a tokenizer.json of it that ``edit`` changed (as a user or a tool could)."""
    import json

    tok = BPETokenizer.train(["the quick brown fox jumps over the lazy dog\n" * 20], vocab_size=300, specials=["pad"])
    data = tok.to_dict()
    edit(data["hf"])
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return tok, path


@pytest.mark.parametrize("setting", [
    {"truncation": {"direction": "Right", "max_length": 3, "strategy": "LongestFirst", "stride": 0}},
    {"padding": {"strategy": {"Fixed": 40}, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 0,
                 "pad_type_id": 0, "pad_token": "<pad>"}},
])
def test_a_tokenizer_json_that_truncates_or_pads_encodes_as_ours(tmp_path, setting):
    """Issue 47: its padding or truncation changed the ids of every text (a prompt cut to 3 tokens, a corpus
    padded to 40 per line), so eval, generate and training computed something else; glassformer cuts itself."""
    tok, path = _edited_bpe(tmp_path, lambda hf: hf.update(setting))
    loaded = Tokenizer.load(path)
    text = "the lazy dog jumps over the quick brown fox\nand again\n"
    assert loaded.encode(text) == tok.encode(text) and len(tok.encode(text)) > 3
    assert loaded.encode_to_array(text).tolist() == tok.encode_to_array(text).tolist()


def test_a_tokenizer_json_with_an_id_past_its_vocabulary_is_refused(tmp_path):
    """An id the vocabulary's size does not cover fits no model row, and wrapped in a uint16 token cache."""
    _, path = _edited_bpe(tmp_path, lambda hf: hf["model"]["vocab"].update(h=70_000))
    with pytest.raises(BadFileError, match=r"tokenizer\.json: the 'hf' field: token 'h' has id 70000, past the "
                                           r"vocabulary's \d+ ids"):
        Tokenizer.load(path)
