"""The four objectives: cross-entropy on labelled positions, label smoothing, padding ignored."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from glassformer import EncoderDecoder, TransformerLM
from glassformer.data import IGNORE, collate_pairs
from glassformer.training import batch_loss, check_model_for, token_loss


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_token_loss_matches_cross_entropy(smoothing):
    logits = torch.randn(3, 7, 11)
    labels = torch.randint(0, 11, (3, 7))
    labels[0, :3] = IGNORE
    parts = token_loss(logits, labels, smoothing)
    ref = F.cross_entropy(logits.reshape(-1, 11), labels.reshape(-1), ignore_index=IGNORE, label_smoothing=smoothing)
    assert int(parts.count) == 18
    torch.testing.assert_close(parts.loss_sum / parts.count, ref)
    valid = labels != IGNORE
    assert int(parts.correct) == int(((logits.argmax(-1) == labels) & valid).sum())


def test_token_loss_by_hand():
    logits = torch.log(torch.tensor([[0.25, 0.75]]))  # probabilities 0.25, 0.75
    labels = torch.tensor([1])
    assert token_loss(logits, labels).loss_sum.item() == pytest.approx(-math.log(0.75))
    eps = 0.2  # (1 - eps) * nll + eps * mean over classes of -log p
    expected = (1 - eps) * -math.log(0.75) + eps * (-math.log(0.25) - math.log(0.75)) / 2
    assert token_loss(logits, labels, eps).loss_sum.item() == pytest.approx(expected)
    assert int(token_loss(logits, labels).correct) == 1
    with pytest.raises(ValueError, match=r"label_smoothing must be a finite number >= 0.0 and < 1.0, got 1.0"):
        token_loss(logits, labels, 1.0)


def test_clm_and_mlm_loss_only_on_labels():
    model = TransformerLM(vocab_size=20, d_model=16, n_heads=2, n_layers=1, d_ff=32).eval()
    ids = torch.randint(0, 20, (2, 6))
    labels = torch.randint(0, 20, (2, 6))
    labels[1] = IGNORE
    parts = batch_loss(model, {"ids": ids, "labels": labels})
    ref = F.cross_entropy(model(ids)[0], labels[0], reduction="sum")
    torch.testing.assert_close(parts.loss_sum, ref)


def test_prefix_loss_uses_prefix_len():
    model = TransformerLM(vocab_size=20, d_model=16, n_heads=2, n_layers=1, d_ff=32, attn="prefix").eval()
    ids, labels = torch.randint(0, 20, (2, 6)), torch.randint(0, 20, (2, 6))
    prefix_len = torch.tensor([2, 4])
    parts = batch_loss(model, {"ids": ids, "prefix_len": prefix_len, "labels": labels})
    ref = F.cross_entropy(model(ids, prefix_len=prefix_len).reshape(-1, 20), labels.reshape(-1), reduction="sum")
    torch.testing.assert_close(parts.loss_sum, ref)


def test_seq2seq_padding_changes_nothing():
    model = EncoderDecoder(vocab_size=12, d_model=16, n_heads=2, n_enc=1, n_dec=1, d_ff=32).eval()
    pairs = [([3, 4, 5, 2], [1, 6, 7, 2]), ([8, 2], [1, 9, 2])]
    alone = [batch_loss(model, collate_pairs([p], 0)) for p in pairs]
    together = batch_loss(model, collate_pairs(pairs, 0))
    torch.testing.assert_close(together.loss_sum, alone[0].loss_sum + alone[1].loss_sum)
    assert int(together.count) == 3 + 2


def test_label_smoothing_ignores_padding_in_seq2seq():
    model = EncoderDecoder(vocab_size=12, d_model=16, n_heads=2, n_enc=1, n_dec=1, d_ff=32).eval()
    batch = collate_pairs([([3, 4, 2], [1, 6, 7, 2]), ([8, 2], [1, 9, 2])], 0)
    logits = model(batch["src"], batch["tgt_in"], src_pad=batch["src_pad"], tgt_pad=batch["tgt_pad"])
    ref = F.cross_entropy(logits.reshape(-1, 12), batch["labels"].reshape(-1), ignore_index=IGNORE,
                          label_smoothing=0.1, reduction="sum")
    torch.testing.assert_close(batch_loss(model, batch, 0.1).loss_sum, ref)


def test_objective_needs_matching_model():
    causal = TransformerLM(vocab_size=20, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    check_model_for("clm", causal)
    with pytest.raises(ValueError, match="objective 'mlm' needs an lm with attn='bidirectional'"):
        check_model_for("mlm", causal)
    with pytest.raises(ValueError, match="needs model arch='encoder-decoder'"):
        check_model_for("seq2seq", causal)


def test_token_loss_can_skip_the_accuracy_argmax():
    logits, labels = torch.randn(2, 3, 7), torch.tensor([[1, 2, IGNORE], [0, 6, 5]])
    assert token_loss(logits, labels, count_correct=False).correct is None
    assert int(token_loss(logits, labels).count) == 5
