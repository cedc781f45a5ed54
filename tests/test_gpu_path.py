"""What the CUDA paths need, checked on the CPU (no GPU here): the training forward of a causal LM asks
for attention in the form the flash kernel takes, AdamW is built fused, and each torchrun process
picks its own GPU."""

from __future__ import annotations

from unittest import mock

import pytest
import torch
import torch.nn.functional as F

from glassformer import TransformerLM
from glassformer.runtime.device import pick_device
from glassformer.training.optim import make_optimizer


@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_causal_training_forward_is_flash_eligible(pos):
    """Flash attention needs no mask tensor (causality as is_causal) and 16-bit q, k, v: what bf16
    autocast gives. (ALiBi's bias travels as a float mask, so it takes another fused kernel.)"""
    calls = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
        calls.append((q.dtype, k.dtype, v.dtype, attn_mask, is_causal, dropout_p))
        return real(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)

    model = TransformerLM(vocab_size=50, d_model=16, n_heads=2, n_layers=2, d_ff=32, attn="causal", pos=pos,
                          dropout=0.1).train()
    with mock.patch.object(F, "scaled_dot_product_attention", spy), torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.randint(0, 50, (2, 8))).float().sum().backward()
    assert calls == [(torch.bfloat16,) * 3 + (None, True, 0.1)] * 2


def test_adamw_is_fused_where_torch_has_the_kernel():
    """torch has fused AdamW for CUDA parameters (since 2.0) and CPU ones (since 2.4): the default
    (fused_adamw: null) takes it; only a device without the kernel falls back to the foreach loop."""
    model = TransformerLM(vocab_size=50, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    assert make_optimizer(model, 1e-3, 0.1, (0.9, 0.95)).defaults["fused"] is True


def test_each_process_takes_its_own_gpu(monkeypatch):
    """Under torchrun, "auto" and "cuda" mean cuda:LOCAL_RANK (a bare "cuda" would put every process
    on the current GPU, 0); an explicit index is kept, and checked."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    assert pick_device("auto", 3) == pick_device("cuda", 3) == torch.device("cuda", 3)
    assert pick_device("cuda:5", 3) == torch.device("cuda", 5)
    with pytest.raises(ValueError, match="device='cuda:8' but torch sees 8 CUDA device"):
        pick_device("cuda:8", 0)
