"""The ModelConfig options added for Hugging Face families: pos_offset, split_positions, head_transform."""

import pytest
import torch
import torch.nn.functional as F

from glassformer import EncoderDecoder, ModelConfig, TransformerLM


def test_pos_offset_reads_shifted_rows():
    torch.manual_seed(0)
    base = dict(vocab_size=20, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=8, pos="learned")
    shifted = TransformerLM(ModelConfig(**base, pos_offset=2)).eval()
    plain = TransformerLM(ModelConfig(**base)).eval()
    state = shifted.state_dict()
    state["embeddings.pos.weight"] = state["embeddings.pos.weight"][2:]
    plain.load_state_dict(state)
    assert shifted.embeddings.pos.weight.shape == (10, 16)
    ids = torch.randint(0, 20, (2, 8))
    torch.testing.assert_close(shifted(ids), plain(ids), rtol=0, atol=0)


def test_split_positions_give_the_decoder_its_own_table_and_norm():
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=20, arch="encoder-decoder", d_model=16, n_heads=2, n_enc=1, n_dec=1,
                         d_ff=32, pos="learned", split_positions=True, embed_norm=True)
    model = EncoderDecoder(config).eval()
    src, tgt = torch.randint(0, 20, (1, 5)), torch.randint(0, 20, (1, 4))
    memory, logits = model.encode(src), model(src, tgt)
    with torch.no_grad():
        model.dec_embedding.pos.weight.normal_()
        model.dec_embedding.norm.weight.normal_()
    torch.testing.assert_close(model.encode(src), memory, rtol=0, atol=0)  # encoder untouched
    assert (model(src, tgt) - logits).abs().max() > 1e-3  # decoder reads its own table


def test_head_transform_is_dense_act_norm_before_tied_output():
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=20, d_model=16, n_heads=2, n_layers=1, d_ff=32, attn="bidirectional",
                         head_bias=True, head_transform=True, norm_eps=1e-12)
    model = TransformerLM(config).eval()
    with torch.no_grad():
        model.head.bias.normal_()
    ids = torch.randint(0, 20, (2, 6))
    h, t = model.hidden_states(ids), model.head.transform
    expected = F.layer_norm(F.gelu(t.dense(h)), (16,), t.norm.weight, t.norm.bias, 1e-12)
    expected = expected @ model.emb.weight.T + model.head.bias
    torch.testing.assert_close(model(ids), expected)


@pytest.mark.parametrize("fields, message", [
    (dict(pos_offset=2), "pos_offset=2 must be >= 0 and needs pos='learned'"),
    (dict(pos="learned", pos_offset=-1), "pos_offset=-1"),
    (dict(pos="learned", split_positions=True), "split_positions=True needs arch='encoder-decoder'"),
    (dict(activation="swiglu", head_transform=True), "head_transform needs arch='lm' and a plain activation"),
])
def test_new_options_are_validated(fields, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ModelConfig(vocab_size=10, **fields)


def test_defaults_leave_state_dict_unchanged():
    keys = set(TransformerLM(ModelConfig(vocab_size=10, pos="learned")).state_dict())
    assert not any(k.startswith(("dec_embedding.", "head.")) for k in keys)
