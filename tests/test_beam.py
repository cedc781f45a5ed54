"""Beam search gives Hugging Face's sequences for the same weights (GPT-2 with random weights)."""

from __future__ import annotations

import pytest
import torch

from glassformer import EncoderDecoder, TransformerLM
from glassformer.generation import generate

transformers = pytest.importorskip("transformers")

V = 24
PAD = 3  # not 0: Hugging Face beam search fills with eos when pad_token_id is 0 (falsy)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def gpt2_pair(seed: int = 0):
    """A random Hugging Face GPT-2 with peaked (init std 0.3) distributions, and the same weights in ours
    (converted with glassformer.interop.from_hf, so the test does not depend on parameter names)."""
    from glassformer.interop.hf import from_hf

    torch.manual_seed(seed)
    hf_config = transformers.GPT2Config(vocab_size=V, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                        initializer_range=0.3, bos_token_id=0, eos_token_id=1)
    hf = transformers.GPT2LMHeadModel(hf_config).eval()
    ours = from_hf(hf).eval()
    assert isinstance(ours, TransformerLM) and ours.config.max_len == 32
    return hf, ours


PROMPTS = torch.tensor([[5, 9, 2, 7], [3, 3, 11, 20]])


def test_converted_gpt2_gives_the_same_logits():
    hf, ours = gpt2_pair()
    with torch.inference_mode():
        torch.testing.assert_close(ours(PROMPTS), hf(PROMPTS).logits, rtol=0, atol=2e-5)


def hf_generate(hf, ids, **kw):
    with torch.inference_mode():
        return hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, **kw)


@pytest.mark.parametrize("eos", [5, 20])
@pytest.mark.parametrize("length_penalty", [1.0, 0.0, 2.0, -0.5])
@pytest.mark.parametrize("early_stopping", [False, True, "never"])
def test_beam_search_matches_hugging_face(length_penalty, early_stopping, eos):
    hf, ours = gpt2_pair()
    kw = dict(num_beams=4, max_new_tokens=9, eos_token_id=eos, pad_token_id=PAD, length_penalty=length_penalty,
              early_stopping=early_stopping, num_return_sequences=3)
    expected = hf_generate(hf, PROMPTS, **kw)
    got = generate(ours, PROMPTS, **kw)
    assert got.tolist() == expected.tolist()


@pytest.mark.parametrize("eos", [5, 20])
def test_some_beams_end_with_eos(eos):
    """The comparisons above exercise EOS handling: with these weights beams end early and the
    shorter hypotheses are filled with pad_token_id."""
    _, ours = gpt2_pair()
    out = generate(ours, PROMPTS, num_beams=4, max_new_tokens=9, eos_token_id=eos, pad_token_id=PAD,
                   num_return_sequences=3)[:, PROMPTS.shape[1]:]
    ended = (out == eos).any(dim=1)
    assert bool(ended.any())
    for row in out[ended].tolist():
        assert set(row[row.index(eos) + 1:]) <= {PAD}


@pytest.mark.parametrize("kw", [dict(repetition_penalty=1.5), dict(no_repeat_ngram_size=2),
                                dict(eos_token_id=[1, 4])], ids=["repetition", "ngram", "two-eos"])
def test_beam_search_with_processors_matches_hugging_face(kw):
    hf, ours = gpt2_pair(seed=1)
    kw = dict(num_beams=3, max_new_tokens=8, pad_token_id=PAD, **({"eos_token_id": 1} | kw))
    assert generate(ours, PROMPTS, **kw).tolist() == hf_generate(hf, PROMPTS, **kw).tolist()


@pytest.mark.parametrize("kw", [dict(), dict(repetition_penalty=1.3, no_repeat_ngram_size=2)],
                         ids=["plain", "processors"])
def test_greedy_matches_hugging_face(kw):
    hf, ours = gpt2_pair(seed=2)
    kw = dict(max_new_tokens=10, eos_token_id=1, pad_token_id=PAD, **kw)
    assert generate(ours, PROMPTS, **kw).tolist() == hf_generate(hf, PROMPTS, **kw).tolist()


def test_left_padded_beam_search_matches_hugging_face():
    hf, ours = gpt2_pair(seed=3)
    ids = torch.tensor([[0, 0, 5, 9], [3, 3, 11, 20]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    kw = dict(num_beams=3, max_new_tokens=7, eos_token_id=1, pad_token_id=PAD)
    with torch.inference_mode():
        expected = hf.generate(ids, attention_mask=mask, do_sample=False, **kw)
    assert generate(ours, ids, attention_mask=mask, **kw).tolist() == expected.tolist()


def test_beam_rows_equal_beams_alone_and_cache_equals_recomputation():
    _, ours = gpt2_pair(seed=4)
    prompts = [[5, 9], [3, 3, 11, 20, 8]]
    kw = dict(num_beams=3, max_new_tokens=6, eos_token_id=1, pad_token_id=PAD, num_return_sequences=2)
    batched = generate(ours, prompts, **kw)
    assert torch.equal(batched, generate(ours, prompts, use_cache=False, **kw))
    for i, p in enumerate(prompts):
        alone = generate(ours, [p], **kw)
        rows = batched[2 * i:2 * i + 2, 5 - len(p):]
        width = alone.shape[1]  # the batch may be longer: its extra columns are padding
        assert rows[:, :width].tolist() == alone.tolist()
        assert bool((rows[:, width:] == PAD).all())


def test_encoder_decoder_beam_search_rows_alone_and_without_cache():
    torch.manual_seed(0)
    model = EncoderDecoder(vocab_size=V, d_model=32, n_heads=4, n_enc=2, n_dec=2, d_ff=64, max_len=32,
                           pos="rope", n_kv_heads=2, init_std=0.3)
    sources = [[4, 5, 6, 7, 8], [9, 10]]
    kw = dict(num_beams=3, max_new_tokens=6, eos_token_id=1, pad_token_id=PAD, decoder_start_token_id=2,
              num_return_sequences=2)
    batched = generate(model, sources, **kw)
    assert torch.equal(batched, generate(model, sources, use_cache=False, **kw))
    for i, s in enumerate(sources):
        alone = generate(model, [s], **kw)
        assert batched[2 * i:2 * i + 2, :alone.shape[1]].tolist() == alone.tolist()
    assert bool((batched[:, 0] == 2).all())


@pytest.mark.parametrize("kw", [dict(num_beams=1), dict(num_beams=3, num_return_sequences=2),
                                dict(num_beams=4, length_penalty=2.0, early_stopping=True),
                                dict(num_beams=3, early_stopping="never", no_repeat_ngram_size=2)],
                         ids=["greedy", "beams", "lp-early", "never-ngram"])
@pytest.mark.parametrize("eos", [22, 4])
def test_encoder_decoder_generate_matches_hugging_face_bart(kw, eos):
    """A random BART converted with glassformer.interop.from_hf: same sequences as Hugging Face."""
    from glassformer.interop.hf import from_hf

    torch.manual_seed(0)
    config = transformers.BartConfig(
        vocab_size=V, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=32,
        init_std=0.3, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
        forced_eos_token_id=None, forced_bos_token_id=None)
    hf = transformers.BartForConditionalGeneration(config).eval()
    ours = from_hf(hf)
    src = torch.tensor([[0, 5, 9, 7, 11, 2], [0, 13, 6, 2, 1, 1]])  # the second source is right-padded
    kw = dict(max_new_tokens=8, eos_token_id=eos, pad_token_id=PAD, decoder_start_token_id=2, **kw)
    with torch.inference_mode():
        expected = hf.generate(src, attention_mask=(src != 1).long(), do_sample=False, **kw)
    assert generate(ours, src, attention_mask=(src != 1).long(), **kw).tolist() == expected.tolist()
