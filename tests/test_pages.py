"""Weights moved into huge pages for decoding (glassformer.runtime.pages): same parameters, same values, same
tokens; nothing shared that was not, nothing moved twice, nothing moved when turned off.

Whether Linux then backs them with huge pages, and how much faster they stream, is the machine's business
(``glassformer bench --defaults``, ``huge_pages``; docs/benchmarks.md): no test here reads a clock. The moves are
tested wherever Linux's ``madvise`` exists, the kernel's setting taken as allowing them."""

import copy
import mmap

import pytest
import torch
from safetensors.torch import load_file, save_file

from glassformer import ModelConfig, TransformerLM
from glassformer.errors import ArgumentTypeError
from glassformer.generation import generate
from glassformer.runtime import linear as linear_module
from glassformer.runtime import pages

pytestmark = pytest.mark.skipif(not hasattr(mmap, "MADV_HUGEPAGE"), reason="madvise(MADV_HUGEPAGE) is Linux's")


@pytest.fixture
def allowed(monkeypatch):
    """Huge pages taken as allowed (whatever this kernel's setting) and the switch restored after the test."""
    monkeypatch.setattr(pages, "available", lambda: True)
    previous = pages.set_huge_pages(True)
    yield
    pages.set_huge_pages(previous)


def small_model() -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(ModelConfig(vocab_size=50, d_model=64, n_heads=4, n_layers=2, max_len=64, dropout=0.0))


def test_moving_keeps_each_parameter_its_values_and_the_tie_and_gives_each_its_own_storage(allowed):
    model = small_model()
    params = dict(model.named_parameters())
    before = {name: p.detach().clone() for name, p in params.items()}
    addresses = {name: p.data_ptr() for name, p in params.items()}
    assert pages.move_parameters(model) == len(params)
    after = dict(model.named_parameters())
    for name, p in after.items():
        assert p is params[name] and torch.equal(p, before[name]) and p.requires_grad
        assert p.data_ptr() != addresses[name] and p.data_ptr() % pages.ALIGN == 0 and pages.holds(p)
        assert p.untyped_storage().nbytes() == p.numel() * p.element_size()  # a storage of its own
    assert len({p.untyped_storage().data_ptr() for p in after.values()}) == len(after)
    assert pages.move_parameters(model) == 0  # moved before: each is looked at, none moves again
    assert {name: p.data_ptr() for name, p in after.items()} != addresses


def test_a_moved_model_saves_copies_and_trains(allowed, tmp_path):
    model = small_model()
    pages.move_parameters(model)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, tmp_path / "m.safetensors")  # safetensors refuses tensors that share a storage
    loaded = load_file(tmp_path / "m.safetensors")
    assert all(torch.equal(loaded[k], v) for k, v in state.items())
    twin = copy.deepcopy(model)
    assert all(torch.equal(a, b) for a, b in zip(twin.parameters(), model.parameters(), strict=True))
    ids = torch.randint(0, 50, (2, 16))
    loss = torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
    loss.backward()
    weight = model.blocks[0].ffn.up.weight
    old = weight.detach().clone()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert pages.holds(weight) and not torch.equal(weight, old)  # updated where it lives now


def test_parameters_that_share_a_storage_stay_where_they_are(allowed):
    model = small_model()
    up = model.blocks[0].ffn.up
    model.blocks[1].ffn.up.weight = torch.nn.Parameter(up.weight.data)  # two parameter objects, one storage
    moved = pages.move_parameters(model)
    assert moved == len(list(model.parameters())) - 2
    assert model.blocks[1].ffn.up.weight.data_ptr() == up.weight.data_ptr() and not pages.holds(up.weight)


def test_generation_moves_a_streamed_model_once_with_the_same_tokens(allowed, monkeypatch):
    monkeypatch.setattr(linear_module, "last_level_cache_bytes", lambda: 1024)  # every model streams
    model, prompt = small_model(), torch.tensor([[1, 2, 3]])
    expected = model(prompt).argmax(-1)
    first = model.blocks[0].self_attn.qkv.weight
    with pages_off():
        plain = generate(model, prompt, 12)
    assert not pages.holds(first)  # turned off: nothing moved
    moved = generate(model, prompt, 12)
    assert pages.holds(first) and torch.equal(moved, plain)
    assert not first.is_inference()  # moved under generation's inference mode, still trainable
    address = first.data_ptr()
    generate(model, prompt, 3)
    assert first.data_ptr() == address  # not moved twice
    assert torch.equal(model(prompt).argmax(-1), expected)


def test_a_model_built_under_inference_mode_stays_where_it_is_and_generates(allowed, monkeypatch):
    monkeypatch.setattr(linear_module, "last_level_cache_bytes", lambda: 1024)
    with torch.inference_mode():
        model = small_model()
    reference = small_model()  # the same seed: the same weights, built as usual
    prompt = torch.tensor([[4, 5]])
    assert torch.equal(generate(model, prompt, 6), generate(reference, prompt, 6))
    assert not any(pages.holds(p) for p in model.parameters())  # inference tensors: their data cannot be swapped
    assert all(pages.holds(p) for p in reference.parameters())


def test_a_model_that_fits_in_the_cache_is_not_moved(allowed, monkeypatch):
    monkeypatch.setattr(linear_module, "last_level_cache_bytes", lambda: 1 << 40)
    model = small_model()
    generate(model, torch.tensor([[1]]), 2)
    assert not any(pages.holds(p) for p in model.parameters())


def test_copies_are_paged_as_the_tensor_is(allowed):
    model = small_model()
    weight = model.blocks[0].ffn.up.weight
    plain = pages.copies(weight, 2)  # not moved yet: clones
    pages.move_parameters(model)
    huge = pages.copies(weight, 3)
    assert len(plain) == 2 and len(huge) == 3
    assert all(torch.equal(c, weight) and c.data_ptr() != weight.data_ptr() for c in plain + huge)
    assert all(c.data_ptr() % pages.ALIGN == 0 for c in huge)
    assert pages.empty(10).shape == (10,) and pages.copies(weight, 0) == []


def test_the_switch_takes_a_bool_only():
    with pytest.raises(ArgumentTypeError, match="enabled must be a bool, got int"):
        pages.set_huge_pages(1)


class pages_off:  # noqa: N801 (used as a with block)
    def __enter__(self):
        self.previous = pages.set_huge_pages(False)

    def __exit__(self, *exc):
        pages.set_huge_pages(self.previous)
