"""The speed policy is asked for, never imposed (issue 43): runtime.tune's arguments, and nothing of torch
replaced process-wide (meta_specs builds a model on the meta device without swapping torch.nn.init).

tests/test_threads.py: library calls leave threads alone, the command applies the policy;
tests/test_kernel_choice.py: the kernel-choice cache kept only where asked, read through the bounded loader.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest
import torch

from glassformer import ModelConfig, TransformerLM
from glassformer.errors import GlassformerError
from glassformer.runtime import threads, tune
from glassformer.training import weights

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.mark.parametrize(("kwargs", "named"), [({"threads": 0}, "threads"), ({"threads": "many"}, "threads"),
                                               ({"threads": True}, "threads"), ({"threads": 2.5}, "threads"),
                                               ({"threads": None, "kernel_cache": 3}, "kernel_cache"),
                                               ({"threads": None, "kernel_cache": ""}, "kernel_cache")])
def test_tune_refuses_what_it_cannot_apply(kwargs, named):
    with pytest.raises(GlassformerError, match=named):
        tune(**kwargs)


def test_a_thread_count_asked_for_is_set_and_not_followed(monkeypatch):
    """tune(threads=N) sets N; the trainer's load follower then leaves it (asked for, not chosen)."""
    monkeypatch.setattr(threads, "_applied", threads._applied)
    policy = tune(threads=2)
    assert torch.get_num_threads() == 2 and policy.threads == 2 and policy.plan is None
    assert threads._applied is None and "threads: 2 (asked)" in policy.describe()


def test_meta_specs_replaces_no_torch_function(monkeypatch):
    """The model is built on the meta device with its fills skipped for meta tensors in that block only: the
    shapes and dtypes are the real model's, and torch.nn.init's functions are never swapped (another thread
    initialising a tensor meanwhile gets real random values)."""
    config = ModelConfig(vocab_size=40, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=8)
    inits = {name: getattr(torch.nn.init, name) for name in dir(torch.nn.init) if name.endswith("_")}
    seen = {}
    build = weights.build_model

    def watched(cfg):
        model = build(cfg)
        assert next(model.parameters()).is_meta
        seen["inits_kept"] = all(getattr(torch.nn.init, name) is fn for name, fn in inits.items())
        filled = {}

        def other_thread():
            filled["weight"] = torch.nn.init.normal_(torch.zeros(3, 3, device="cpu"), std=1.0)

        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
        seen["other_thread_filled"] = bool(filled["weight"].abs().sum() > 0)
        return model

    monkeypatch.setattr(weights, "build_model", watched)
    specs = {name: (t.shape, t.dtype) for name, t in TransformerLM(config).state_dict().items()}
    assert weights.meta_specs(config) == specs
    assert seen == {"inits_kept": True, "other_thread_filled": True}


def test_no_torch_function_is_replaced_anywhere_in_src():
    """grep: no `setattr(torch.nn.init`, no assignment to a torch function, no instance forward replaced here."""
    pattern = re.compile(r"setattr\(torch\.|^\s*torch\.[\w.]+\s*=[^=]")
    hits = [f"{file}:{n}" for file in SRC.rglob("*.py")
            for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert hits == []


@pytest.mark.parametrize(("words", "writes"), [(["bench", "--kernel_choices"], True), (["train"], False),
                                               (["generate", "c", "--prompt", "a"], False), (["eval", "c"], False)])
def test_only_bench_writes_the_kernel_choice_cache(words, writes):
    """Every verb reads the user's kernel-choice cache (cli.main); bench alone, which measures, writes it."""
    from glassformer import cli

    args, _ = cli.build_parser().parse_known_args(words)
    assert (getattr(args, "keeps_kernel_choices", False) is True) is writes
