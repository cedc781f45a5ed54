"""QK-norm (``ModelConfig.qk_norm``): self-attention RMS-normalises each head's query and key, after their hook
points and before RoPE, with no weight of its own."""

import pytest
import torch
import torch.nn.functional as F

from glassformer import ModelConfig, TransformerLM
from glassformer.generation import generate
from glassformer.interpret import run_with_hooks


def _pair(**options: object) -> tuple[TransformerLM, TransformerLM]:
    """The same weights with and without qk_norm (it adds no parameter)."""
    torch.manual_seed(0)
    config = dict(vocab_size=37, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_len=24, **options)
    plain = TransformerLM(ModelConfig(**config)).eval()
    normed = TransformerLM(ModelConfig(**config, qk_norm=True)).eval()
    normed.load_state_dict(plain.state_dict())  # strict: the same parameter names
    return plain, normed


def _rms_normed(x: torch.Tensor, hook: object) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],))


@pytest.mark.parametrize("pos", ["rope", "learned"])
def test_qk_norm_is_the_plain_model_with_queries_and_keys_normalised_at_their_taps(pos: str) -> None:
    plain, normed = _pair(pos=pos, n_kv_heads=2)
    ids = torch.randint(0, 37, (3, 11))
    hooks = [(f"blocks.{i}.attn.hook_{kind}", _rms_normed) for i in range(2) for kind in "qk"]
    torch.testing.assert_close(normed(ids), run_with_hooks(plain, ids, hooks=hooks), rtol=0, atol=1e-6)
    assert not torch.allclose(normed(ids), plain(ids), atol=1e-3)  # it does change the model


def test_qk_norm_decodes_with_the_cache_as_the_full_forward_scores() -> None:
    _, normed = _pair(pos="rope")
    prompt = torch.randint(0, 37, (1, 5))
    out = generate(normed, prompt, 8, do_sample=False)  # greedy, cached steps
    ids = out if isinstance(out, torch.Tensor) else out.ids
    for t in range(5, ids.shape[1]):  # each new token is the argmax of the uncached forward over its prefix
        assert int(ids[0, t]) == int(normed(ids[:, :t])[0, -1].argmax())


def test_qk_norm_round_trips_through_the_config() -> None:
    config = ModelConfig(vocab_size=10, qk_norm=True)
    assert ModelConfig.from_dict(config.to_dict()).qk_norm is True
    assert ModelConfig.from_dict({k: v for k, v in config.to_dict().items() if k != "qk_norm"}).qk_norm is False
