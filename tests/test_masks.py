"""Masks: the causal / prefix / padding rules, checked as properties over many sizes."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from glassformer import causal_mask, padding_mask, prefix_mask


@given(T=st.integers(0, 24))
def test_causal_mask_is_j_le_i(T):
    mask = causal_mask(T)
    assert mask.shape == (T, T) and mask.dtype == torch.bool
    for i in range(T):
        for j in range(T):
            assert bool(mask[i, j]) == (j <= i)


@given(T=st.integers(1, 16), p=st.integers(0, 20))
def test_prefix_mask_is_causal_or_key_in_prefix(T, p):
    mask = prefix_mask(T, p)
    expected = torch.tensor([[j <= i or j < p for j in range(T)] for i in range(T)])
    assert torch.equal(mask, expected)


@settings(max_examples=50)
@given(T=st.integers(1, 12), lengths=st.lists(st.integers(0, 14), min_size=1, max_size=5))
def test_prefix_mask_per_row_matches_int_version(T, lengths):
    mask = prefix_mask(T, torch.tensor(lengths))
    assert mask.shape == (len(lengths), 1, T, T)
    for b, p in enumerate(lengths):
        assert torch.equal(mask[b, 0], prefix_mask(T, p))


def test_prefix_mask_edges():
    assert torch.equal(prefix_mask(5, 0), causal_mask(5))
    assert prefix_mask(5, 5).all()


@given(pad=st.lists(st.lists(st.booleans(), min_size=3, max_size=3), min_size=1, max_size=4))
def test_padding_mask_hides_padded_keys_only(pad):
    pad = torch.tensor(pad)
    mask = padding_mask(pad)
    assert mask.shape == (pad.shape[0], 1, 1, pad.shape[1])
    assert torch.equal(mask[:, 0, 0], ~pad)
