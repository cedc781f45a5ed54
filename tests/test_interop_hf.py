"""glassformer vs transformers on random tiny models of each family: logits, export, attention, generation."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from glassformer import ModelConfig, TransformerLM  # noqa: E402
from glassformer.interop import from_hf, model_from_hf_state, to_hf  # noqa: E402

V = 97
SMALL = dict(vocab_size=V, bos_token_id=1, eos_token_id=2, pad_token_id=0)
CONFIGS = {
    "GPT2LMHeadModel": lambda: transformers.GPT2Config(n_embd=32, n_head=4, n_layer=2, n_positions=64, **SMALL),
    "GPTNeoXForCausalLM": lambda: transformers.GPTNeoXConfig(  # sequential residual, whole-head rotary
        hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=48, max_position_embeddings=64,
        use_parallel_residual=False, rope_parameters={"rope_type": "default", "rope_theta": 500.0,
                                                      "partial_rotary_factor": 1.0}, **SMALL),
    "LlamaForCausalLM": lambda: transformers.LlamaConfig(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2, intermediate_size=48,
        max_position_embeddings=64, rope_theta=500.0, rms_norm_eps=1e-6, **SMALL),
    "BertForMaskedLM": lambda: transformers.BertConfig(
        hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=48, max_position_embeddings=64,
        **SMALL),
    "BertModel": lambda: transformers.BertConfig(
        hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=48, max_position_embeddings=64,
        hidden_act="gelu_new", **SMALL),
    "BartForConditionalGeneration": lambda: transformers.BartConfig(
        d_model=32, encoder_attention_heads=4, decoder_attention_heads=4, encoder_layers=2, decoder_layers=2,
        encoder_ffn_dim=48, decoder_ffn_dim=48, max_position_embeddings=64, scale_embedding=True,
        decoder_start_token_id=2, forced_eos_token_id=None, **SMALL),
}
CAUSAL = ("GPT2LMHeadModel", "GPTNeoXForCausalLM", "LlamaForCausalLM")


def tiny_hf(name: str, seed: int = 0, attn: str = "sdpa"):
    """A random HF model; biases and norm gains perturbed so that every tensor matters."""
    torch.manual_seed(seed)
    model = getattr(transformers, name)._from_config(CONFIGS[name](), attn_implementation=attn).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
        if hasattr(model, "final_logits_bias"):
            model.final_logits_bias.normal_()
    return model


def hf_out(hf, name, ids, mask, dec=None, dec_mask=None, positions=None):
    with torch.no_grad():
        if name.startswith("Bart"):
            return hf(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, decoder_attention_mask=dec_mask).logits
        out = hf(input_ids=ids, attention_mask=mask, position_ids=positions)
        return out.last_hidden_state if name == "BertModel" else out.logits


def our_out(model, name, ids, mask, dec=None, dec_mask=None, positions=None):
    with torch.no_grad():
        if name.startswith("Bart"):
            return model(ids, dec, src_pad=mask == 0, tgt_pad=dec_mask == 0)
        if name == "BertModel":
            return model.hidden_states(ids, pad=mask == 0)
        return model(ids, pad=mask == 0, positions=positions)


def batch(left: bool = False):
    """Two rows of 12 tokens, the second with 4 padding slots (left or right) and its attention mask."""
    ids = torch.randint(3, V, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    if left:
        mask[1, :4] = 0
    else:
        mask[1, 8:] = 0
    return ids.masked_fill(mask == 0, 0), mask


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_match_with_padding(name):
    hf = tiny_hf(name)
    model = from_hf(hf)
    ids, mask = batch()
    dec = torch.randint(3, V, (2, 7))
    dec_mask = torch.ones_like(dec)
    dec_mask[0, 5:] = 0
    ref, ours = hf_out(hf, name, ids, mask, dec, dec_mask), our_out(model, name, ids, mask, dec, dec_mask)
    real = (dec_mask if name.startswith("Bart") else mask).bool()
    assert ref.abs().max() > 0.1  # a non-trivial output
    torch.testing.assert_close(ours[real], ref[real], atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", CAUSAL)
def test_left_padding_with_positions_matches(name):
    hf = tiny_hf(name)
    model = from_hf(hf)
    ids, mask = batch(left=True)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # the first real token is position 0
    ref = hf_out(hf, name, ids, mask, positions=positions)
    ours = our_out(model, name, ids, mask, positions=positions)
    torch.testing.assert_close(ours[mask.bool()], ref[mask.bool()], atol=1e-4, rtol=0)
    alone = our_out(model, name, ids[1:, 4:], mask[1:, 4:])  # row 1 without its padding
    torch.testing.assert_close(ours[1, 4:], alone[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_export_gives_identical_transformers_model(name):
    hf = tiny_hf(name)
    back = to_hf(from_hf(hf))
    assert type(back) is type(hf)
    theirs, ours = hf.state_dict(), back.state_dict()
    assert set(ours) <= set(theirs) and set(theirs) - set(ours) <= {"pooler.dense.weight", "pooler.dense.bias"}
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    ids, mask = batch()
    dec = torch.randint(3, V, (2, 7))
    torch.testing.assert_close(hf_out(back, name, ids, mask, dec), hf_out(hf, name, ids, mask, dec),
                               atol=0, rtol=0)


def test_glassformer_model_exports_to_llama():
    """The other direction first: a model built in glassformer (GQA, untied) runs the same in transformers."""
    config = ModelConfig.preset("llama-tiny", vocab_size=V, d_model=32, n_heads=4, n_kv_heads=2, n_layers=2,
                                d_ff=48, max_len=64, rope_theta=500.0)
    model = TransformerLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    hf = to_hf(model)
    assert type(hf).__name__ == "LlamaForCausalLM" and hf.config.num_key_value_heads == 2
    assert not hf.config.tie_word_embeddings
    ids, mask = batch()
    torch.testing.assert_close(hf_out(hf, "LlamaForCausalLM", ids, mask)[mask.bool()],
                               our_out(model, "LlamaForCausalLM", ids, mask)[mask.bool()], atol=1e-4, rtol=0)


def test_attention_weights_match_transformers():
    """What glassformer shows with return_attn is what BERT computes (eager attention, output_attentions)."""
    hf = tiny_hf("BertModel", attn="eager")
    model = from_hf(hf)
    ids, mask = batch()
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
        _, ours = model.hidden_states(ids, pad=mask == 0, return_attn=True)
    assert len(ours) == len(ref) == 2
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------- errors
def _state(name):
    hf = tiny_hf(name)
    return hf.config.to_dict(), dict(hf.state_dict())


def test_unsupported_architecture_is_named():
    with pytest.raises(ValueError, match="unsupported architecture 'T5ForConditionalGeneration'.*GPT2LMHeadModel"):
        model_from_hf_state("T5ForConditionalGeneration", {}, {})
    with pytest.raises(TypeError, match="hf_model must be a transformers PreTrainedModel"):
        from_hf(torch.nn.Linear(2, 2))


@pytest.mark.parametrize("name, field, value, message", [
    ("GPT2LMHeadModel", "scale_attn_by_inverse_layer_idx", True, "scale_attn_by_inverse_layer_idx=True cannot"),
    ("GPT2LMHeadModel", "activation_function", "gelu_fast", "activation_function='gelu_fast' cannot"),
    ("LlamaForCausalLM", "rope_parameters", {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4},
     "rope type='linear' cannot"),
    ("LlamaForCausalLM", "mlp_bias", True, "mlp_bias=True cannot"),
    ("GPTNeoXForCausalLM", "use_parallel_residual", True, "use_parallel_residual=True cannot.*parallel residual"),
    ("GPTNeoXForCausalLM", "rope_parameters",
     {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.25}, "partial_rotary_factor=0.25 cannot"),
    ("BertModel", "position_embedding_type", "relative_key", "position_embedding_type='relative_key' cannot"),
    ("BartForConditionalGeneration", "decoder_ffn_dim", 64, "decoder_ffn_dim=64 cannot"),
])
def test_config_field_we_cannot_honour_is_named(name, field, value, message):
    config, state = _state(name)
    config[field] = value
    with pytest.raises(ValueError, match=message):
        model_from_hf_state(name, config, state)


def test_missing_unexpected_and_misshaped_tensors_are_named():
    config, state = _state("GPT2LMHeadModel")
    missing = {k: v for k, v in state.items() if k != "transformer.h.1.mlp.c_fc.weight"}
    with pytest.raises(ValueError, match=r"missing tensor\(s\) transformer\.h\.1\.mlp\.c_fc\.weight"):
        model_from_hf_state("GPT2LMHeadModel", config, missing)
    with pytest.raises(ValueError, match=r"unexpected tensor\(s\) transformer\.h\.2\.ln_1\.weight"):
        model_from_hf_state("GPT2LMHeadModel", config, {**state, "transformer.h.2.ln_1.weight": torch.ones(32)})
    bad = {**state, "transformer.wpe.weight": torch.zeros(50, 32)}
    with pytest.raises(ValueError, match=r"shape mismatch: transformer\.wpe\.weight \(50, 32\) -> "
                                         r"embeddings\.pos\.weight \(50, 32\), but the config needs \(64, 32\)"):
        model_from_hf_state("GPT2LMHeadModel", config, bad)
    untied = {**state, "lm_head.weight": torch.zeros(V, 32)}
    with pytest.raises(ValueError, match="lm_head.weight differs from transformer.wte.weight"):
        model_from_hf_state("GPT2LMHeadModel", config, untied)


def test_export_of_config_no_family_fits_names_the_field():
    model = TransformerLM(ModelConfig(vocab_size=V, d_model=32, n_heads=4, n_layers=1, d_ff=48, pos="alibi"))
    with pytest.raises(ValueError, match=r"no Hugging Face architecture.*GPT2LMHeadModel: ModelConfig\.pos='alibi'"):
        to_hf(model)


@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_export_refuses_qk_norm(pos):
    """No family normalises queries and keys without a weight: exporting such a model would change its logits."""
    model = TransformerLM(ModelConfig(vocab_size=V, d_model=32, n_heads=4, n_layers=1, d_ff=48, pos=pos,
                                      scale_embeddings=False, qk_norm=True))
    with pytest.raises(ValueError, match=r"no Hugging Face architecture.*ModelConfig\.qk_norm=True"):
        to_hf(model)


# ---------------------------------------------------------------------------------------------- generation
generation = pytest.importorskip("glassformer.generation")


def _beam_eos(hf, inputs, options, step=2):
    """A token the best beam of row 0 emits at ``step`` without EOS: as EOS, it really ends beams."""
    with torch.no_grad():
        free = hf.generate(**inputs, do_sample=False, eos_token_id=None, **options)
    start = 1 if hf.config.is_encoder_decoder else inputs["input_ids"].shape[1]
    return int(free[0, start + step])


@pytest.mark.parametrize("name", CAUSAL)
def test_greedy_20_steps_identical(name):
    hf = tiny_hf(name)
    model = from_hf(hf)
    ids, mask = batch(left=True)
    with torch.no_grad():
        ref = hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=20, do_sample=False, eos_token_id=None,
                          pad_token_id=0)
    ours = generation.generate(model, ids, 20, attention_mask=mask)
    assert ours.shape == ref.shape == (2, 32)
    assert torch.equal(ours, ref)


# pad_token_id=1, not 0: transformers fills finished beams with `pad_token_id or eos_token_id`, so a pad
# id of 0 (falsy) is replaced by EOS there; glassformer always fills with pad_token_id.
@pytest.mark.parametrize("name", CAUSAL)
def test_beam_search_identical(name):
    hf = tiny_hf(name)
    model = from_hf(hf)
    ids, mask = batch(left=True)
    options = dict(max_new_tokens=12, num_beams=4, length_penalty=0.7, pad_token_id=1, num_return_sequences=2,
                   early_stopping=True)
    eos = _beam_eos(hf, dict(input_ids=ids, attention_mask=mask), options)
    with torch.no_grad():
        ref = hf.generate(input_ids=ids, attention_mask=mask, do_sample=False, eos_token_id=eos, **options)
    ours = generation.generate(model, ids, attention_mask=mask, eos_token_id=eos, **options)
    assert (ref[:, 12:] == eos).any()  # some beam finished with EOS
    assert torch.equal(ours, ref)


def test_bart_greedy_and_beam_identical():
    hf = tiny_hf("BartForConditionalGeneration")
    model = from_hf(hf)
    src, mask = batch()
    with torch.no_grad():
        ref = hf.generate(input_ids=src, attention_mask=mask, max_new_tokens=20, do_sample=False, eos_token_id=None)
    ours = generation.generate(model, src, 20, attention_mask=mask, decoder_start_token_id=2)
    assert torch.equal(ours, ref)
    options = dict(max_new_tokens=12, num_beams=4, length_penalty=1.5, pad_token_id=1, num_return_sequences=4)
    eos = _beam_eos(hf, dict(input_ids=src, attention_mask=mask), options)
    with torch.no_grad():
        ref = hf.generate(input_ids=src, attention_mask=mask, do_sample=False, eos_token_id=eos, **options)
    ours = generation.generate(model, src, attention_mask=mask, decoder_start_token_id=2, eos_token_id=eos, **options)
    assert (ref[:, 1:] == eos).any()
    assert torch.equal(ours, ref)
