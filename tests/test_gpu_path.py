"""What the CUDA paths need, checked on the CPU (no GPU here): the training forward of a causal LM asks
for attention in the form the flash kernel takes, AdamW is built fused, and each torchrun process
picks its own GPU."""

from __future__ import annotations

import math
import os
from unittest import mock

import pytest
import torch
import torch.nn.functional as F

from glassformer import TransformerLM
from glassformer.generation import generate
from glassformer.runtime.device import pick_device
from glassformer.runtime.precision import autocast
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


# --------------------------------------------------------------------------------------------------------
# On the GPU: pytest -m cuda (benchmarks/gpu_check.sh runs them). They skip without CUDA; with
# GLASSFORMER_CUDA_TESTS_DEVICE=cpu they run on the CPU instead (how they were checked before any GPU).
# Tolerances, stated per test: float32 comparisons on CUDA allow for a different summation order
# (TF32 stays off: torch's default for matmuls); 16-bit ones for autocast's rounding (bfloat16 keeps
# 8 bits of mantissa, float16 11) accumulated over two layers of a tiny model whose logits are O(1).
DEVICE = os.environ.get("GLASSFORMER_CUDA_TESTS_DEVICE") or "cuda"
needs_cuda = pytest.mark.skipif(DEVICE.startswith("cuda") and not torch.cuda.is_available(),
                                reason="needs a CUDA GPU (pytest -m cuda on a GPU machine)")
ATOL = {"float32": 1e-4, "bfloat16": 6e-2, "float16": 1e-2}  # fused vs explicit attention, logits O(1)
RTOL = {"float32": 1e-4, "bfloat16": 3e-2, "float16": 5e-3}


def tiny_lm(pos: str = "learned", init_std: float = 0.02, **kw) -> TransformerLM:
    """A seeded 2-layer causal LM on DEVICE, in eval mode."""
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=64, d_model=64, n_heads=4, n_layers=2, d_ff=128, max_len=64, pos=pos,
                          init_std=init_std, **kw)
    return model.to(DEVICE).eval()


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("precision", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("pos", ["learned", "rope", "alibi"])
def test_fused_attention_matches_explicit_on_device(precision, pos):
    """The fused kernel (flash/efficient SDPA on CUDA) and the explicit softmax(QK^T)V that return_attn
    uses give the same logits, within ATOL/RTOL[precision]; everything stays on the device."""
    model = tiny_lm(pos)
    ids = torch.randint(0, 64, (3, 40), device=DEVICE)
    with torch.no_grad(), autocast(precision, DEVICE):
        fused = model(ids)
        explicit, attn = model(ids, return_attn=True)
    assert fused.device.type == explicit.device.type == torch.device(DEVICE).type
    assert all(a.device.type == torch.device(DEVICE).type for a in attn)
    torch.testing.assert_close(fused.float(), explicit.float(), atol=ATOL[precision], rtol=RTOL[precision])


@pytest.mark.cuda
@needs_cuda
@pytest.mark.skipif(not DEVICE.startswith("cuda"), reason="the flash kernel exists on CUDA only")
@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_flash_kernel_takes_the_training_forward(pos):
    """With SDPA restricted to the flash backend (no fallback), a bfloat16 training forward and backward
    of a causal LM run: the model hands flash what it takes (is_causal, no mask tensor, 16-bit q/k/v)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model = tiny_lm(pos).train()
    ids = torch.randint(0, 64, (2, 48), device=DEVICE)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION), torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(ids).float().logsumexp(-1).mean()
    loss.backward()
    assert torch.isfinite(loss) and all(p.grad is not None and torch.isfinite(p.grad).all()
                                        for p in model.parameters() if p.requires_grad)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_kv_cache_equals_recompute_on_device(precision, pos):
    """Greedy decoding with the KV cache gives exactly the tokens of recomputing the whole sequence
    each step (tolerance: none; the peaked init_std 0.3 keeps bfloat16's rounding away from ties)."""
    model = tiny_lm(pos, init_std=0.3)
    ids = torch.randint(0, 64, (2, 5), device=DEVICE)
    with autocast(precision, DEVICE):
        cached = generate(model, ids, 20)
        recomputed = generate(model, ids, 20, use_cache=False)
    assert cached.device.type == torch.device(DEVICE).type
    assert cached.tolist() == recomputed.tolist()


@pytest.mark.cuda
@needs_cuda
def test_beam_search_matches_hugging_face_on_device():
    """Beam search on the device gives Hugging Face's sequences for the same GPT-2 weights, float32
    (tolerance: none, token ids compared)."""
    transformers = pytest.importorskip("transformers")
    from glassformer.interop.hf import from_hf

    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=24, n_positions=32, n_embd=32, n_layer=2, n_head=4, initializer_range=0.3, bos_token_id=0,
        eos_token_id=1)).eval()
    ours = from_hf(hf).to(DEVICE).eval()
    hf = hf.to(DEVICE)
    prompts = torch.tensor([[5, 9, 2, 7], [3, 3, 11, 20]], device=DEVICE)
    kw = dict(num_beams=4, max_new_tokens=9, eos_token_id=5, pad_token_id=3, num_return_sequences=3)
    with torch.inference_mode():
        expected = hf.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=False, **kw)
    assert generate(ours, prompts, **kw).tolist() == expected.tolist()


def gpu_config(tmp_path, name: str, **changes):
    """The trainer tests' tiny run (tests/training_helpers.py) on DEVICE."""
    from training_helpers import config

    return config(tmp_path, name, **{"device": DEVICE, **changes})


@pytest.mark.cuda
@needs_cuda
def test_training_on_device_matches_the_cpu(tmp_path):
    """Six float32 steps on the device end at the CPU run's weights (dropout 0: the two devices draw
    different dropout masks; no biases: a key bias gets a zero gradient whose rounding noise AdamW
    would amplify; tolerance 1e-4: another summation order, no TF32)."""
    from training_helpers import train

    model = {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32, "dropout": 0.0, "bias": False}
    on_device, result = train(gpu_config(tmp_path, "dev", model=model))
    on_cpu, _ = train(gpu_config(tmp_path, "cpu", model=model, device="cpu"))
    assert result["step"] == 6 and math.isfinite(result["val_loss"])
    assert next(on_device.model.parameters()).device.type == torch.device(DEVICE).type
    for (name, a), b in zip(on_device.model.state_dict().items(), on_cpu.model.state_dict().values()):
        torch.testing.assert_close(a.cpu(), b, atol=1e-4, rtol=1e-4, msg=name)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_training_step_in_16_bits_on_device(tmp_path, precision):
    """Twelve steps under bfloat16 autocast (float16: with the GradScaler) learn: finite losses, the
    validation loss falls below its first value; the weights stay float32 (mixed precision)."""
    from training_helpers import train

    trainer, result = train(gpu_config(tmp_path, precision, precision=precision, max_steps=12, eval_every=4))
    vals = [h["val_loss"] for h in trainer.history if "val_loss" in h]
    assert result["precision"] == precision and all(math.isfinite(v) for v in vals)
    assert vals[-1] < vals[0]
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())


@pytest.mark.cuda
@needs_cuda
def test_checkpoint_resume_on_device(tmp_path):
    """4 steps, save, resume for 4 more on the device equals 8 straight steps (dropout 0.1: the CUDA
    generator's state is saved and restored). Tolerance 1e-5: CUDA's attention backward may add with
    atomics, whose order varies (no biases, so AdamW has no zero gradient's noise to amplify). The
    checkpoint then loads on the CPU."""
    from glassformer.training import load_checkpoint
    from training_helpers import train

    model = {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32, "dropout": 0.1, "bias": False}
    straight, _ = train(gpu_config(tmp_path, "straight", max_steps=8, eval_every=4, lr_decay_steps=8, model=model))
    train(gpu_config(tmp_path, "split", max_steps=4, eval_every=4, lr_decay_steps=8, model=model))
    resumed, result = train(gpu_config(tmp_path, "split", max_steps=8, eval_every=4, lr_decay_steps=8,
                                       resume=True, model=model))
    assert result["step"] == 8
    for (name, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values()):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=name)
    loaded = load_checkpoint(tmp_path / "split" / "last", map_location="cpu").model
    assert {p.device.type for p in loaded.parameters()} == {"cpu"}
    for (name, a), b in zip(loaded.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b.cpu()), name


ID_CHECK = "check_token_ids"  # the eager forward's id range check in glassformer.models.lm (a host sync)


def test_the_id_check_the_sync_free_test_takes_out_is_the_forwards(monkeypatch):
    """Runs everywhere (the test below needs CUDA): the name it patches is the check the forward calls,
    so a rename fails here, on the CPU, and not first on a GPU machine."""
    import glassformer.models.lm as lm

    calls = []
    monkeypatch.setattr(lm, ID_CHECK, lambda ids, vocab_size, name="ids": calls.append(vocab_size))
    model = TransformerLM(vocab_size=11, d_model=8, n_heads=2, n_layers=1, d_ff=16, max_len=8)
    model(torch.zeros(1, 3, dtype=torch.long))
    assert calls == [11]


@pytest.mark.cuda
@needs_cuda
@pytest.mark.skipif(not DEVICE.startswith("cuda"), reason="CUDA's sync debug mode")
def test_a_training_step_does_not_wait_for_the_gpu(tmp_path):
    """After a first step, the trainer's steps queue their work without one host-device synchronisation
    (torch.cuda.set_sync_debug_mode("error") raises on any): the tokens are counted on the host, batches
    travel through pinned memory, clipping and fused AdamW stay on the device, and the trainer calls the
    model without its id range check (int() of a device tensor: the tokenizer made those ids)."""
    from glassformer.training import Trainer, prepare_run

    cfg = gpu_config(tmp_path, "nosync", precision="bfloat16")
    run = prepare_run(cfg)
    trainer = Trainer(cfg, run.model, run.tokenizer, run.batches)
    trainer.train_step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        trainer.train_step()
        trainer.train_step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert trainer.step == 3


HOST_READS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "cpu", "numpy")


def _decoding_steps(model: TransformerLM, device: str, steps: int = 32):
    """A greedy generation set up on ``device`` (no end-of-sequence token: nothing can finish a row), its
    first step (the prompt's forward) taken; returns the iterator of the next ``steps`` steps."""
    from glassformer.generation.api import iter_steps, setup_generation

    prompt = torch.tensor([[1, 2, 3, 4]], device=device)
    setup = setup_generation(model, prompt, max_new_tokens=steps + 1)
    stepping = iter_steps(setup)
    next(stepping)
    return stepping


def test_decoding_steps_read_nothing_back_to_the_host(monkeypatch):
    """Runs everywhere (the CUDA test below is the real check): once the prompt is in, 32 greedy steps
    call none of the tensor methods that copy a value to the host (item, tolist, bool(), int(), cpu(),
    ...), each of which would wait for a GPU."""
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=11, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=64).eval()
    with torch.inference_mode():
        stepping = _decoding_steps(model, "cpu")
        reads = []
        for name in HOST_READS:
            real = getattr(torch.Tensor, name)
            monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _n=name, _r=real, **k: (reads.append(_n),
                                                                                             _r(self, *a, **k))[1])
        steps = sum(1 for _ in stepping)
        monkeypatch.undo()
    assert steps == 32 and reads == []


@pytest.mark.cuda
@needs_cuda
@pytest.mark.skipif(not DEVICE.startswith("cuda"), reason="CUDA's sync debug mode")
def test_decoding_steps_do_not_wait_for_the_gpu():
    """32 greedy decoding steps queue their work without one host-device synchronisation
    (torch.cuda.set_sync_debug_mode("error") raises on any)."""
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=11, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=64).to(DEVICE).eval()
    with torch.inference_mode():
        stepping = _decoding_steps(model, DEVICE)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            steps = sum(1 for _ in stepping)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert steps == 32
