"""The benchmark suite's plumbing on a tiny model: JSON structure, paired timing, memory, CLI errors.

No timed assertions: these only check that the suite runs and reports what it promises.
"""

from __future__ import annotations

import json

import pytest
import torch

from glassformer.bench import SIZES, Size, format_table, paired, paired_ratio, peak_memory, run_suite
from glassformer.bench.generate import bench_generate
from glassformer.bench.timing import Timing
from glassformer.bench.train import bench_train
from glassformer.cli import main

TINY = Size("tiny", n_layers=1, n_heads=2, d_model=16, block=8, batch=2)


@pytest.fixture
def tiny_size(monkeypatch):
    monkeypatch.setitem(SIZES, "tiny", TINY)
    return TINY


def test_paired_alternates_and_counts():
    order = []
    timings = paired({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, rounds=3, calls=2, warmup=1)
    assert order == ["a", "b"] + ["a", "a", "b", "b"] + ["b", "b", "a", "a"] + ["a", "a", "b", "b"]
    assert set(timings) == {"a", "b"} and all(len(t.rounds) == 3 for t in timings.values())


def test_timing_median_spread_and_ratio():
    slow, fast = Timing("slow", [2.0, 4.0, 6.0, 8.0, 10.0]), Timing("fast", [1.0, 2.0, 3.0, 4.0, 5.0])
    assert slow.median == 6.0
    assert paired_ratio(slow, fast) == 2.0
    assert slow.spread == pytest.approx((9.0 - 3.0) / 6.0)


def test_paired_rejects_bad_counts():
    with pytest.raises(ValueError, match="rounds must be an int >= 1, got 0"):
        paired({"a": lambda: None}, rounds=0)
    with pytest.raises(ValueError, match="warmup must be an int >= 0, got -1"):
        paired({"a": lambda: None}, warmup=-1)


def test_peak_memory_sees_a_temporary_tensor():
    def work():
        big = torch.ones(1_000_000)  # 4 MB, freed on return
        return float(big[0])

    peak = peak_memory(work)
    assert 4_000_000 <= peak < 8_000_000


def test_bench_train_reports_each_contender():
    result = bench_train(TINY, rounds=2, calls=1, matmul_n=64)
    names = {"glassformer", "glassformer-gelu", "hf"}
    for key in ("tokens_per_s", "spread", "peak_mb", "mfu", "seconds", "flops_per_token"):
        assert set(result[key]) == names, key
    assert set(result["ratio_vs_hf"]) == {"glassformer", "glassformer-gelu"}
    assert all(len(s) == 2 for s in result["seconds"].values())
    assert result["peak_flops"] > 0 and all(v > 0 for v in result["mfu"].values())
    # the models hold 4 copies of their weights at least (weights, gradients, 2 AdamW moments)
    params = sum(p.numel() for p in __import__("glassformer").TransformerLM(TINY.config()).parameters())
    assert result["peak_mb"]["glassformer"] * 2 ** 20 >= 4 * 4 * params
    json.dumps(result)


def test_bench_generate_cases():
    result = bench_generate(TINY, cases=((1, 3, 4), (2, 1, 2)), rounds=2)
    assert set(result["cases"]) == {"B1-P3-N4", "B2-P1-N2"}
    for case in result["cases"].values():
        assert set(case["tokens_per_s"]) == {"glassformer", "glassformer-flinear", "hf"}
        assert case["ratio"] > 0 and case["route_gain"] > 0
    assert result["size"]["block"] >= 257  # room for a 1-token prompt and 256 new tokens


def test_run_suite_json_and_table(tiny_size):
    results = run_suite(("train", "attn"), ("tiny",), quick=True, rounds=1, hf=False)
    assert set(results) == {"machine", "settings", "train", "attn"}
    assert set(results["train"]["tiny"]["tokens_per_s"]) == {"glassformer", "glassformer-gelu"}
    assert results["attn"]["tiny"]["ratio"] > 0
    table = format_table(results)
    assert "| tiny | glassformer |" in table and "return_attn" in table
    json.dumps(results)
    # the header says which CPU features decide kernel speed, and the measured kernel choices
    from glassformer.nn.kernel_choice import SPEED_FLAGS, cpu_features

    assert set(results["machine"]["cpu_features"]) <= set(SPEED_FLAGS)
    assert results["machine"]["cpu_features"] == cpu_features()
    assert "cpu features: " in table and "measured shapes" in table


def test_cli_writes_json(tiny_size, tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "--only", "attn", "--sizes", "tiny", "--rounds", "1", "--no-hf", "--out", str(out)]) == 0
    assert "cost of transparency" in capsys.readouterr().out
    assert set(json.loads(out.read_text())) == {"machine", "settings", "attn"}


@pytest.mark.parametrize("argv, message", [
    (["--only", "trian"], "unknown bench part(s) ['trian']"),
    (["--sizes", "huge"], "unknown size(s) ['huge']"),
    (["--dtype", "float8"], "dtype must be one of"),
    (["--threads", "0"], "--threads must be an int in [1, 4096], got 0"),
    (["--device", "tpu"], "--device must be cpu or cuda (cuda:N), got 'tpu'"),
])
def test_cli_errors(argv, message, capsys):
    assert main(["bench", *argv]) == 2
    assert message in capsys.readouterr().err


def test_scaling_context_points_keep_tokens_per_step():
    from glassformer.bench.scaling import SERIES, _point

    small = SIZES["small"]
    for block in SERIES["context"][1]:
        point = _point(small, "block", block)
        assert (point.block, point.batch * point.block) == (block, small.batch * small.block)
    assert _point(small, "d_model", 256).d_model == 256


def test_bench_uses_the_library_optimizer():
    """One optimizer builder: the bench's AdamW is training.optim.make_optimizer with nanoGPT's settings."""
    import glassformer.bench.train as bench_train_module
    from glassformer.bench.setups import glass_model
    from glassformer.training import optim

    assert bench_train_module.make_optimizer is optim.make_optimizer
    optimizer = optim.make_optimizer(glass_model(TINY), **bench_train_module.ADAMW)
    decay, no_decay = optimizer.param_groups
    assert (decay["lr"], decay["betas"], decay["fused"]) == (1e-3, (0.9, 0.95), True)
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.1, 0.0)


def test_cli_shows_and_resets_kernel_choices(tmp_path, monkeypatch, capsys):
    from glassformer.nn import kernel_choice

    monkeypatch.setenv("GLASSFORMER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(kernel_choice, "_choices", {"linear few-row route: 1 x 8 -> 8": True})
    assert main(["bench", "--kernel_choices"]) == 0
    out = capsys.readouterr().out
    assert "linear few-row route: 1 x 8 -> 8: the route" in out and str(tmp_path) in out
    assert main(["bench", "--reset_kernel_choices"]) == 0
    assert "none yet" in capsys.readouterr().out
    assert kernel_choice.choices() == {}
