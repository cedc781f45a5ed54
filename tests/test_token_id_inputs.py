"""Token ids through the Python API: every unsupported dtype or value is one glassformer error (issue 22)."""

import pytest
import torch

from glassformer import TransformerLM
from glassformer.errors import ArgumentTypeError, GlassformerError
from glassformer.generation import generate


@pytest.fixture(scope="module")
def model() -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(vocab_size=50, d_model=16, n_heads=2, n_layers=1, d_ff=32, attn="causal").eval()


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.uint16, torch.uint32, torch.uint64,
                                   torch.float32, torch.bool])
def test_a_tensor_of_an_unsupported_dtype_is_refused_naming_it(model, dtype):
    with pytest.raises(ArgumentTypeError, match=f"ids must be a tensor of dtype torch.long.*got dtype {dtype}"):
        model(torch.ones(1, 3, dtype=dtype))


def test_int32_and_long_give_the_same_logits(model):
    ids = torch.tensor([[1, 2, 3]])
    torch.testing.assert_close(model(ids.int()), model(ids), rtol=0, atol=0)


@pytest.mark.parametrize(("prompt", "error", "message"), [
    ([[1, [2]]], ArgumentTypeError, r"ids must hold int token ids, got \[2\]"),
    ([["a"]], ArgumentTypeError, "ids must hold int token ids, got 'a'"),
    ([[1.5]], ArgumentTypeError, "ids must hold int token ids, got 1.5"),
    ([[True]], ArgumentTypeError, "ids must hold int token ids, got True"),
    ([[2**70]], GlassformerError, "token id 1180591620717411303424 is out of range"),
    ([[-1]], GlassformerError, "token id -1 is out of range"),
    ([[2**63 - 1]], GlassformerError, "out of range"),
])
def test_prompts_of_lists_are_checked_before_any_tensor_is_built(model, prompt, error, message):
    with pytest.raises(error, match=message):
        generate(model, prompt, max_new_tokens=1)


def test_a_hugging_face_folder_with_nan_weights_is_refused_at_load(tmp_path):
    from safetensors.torch import load_file, save_file

    from glassformer.interop.hf_dir import load_hf_dir, save_hf_dir

    torch.manual_seed(0)
    lm = TransformerLM(vocab_size=50, d_model=16, n_heads=2, n_layers=1, d_ff=32, attn="causal", pos="learned",
                       scale_embeddings=False)
    folder = save_hf_dir(lm, None, tmp_path / "hf")
    weights = load_file(str(folder / "model.safetensors"))
    name = sorted(weights)[0]
    weights[name] = weights[name].clone().fill_(float("nan"))
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(GlassformerError, match=f"tensor '{name}' holds NaN or infinity"):
        load_hf_dir(folder)


def test_the_meta_model_of_a_load_fills_nothing_and_leaves_torch_init_as_it_was():
    from glassformer import ModelConfig
    from glassformer.training.weights import meta_specs

    before = torch.nn.init.normal_
    specs = meta_specs(ModelConfig.preset("shakespeare-char"))
    assert torch.nn.init.normal_ is before  # restored
    real = TransformerLM(ModelConfig.preset("shakespeare-char"))
    assert {k: (v.shape, v.dtype) for k, v in real.state_dict().items()} == specs
    torch.manual_seed(0)
    a = torch.nn.init.normal_(torch.empty(3))
    torch.manual_seed(0)
    assert torch.equal(a, torch.randn(3))  # still a real fill outside the meta build
