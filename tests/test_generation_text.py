"""Text-level generation: streaming never splits a character, stop strings, and the CLI verb."""

from __future__ import annotations

import json

import pytest
import torch

from glassformer import EncoderDecoder, TransformerLM
from glassformer.cli import main
from glassformer.generation import TextStream, generate, generate_text, stream_text, trace_text
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.byte import ByteTokenizer
from glassformer.tokenizers.char import CharTokenizer
from glassformer.training.checkpoint import save_checkpoint

TEXT = "春天来了，花开了。夏天来了，蝉叫了。the cat sat on the mat; naïve café ☕\n"


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def char_model(tokenizer, max_len: int = 32, **kw) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(vocab_size=tokenizer.vocab_size, d_model=32, n_heads=4, n_layers=2, d_ff=64,
                         max_len=max_len, pos="rope", init_std=0.3, **kw).eval()


@pytest.mark.parametrize("tokenizer", [ByteTokenizer(), BPETokenizer.train([TEXT] * 20, 300)], ids=["byte", "bpe"])
def test_text_stream_never_splits_a_character(tokenizer):
    ids = tokenizer.encode(TEXT)
    stream = TextStream(tokenizer)
    pieces = [stream.push(i) for i in ids] + [stream.flush()]
    assert "".join(pieces) == TEXT
    assert not any("\ufffd" in p for p in pieces)
    assert sum(1 for p in pieces if p) > 10  # it really streams


def test_text_stream_holds_back_then_releases_a_multibyte_character():
    stream = TextStream(ByteTokenizer())
    assert [stream.push(b) for b in "春".encode()] == ["", "", "春"]
    assert stream.push(0x41) == "A"


def test_stream_text_equals_generate_text():
    tokenizer = CharTokenizer.from_text(TEXT, specials=["eos"])
    model = char_model(tokenizer)
    for options in (dict(), dict(do_sample=True, seed=3, top_p=0.9)):
        whole = generate_text(model, tokenizer, "春天", 20, **options)
        assert "".join(stream_text(model, tokenizer, "春天", 20, **options)) == whole
        ids = generate(model, tokenizer.encode("春天"), 20, eos_token_id=tokenizer.eos_id, **options)
        assert whole == tokenizer.decode(ids[0, 2:].tolist())


def test_stop_strings_end_generation_and_are_cut():
    tokenizer = CharTokenizer.from_text(TEXT)
    model = char_model(tokenizer)
    free = generate_text(model, tokenizer, "the", 20)
    stop = free[3:5]  # a string the model will produce
    cut = free[:free.index(stop)]
    assert generate_text(model, tokenizer, "the", 20, stop_strings=[stop]) == cut
    assert "".join(stream_text(model, tokenizer, "the", 20, stop_strings=[stop])) == cut
    with pytest.raises(ValueError, match="stop_strings need a tokenizer"):
        generate(model, tokenizer.encode("the"), 5, stop_strings=["x"])


def test_batched_text_prompts_equal_each_alone():
    tokenizer = CharTokenizer.from_text(TEXT)
    model = char_model(tokenizer)
    prompts = ["春天来了", "the cat sat on", "a"]
    together = generate_text(model, tokenizer, prompts, 12)
    assert together == [generate_text(model, tokenizer, p, 12) for p in prompts]


def test_unknown_character_is_a_clear_error():
    tokenizer = CharTokenizer.from_text(TEXT)
    with pytest.raises(ValueError, match="Z"):
        generate_text(char_model(tokenizer), tokenizer, "Zebra", 5)
    with pytest.raises(ValueError, match="prompt is empty"):
        generate_text(char_model(tokenizer), tokenizer, "", 5)


def test_encoder_decoder_text_uses_bos_and_eos_of_the_tokenizer():
    tokenizer = CharTokenizer.from_text(TEXT, specials=["pad", "bos", "eos"])
    torch.manual_seed(0)
    model = EncoderDecoder(vocab_size=tokenizer.vocab_size, d_model=32, n_heads=4, n_enc=1, n_dec=1, d_ff=64,
                           max_len=32, init_std=0.3)
    text = generate_text(model, tokenizer, "the cat", 10, num_beams=2)
    src = tokenizer.encode("the cat") + [tokenizer.eos_id]
    ids = generate(model, [src], 10, decoder_start_token_id=tokenizer.bos_id, num_beams=2,
                   eos_token_id=tokenizer.eos_id, pad_token_id=tokenizer.pad_id)
    assert text == tokenizer.decode(ids[0, 1:].tolist())
    records = trace_text(model, tokenizer, "the cat", 4)
    assert records[0]["context"] == [tokenizer.bos_id] and "chosen_text" in records[0]


# ---------------------------------------------------------------------------------------- CLI
@pytest.fixture
def checkpoint(tmp_path):
    tokenizer = CharTokenizer.from_text(TEXT, specials=["eos"])
    return save_checkpoint(tmp_path / "ckpt", char_model(tokenizer, max_len=16), tokenizer)


def test_cli_generate_greedy_stream_and_trace(checkpoint, tmp_path, capsys):
    assert main(["generate", str(checkpoint), "--prompt", "春天", "--max_new_tokens", "6"]) == 0
    greedy = capsys.readouterr().out.strip()
    assert greedy.startswith("春天") and len(greedy) >= 3
    assert main(["generate", str(checkpoint), "--prompt", "春天", "--max-new-tokens", "6", "--stream"]) == 0
    assert capsys.readouterr().out.strip() == greedy
    out = tmp_path / "trace.json"
    assert main(["generate", str(checkpoint), "--prompt", "春天", "--max_new_tokens", "6", "--trace",
                 "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.strip().splitlines()[-1] == greedy
    records = json.loads(out.read_text(encoding="utf-8"))
    assert records[0]["step"] == 1 and len(records[0]["top_k"]) == 4 and "chosen_text" in records[0]


def test_cli_generate_beams_and_samples(checkpoint, capsys):
    assert main(["generate", str(checkpoint), "--prompt", "the", "--prompt", "夏天", "--num_beams", "3",
                 "--num_return_sequences", "2", "--max_new_tokens", "5"]) == 0
    out = capsys.readouterr().out
    assert out.count("--- ") == 4
    args = ["generate", str(checkpoint), "--prompt", "the", "--sample", "--seed", "1", "--top_k", "5",
            "--temperature", "0.8", "--max_new_tokens", "8"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0
    assert capsys.readouterr().out == first


@pytest.mark.parametrize("extra, message", [
    (["--prompt", ""], "--prompt must not be empty"),
    (["--prompt", "Zebra"], "Z"),
    (["--prompt", "the cat sat on the mat"], "longer than the model allows (max_len=16)"),
    (["--prompt", "the", "--sample", "--top_p", "2"], "top_p must be a finite number > 0 and <= 1"),
    (["--prompt", "the", "--sample", "--temperature", "0"], "temperature must be a finite number > 0"),
    (["--prompt", "the", "--num_beams", "0"], "num_beams must be an int in [1, 4096]"),
    (["--prompt", "the", "--max_new_tokens", "1000000000"], "max_new_tokens=1000000000 is more than"),
    (["--prompt", "the", "--stream", "--num_beams", "2"], "--stream and --trace follow one sequence"),
])
def test_cli_generate_bad_input_is_one_line(checkpoint, capsys, extra, message):
    assert main(["generate", str(checkpoint), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("glassformer: error:") and message in err and err.count("\n") == 1
