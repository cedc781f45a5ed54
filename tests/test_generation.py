"""generate(): strategies against brute-force references, batching, the context window, errors, traces."""

from __future__ import annotations

import pytest
import torch

from glassformer import EncoderDecoder, ModelConfig, TransformerLM
from glassformer.generation import (
    DecoderOnly,
    Encoder,
    EncoderDecoderModel,
    fill_mask,
    generate,
    make_processors,
    trace_generation,
)
from glassformer.generation.embeddings import encode_texts, sentence_embeddings
from glassformer.generation.processors import MinP, NoRepeatNGram, RepetitionPenalty, Temperature, TopK, TopP

V = 30


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def lm(max_len: int = 32, **kw) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(vocab_size=V, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_len=max_len,
                         init_std=0.3, **kw).eval()


def encdec(**kw) -> EncoderDecoder:
    torch.manual_seed(0)
    return EncoderDecoder(vocab_size=V, d_model=32, n_heads=4, n_enc=2, n_dec=2, d_ff=64, max_len=32,
                          init_std=0.3, **kw).eval()


@torch.inference_mode()
def brute_force_greedy(model, ids: list[int], n: int, window: int | None = None, prefix: bool = False):
    """Recompute the whole (windowed) context at every step and take the argmax."""
    seq = list(ids)
    for _ in range(n):
        context = seq[-window:] if window else seq
        kw = {"prefix_len": max(0, len(ids) - (len(seq) - len(context)))} if prefix else {}
        seq.append(int(model(torch.tensor([context]), **kw)[0, -1].argmax()))
    return seq


# ---------------------------------------------------------------------------------------- greedy references
@pytest.mark.parametrize("kw", [dict(pos="rope", n_kv_heads=2), dict(pos="alibi"), dict(pos="learned"),
                                dict(pos="sinusoidal", attn="prefix")], ids=["rope-gqa", "alibi", "learned", "prefix"])
def test_greedy_equals_brute_force_with_and_without_cache(kw):
    model = lm(**kw)
    prompt = [3, 14, 15, 9, 2]
    expected = brute_force_greedy(model, prompt, 8, prefix=kw.get("attn") == "prefix")
    assert generate(model, prompt, 8).tolist() == [expected]
    assert generate(model, prompt, 8, use_cache=False).tolist() == [expected]
    assert generate(model, torch.tensor(prompt), 8).tolist() == [expected]


def test_prefix_lm_prompt_is_encoded_bidirectionally():
    """With prefix_len=0 the prompt is causal; by default the whole prompt is the (bidirectional) prefix."""
    model = lm(attn="prefix")
    prompt = [3, 14, 15, 9, 2, 6]
    bidirectional = trace_generation(model, prompt, 1)[0]["top_k"]
    causal = trace_generation(model, prompt, 1, prefix_len=0)[0]["top_k"]
    with torch.inference_mode():
        reference = model(torch.tensor([prompt]), prefix_len=len(prompt))[0, -1].softmax(-1).max()
    assert bidirectional[0][1] == pytest.approx(float(reference), abs=1e-6)
    assert bidirectional != causal
    assert generate(model, prompt, 6, prefix_len=2).tolist() == [brute_force_greedy_prefix(model, prompt, 6, 2)]


@torch.inference_mode()
def brute_force_greedy_prefix(model, prompt, n, prefix_len):
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(model(torch.tensor([seq]), prefix_len=prefix_len)[0, -1].argmax()))
    return seq


@torch.inference_mode()
def test_encoder_decoder_greedy_equals_brute_force():
    model = encdec(pos="rope")
    src = torch.tensor([[4, 5, 6, 7, 8]])
    tgt = [2]
    for _ in range(7):
        tgt.append(int(model(src, torch.tensor([tgt]))[0, -1].argmax()))
    assert generate(model, src, 7, decoder_start_token_id=2).tolist() == [tgt]
    assert generate(model, src, 7, decoder_start_token_id=2, use_cache=False).tolist() == [tgt]


# ---------------------------------------------------------------------------------------- batching
@pytest.mark.parametrize("kw", [dict(pos="learned"), dict(pos="rope"), dict(pos="alibi", n_kv_heads=1),
                                dict(pos="sinusoidal"), dict(pos="rope", attn="prefix")],
                         ids=["learned", "rope", "alibi-mqa", "sinusoidal", "prefix"])
def test_left_padded_batch_rows_equal_each_prompt_alone(kw):
    model = lm(**kw)
    prompts = [[5], [7, 1, 8, 2, 8, 1, 8], [3, 14, 15]]
    options = dict(repetition_penalty=1.3, no_repeat_ngram_size=2)
    batch = generate(model, prompts, 9, pad_token_id=0, **options)
    assert batch.shape == (3, 7 + 9)
    for row, prompt in zip(batch.tolist(), prompts, strict=True):
        assert row[7 - len(prompt):] == generate(model, prompt, 9, **options)[0].tolist()
        assert row[:7 - len(prompt)] == [0] * (7 - len(prompt))


def test_tensor_batch_with_attention_mask_equals_list_batch():
    model = lm(pos="rope")
    ids = torch.tensor([[0, 0, 4, 5], [6, 7, 8, 9]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    expected = generate(model, [[4, 5], [6, 7, 8, 9]], 5)
    assert torch.equal(generate(model, ids, 5, attention_mask=mask), expected)
    assert torch.equal(generate(model, ids, 5, pad=mask == 0), expected)


def test_encoder_decoder_batch_of_different_source_lengths():
    model = encdec(pos="alibi")
    sources = [[4, 5, 6, 7, 8, 9], [10, 11]]
    batch = generate(model, sources, 6, decoder_start_token_id=2)
    for row, src in zip(batch.tolist(), sources, strict=True):
        assert row == generate(model, [src], 6, decoder_start_token_id=2)[0].tolist()


# ---------------------------------------------------------------------------------------- context window
@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_generation_past_max_len_slides_the_window(pos):
    """Beyond max_len the model sees the last max_len tokens, positions counted from the window start."""
    model = lm(max_len=8, pos=pos)
    prompt = [1, 2, 3, 4, 5, 6]
    expected = brute_force_greedy(model, prompt, 7, window=8)
    assert generate(model, prompt, 7).tolist() == [expected]
    assert generate(model, prompt, 7, use_cache=False).tolist() == [expected]


# ---------------------------------------------------------------------------------------- sampling
def test_seeded_sampling_is_reproducible_and_cache_independent():
    model = lm(pos="rope")
    kw = dict(do_sample=True, temperature=1.5, top_k=10, top_p=0.9, num_return_sequences=3)
    a = generate(model, [[1, 2, 3], [4, 5, 6]], 12, seed=7, **kw)
    assert a.shape == (6, 15)
    assert torch.equal(a, generate(model, [[1, 2, 3], [4, 5, 6]], 12, seed=7, **kw))
    assert torch.equal(a, generate(model, [[1, 2, 3], [4, 5, 6]], 12, seed=7, use_cache=False, **kw))
    assert not torch.equal(a, generate(model, [[1, 2, 3], [4, 5, 6]], 12, seed=8, **kw))
    assert len({tuple(r) for r in a[:3].tolist()}) > 1  # the three samples of a prompt differ


def test_sampling_follows_the_distribution():
    """top_k=1 sampling is greedy; min_p=1 keeps only the most likely token too."""
    model = lm(pos="rope")
    greedy = generate(model, [1, 2, 3], 10)
    assert torch.equal(generate(model, [1, 2, 3], 10, do_sample=True, top_k=1, seed=0), greedy)
    assert torch.equal(generate(model, [1, 2, 3], 10, do_sample=True, min_p=1.0, seed=0), greedy)


def test_eos_ends_rows_and_later_tokens_are_padding():
    model = lm(pos="rope")
    free = generate(model, [[1, 2, 3], [9, 8, 7]], 10)
    eos = int(free[0, 5])  # the third new token of row 0
    out = generate(model, [[1, 2, 3], [9, 8, 7]], 10, eos_token_id=eos, pad_token_id=29)
    first = out[0, 3:].tolist().index(eos)
    assert first <= 2 and set(out[0, 3 + first + 1:].tolist()) <= {29}
    single = generate(model, [1, 2, 3], 10, eos_token_id=eos)
    assert single.shape[1] == 3 + first + 1  # generation stopped once every row had ended


# ---------------------------------------------------------------------------------------- processors vs HF
def test_processors_match_hugging_face():
    lp = pytest.importorskip("transformers.generation.logits_process")
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(3, 50, generator=g) * 3
    ids = torch.randint(0, 50, (3, 12), generator=g)
    pairs = [(Temperature(0.7), lp.TemperatureLogitsWarper(0.7)), (TopK(5), lp.TopKLogitsWarper(5)),
             (TopP(0.8), lp.TopPLogitsWarper(0.8)), (MinP(0.1), lp.MinPLogitsWarper(0.1)),
             (RepetitionPenalty(1.4), lp.RepetitionPenaltyLogitsProcessor(1.4)),
             (NoRepeatNGram(2), lp.NoRepeatNGramLogitsProcessor(2)),
             (NoRepeatNGram(1), lp.NoRepeatNGramLogitsProcessor(1))]
    ids[0, 5:7] = ids[0, -1:]  # make sure some 2-gram repeats
    for ours, theirs in pairs:
        torch.testing.assert_close(ours(ids, scores.clone()), theirs(ids, scores.clone()), rtol=0, atol=0)


def test_padding_never_counts_as_a_token_for_processors():
    scores = torch.zeros(1, 5)
    ids = torch.tensor([[5, 5, 2]])  # 5 = vocab size: the padding marker
    assert RepetitionPenalty(2.0)(ids, scores - 1).tolist() == [[-1, -1, -2, -1, -1]]
    assert torch.isfinite(NoRepeatNGram(2)(ids, scores)).all()


def test_greedy_ignores_sampling_filters_like_hugging_face():
    assert len(make_processors(do_sample=False, temperature=0.5, top_k=3, top_p=0.5)) == 0
    assert len(make_processors(do_sample=True, temperature=0.5, top_k=3, top_p=0.5, min_p=0.1)) == 4


# ---------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("ids, kw, error, match", [
    ([], {}, TypeError, "list of ids"),
    ([[1, 2], []], {}, ValueError, "empty prompt"),
    (torch.zeros(1, 0, dtype=torch.long), {}, ValueError, "empty prompt"),
    (list(range(1, 30)) + [1, 2, 3, 4], {}, ValueError, r"longer than the model allows \(max_len=32\)"),
    ([1, 2], dict(do_sample=True, top_p=0.0), ValueError, r"top_p must be a finite number > 0 and <= 1, got 0.0"),
    ([1, 2], dict(top_p=1.5), ValueError, r"top_p must be a finite number > 0 and <= 1, got 1.5"),
    ([1, 2], dict(do_sample=True, temperature=0), ValueError, "temperature must be a finite number > 0"),
    ([1, 2], dict(num_beams=0), ValueError, r"num_beams must be an int in \[1, 4096\], got 0"),
    ([1, 2], dict(num_return_sequences=2), ValueError, "greedy decoding gives one sequence"),
    ([1, 2], dict(num_beams=2, num_return_sequences=3), ValueError, "must be <= num_beams=2"),
    ([1, 2], dict(eos_token_id=30), ValueError, "token id 30 in eos_token_id is out of range"),
    ([1, 99], {}, ValueError, "token id 99 in ids is out of range"),
    (torch.tensor([[1, 2, 0]]), dict(pad=torch.tensor([[False, False, True]])), ValueError, "left of each row"),
    ([1, 2], dict(max_new_tokens=0), ValueError, r"max_new_tokens must be an int in \[1, 1000000\]"),
    ([1, 2], dict(max_new_tokens=10**9), ValueError, "max_new_tokens=1000000000 is more than glassformer generates"),
    ([1.0, 2.0], {}, TypeError, "list of ids"),
])
def test_bad_input_is_a_clear_error(ids, kw, error, match):
    with pytest.raises(error, match=match):
        generate(lm(), ids, **({"max_new_tokens": 3} | kw))


def test_model_kind_errors():
    with pytest.raises(ValueError, match="encoder-only"):
        generate(lm(attn="bidirectional"), [1, 2], 3)
    with pytest.raises(ValueError, match="decoder_start_token_id"):
        generate(encdec(), [1, 2], 3)
    with pytest.raises(ValueError, match="only meaningful with attn='prefix'"):
        generate(lm(), [1, 2], 3, prefix_len=1)
    with pytest.raises(ValueError, match="prefix_len=.* out of range"):
        generate(lm(attn="prefix"), [1, 2], 3, prefix_len=3)


def test_per_row_prefix_lengths_with_left_padding_equal_each_row_alone():
    model = lm(attn="prefix", pos="rope")
    prompts, prefix = [[3, 14, 15, 9], [2, 6]], torch.tensor([2, 1])
    batched = generate(model, prompts, 5, prefix_len=prefix, pad_token_id=0)
    for i, (prompt, p) in enumerate(zip(prompts, prefix.tolist(), strict=True)):
        alone = generate(model, [prompt], 5, prefix_len=p)
        assert batched[i, 4 - len(prompt):].tolist() == alone[0].tolist()
    with pytest.raises(ValueError, match=r"prefix_len=\[1, 3\] is out of range"):
        generate(model, prompts, 2, prefix_len=torch.tensor([1, 3]))  # row 2 has 2 real tokens
    with pytest.raises(ValueError, match="one length per row"):
        generate(model, prompts, 2, prefix_len=torch.tensor([1, 1, 1]))
    with pytest.raises(TypeError, match="prefix_len must be an int"):
        generate(model, prompts, 2, prefix_len=1.5)


@pytest.mark.parametrize("kw, name", [
    (dict(do_sample=True, temperature=float("nan")), "temperature"),
    (dict(do_sample=True, temperature=float("inf")), "temperature"),
    (dict(top_p=float("nan")), "top_p"),
    (dict(do_sample=True, min_p=float("inf")), "min_p"),
    (dict(repetition_penalty=float("nan")), "repetition_penalty"),
    (dict(num_beams=2, length_penalty=float("inf")), "length_penalty"),
    (dict(do_sample=True, top_k=2.0), "top_k"),
    (dict(no_repeat_ngram_size=-1), "no_repeat_ngram_size"),
])
def test_nan_inf_and_wrong_types_in_options_are_refused(kw, name):
    with pytest.raises(ValueError, match=f"^{name} must be an? "):
        generate(lm(), [1, 2], 3, **kw)


def test_models_are_checked_against_the_generation_protocol():
    assert isinstance(lm(), DecoderOnly) and isinstance(encdec(), EncoderDecoderModel)
    assert isinstance(lm(attn="bidirectional"), Encoder) and not isinstance(encdec(), DecoderOnly)
    with pytest.raises(TypeError, match="DecoderOnly.*lacks config, new_cache, hidden_states, logits"):
        generate(torch.nn.Linear(2, 2), [1, 2], 3)


def test_generate_restores_training_mode_and_leaves_no_grad_state():
    model = lm(pos="rope").train()
    generate(model, [1, 2, 3], 3)
    assert model.training and torch.is_grad_enabled()


# ---------------------------------------------------------------------------------------- trace
@torch.inference_mode()
def test_trace_records_the_lessons_fields_and_matches_recomputation():
    """The tiny char LM lesson: context 16, prompt 5, 12 greedy steps (the window slides at step 12)."""
    model = TransformerLM(ModelConfig.preset("tiny-char", init_std=0.3)).eval()
    prompt = [1, 2, 3, 4, 5]
    records = trace_generation(model, prompt, 12, top_k=4)
    assert [r["step"] for r in records] == list(range(1, 13))
    assert len(records[-1]["context"]) == 16 and records[-1]["context"][-1] == records[-2]["chosen"]
    seq = list(prompt)
    for r in records:
        assert r["context"] == seq[-16:]
        probs = model(torch.tensor([seq[-16:]]))[0, -1].softmax(-1)
        top_p, top_i = probs.topk(4)
        assert [i for i, _ in r["top_k"]] == top_i.tolist()
        assert r["chosen"] == top_i[0] and abs(r["chosen_probability"] - float(top_p[0])) < 1e-5
        assert [p for _, p in r["top_k"]] == pytest.approx(top_p.tolist(), abs=1e-5)
        seq.append(r["chosen"])


def test_trace_of_sampling_uses_the_processed_distribution():
    model = lm(pos="rope")
    records = trace_generation(model, [1, 2, 3], 5, top_k=6, do_sample=True, sample_top_k=3, seed=1)
    for r in records:
        assert [p for _, p in r["top_k"]][3:] == [0.0, 0.0, 0.0]  # only 3 candidates survive top-k=3
        assert r["chosen"] in [i for i, _ in r["top_k"][:3]]
    with pytest.raises(ValueError, match="one prompt"):
        trace_generation(model, [[1, 2], [3, 4]], 2)


# ---------------------------------------------------------------------------------------- fill_mask
@torch.inference_mode()
def test_fill_mask_gives_top_k_per_mask_position():
    model = lm(attn="bidirectional", pos="learned")
    ids = torch.tensor([[4, 29, 6, 29], [7, 8, 29, 9]])
    found = fill_mask(model, ids, mask_token_id=29, top_k=3)
    assert [(f["row"], f["position"]) for f in found] == [(0, 1), (0, 3), (1, 2)]
    probs = model(ids).softmax(-1)
    for f in found:
        top_p, top_i = probs[f["row"], f["position"]].topk(3)
        assert [i for i, _ in f["candidates"]] == top_i.tolist()
        assert [p for _, p in f["candidates"]] == pytest.approx(top_p.tolist(), abs=1e-6)
    assert fill_mask(model, ids, 29, 3) == found
    with pytest.raises(ValueError, match="no mask token"):
        fill_mask(model, [[4, 5]], mask_token_id=29)
    with pytest.raises(ValueError, match="attn='bidirectional'"):
        fill_mask(lm(), [[4, 29]], mask_token_id=29)


# ---------------------------------------------------------------------------------------- embeddings
def test_sentence_embeddings_ignore_padding_and_keep_the_final_eos():
    from glassformer.tokenizers import CharTokenizer

    tokenizer = CharTokenizer.from_text("abcdef", specials=["pad", "bos", "eos"])
    rows = encode_texts(tokenizer, ["abcdef", "ab"], max_len=4)
    assert rows == [[tokenizer.bos_id, *tokenizer.encode("ab"), tokenizer.eos_id],
                    [tokenizer.bos_id, *tokenizer.encode("ab"), tokenizer.eos_id]]
    model = lm(attn="bidirectional", pos="learned").train()
    texts = ["abc", "a", "fedcba"]
    together = sentence_embeddings(model, tokenizer, texts, batch_size=3)  # padded batch
    alone = torch.cat([sentence_embeddings(model, tokenizer, [t]) for t in texts])
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=0)
    assert together.shape == (3, 32) and model.training  # eval inside, training mode restored
    torch.testing.assert_close(together.norm(dim=-1), torch.ones(3))
    with pytest.raises(TypeError, match="TransformerLM"):
        sentence_embeddings(torch.nn.Linear(2, 2), tokenizer, texts)
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        sentence_embeddings(model, tokenizer, texts, batch_size=0)


def test_generated_ids_feed_a_training_forward():
    """generate() runs under inference mode, but its result is an ordinary tensor: it can be fed to a
    forward with autograd on (inference tensors cannot)."""
    model = TransformerLM(vocab_size=20, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    out = generate(model, torch.tensor([[1, 2, 3]]), 4)
    assert not out.is_inference()
    loss = model(out).logsumexp(-1).mean()
    loss.backward()
    assert model.embeddings.tok.weight.grad is not None
