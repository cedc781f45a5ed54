"""The benchmark suite's plumbing on a tiny model: JSON structure, paired timing, memory, precisions,
the nanoGPT contender, quiet output, CLI errors.

No timed assertions: these only check that the suite runs and reports what it promises.
"""

from __future__ import annotations

import ctypes
import json
import os
import statistics
import sys

import pytest
import torch
from torch import nn

from glassformer.bench import SIZES, Size, format_table, paired, paired_ratio, peak_memory, run_suite
from glassformer.bench.generate import bench_generate
from glassformer.bench.nanogpt import MODULE_NAME, load_nanogpt, nanogpt_loss, nanogpt_model
from glassformer.bench.timing import Timing
from glassformer.bench.train import ADAMW, bench_train, build_contender, train_step
from glassformer.cli import main
from glassformer.training.optim import make_optimizer

TINY = Size("tiny", n_layers=1, n_heads=2, d_model=16, block=8, batch=2)

# A stand-in for nanoGPT's model.py with its interface (GPTConfig fields, GPT(config), forward(idx, targets)
# -> (logits, loss)); SEEN records the dtype of its first linear layer's output in every training forward.
NANOGPT_STAND_IN = """
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

SEEN = []


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.fc = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def forward(self, idx, targets=None):
        h = self.fc(self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device)))
        SEEN.append(h.dtype)
        logits = self.lm_head(torch.relu(h))
        if targets is None:
            return logits[:, [-1], :], None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
"""


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
    results = bench_train(TINY, rounds=2, calls=1, matmul_n=64, precisions=("float32", "bfloat16"))
    assert set(results) == {"float32", "bfloat16"}
    names = {"glassformer", "glassformer-gelu", "hf"}
    for precision, result in results.items():
        assert result["precision"] == precision
        for key in ("tokens_per_s", "spread", "peak_mb", "mfu", "seconds", "flops_per_token"):
            assert set(result[key]) == names, key
        assert set(result["ratio_vs_hf"]) == {"glassformer", "glassformer-gelu"}
        assert all(len(s) == 2 for s in result["seconds"].values())
        assert result["peak_flops"] == result["matmul_flops"] > 0 and all(v > 0 for v in result["mfu"].values())
        # the models hold 4 copies of their weights at least (weights, gradients, 2 AdamW moments)
        params = sum(p.numel() for p in __import__("glassformer").TransformerLM(TINY.config()).parameters())
        assert result["peak_mb"]["glassformer"] * 2 ** 20 >= 4 * 4 * params
    json.dumps(results)


def test_bench_generate_cases():
    result = bench_generate(TINY, cases=((1, 3, 4), (2, 1, 2)), rounds=2, precisions=("float32", "bfloat16"))
    assert set(result["cases"]) == {"B1-P3-N4", "B2-P1-N2"}
    for by_precision in result["cases"].values():
        assert set(by_precision) == {"float32", "bfloat16"}
        for case in by_precision.values():
            assert set(case["tokens_per_s"]) == {"glassformer", "glassformer-flinear", "hf"}
            assert case["ratio"] > 0 and case["route_gain"] > 0
            for name, rate in case["tokens_per_s"].items():  # the distance to the bandwidth bound
                assert case["of_bound"][name] == pytest.approx(rate / case["bound_tokens_per_s"])
    assert result["size"]["block"] >= 257  # room for a 1-token prompt and 256 new tokens
    assert result["bandwidth_gb_s"] > 0 and result["weight_mb"] > 0
    B1, B2 = result["cases"]["B1-P3-N4"]["float32"], result["cases"]["B2-P1-N2"]["float32"]
    assert B2["bound_tokens_per_s"] == pytest.approx(2 * B1["bound_tokens_per_s"])  # one weight read per step, all rows


def test_memory_bandwidth_and_weight_bytes():
    from glassformer.bench.generate import memory_bandwidth, weight_bytes

    assert 1e8 < memory_bandwidth(megabytes=8, repeats=2) < 1e13  # bytes/s: between 0.1 GB/s and 10 TB/s
    from glassformer import TransformerLM, count_params

    model = TransformerLM(vocab_size=10, d_model=8, n_heads=2, n_layers=1, d_ff=16, tie=True)
    assert weight_bytes(model) == 4 * count_params(model)  # float32, the tied matrix once


def test_run_suite_json_and_table(tiny_size):
    results = run_suite(("train", "gen", "attn"), ("tiny",), quick=True, rounds=1, hf=False,
                        precisions="float32,bfloat16")
    assert set(results) == {"machine", "settings", "train", "gen", "attn"}
    assert results["settings"]["precisions"] == ["float32", "bfloat16"]
    assert set(results["train"]["tiny"]) == {"float32", "bfloat16"}
    for r in results["train"]["tiny"].values():
        assert set(r["tokens_per_s"]) == {"glassformer", "glassformer-gelu"}
    assert all(set(by_precision) == {"float32", "bfloat16"} for by_precision in results["gen"]["cases"].values())
    assert all(r["ratio"] > 0 for r in results["attn"]["tiny"].values())
    table = format_table(results)
    json.dumps(results)
    for precision in ("float32", "bfloat16"):
        assert f"| tiny | {precision} | glassformer |" in table  # training and transparency rows
        assert f"| B1-P1-N256 | {precision} |" in table  # generation rows
        assert f"| tiny | {precision} | " in table.split("cost of transparency")[1]
    assert "| size | precision | model | tokens/s | vs hf | MFU |" in table
    # the header names the machine: CPU features, the measured kernel choices, a matmul peak per precision
    from glassformer.runtime.kernel_choice import SPEED_FLAGS, cpu_features

    assert set(results["machine"]["cpu_features"]) <= set(SPEED_FLAGS)
    assert results["machine"]["cpu_features"] == cpu_features()
    assert "cpu features: " in table and "measured shapes" in table
    peaks = results["machine"]["matmul_peak_flops"]
    assert set(peaks) == {"float32", "bfloat16"} and all(v > 0 for v in peaks.values())
    assert f"float32 {peaks['float32'] / 1e9:,.0f} GFLOP/s, bfloat16 {peaks['bfloat16'] / 1e9:,.0f} GFLOP/s" in table
    # each training row's MFU is against the peak of its own precision (the best matmul round of any size)
    for precision, r in results["train"]["tiny"].items():
        assert peaks[precision] == r["matmul_flops"] == r["peak_flops"]
        for name, seconds in r["seconds"].items():
            expected = r["tokens_per_step"] * r["flops_per_token"][name] / statistics.median(seconds) / peaks[precision]
            assert r["mfu"][name] == pytest.approx(expected)


def test_run_suite_without_train_still_measures_the_peaks(tiny_size):
    results = run_suite(("attn",), ("tiny",), quick=True, rounds=1, hf=False, precisions="bfloat16")
    assert set(results["machine"]["matmul_peak_flops"]) == {"bfloat16"}
    assert set(results["attn"]["tiny"]) == {"bfloat16"}
    assert "bfloat16 " in format_table(results).splitlines()[2]


@pytest.mark.parametrize("precision, dtype", [("float32", torch.float32), ("bfloat16", torch.bfloat16),
                                              ("float16", torch.float16)])
def test_training_rows_run_under_autocast_on_float32_weights(precision, dtype):
    """A 16-bit row is mixed precision: matmuls in 16 bits, weights and AdamW state stay float32."""
    model = build_contender("glassformer", TINY)
    optimizer = make_optimizer(model, **ADAMW)
    seen = []
    first_linear = next(m for m in model.modules() if isinstance(m, nn.Linear))
    first_linear.register_forward_hook(lambda module, args, out: seen.append((out.dtype, module.weight.dtype)))
    ids = torch.randint(0, TINY.vocab_size, (TINY.batch, TINY.block), generator=torch.Generator().manual_seed(0))
    before = first_linear.weight.detach().clone()
    train_step(model, optimizer, ids, ids.roll(-1, dims=1), precision=precision)()
    assert seen == [(dtype, torch.float32)]
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(t.dtype == torch.float32 for state in optimizer.state.values() for t in state.values()
               if t.is_floating_point())
    assert not torch.equal(first_linear.weight, before)  # the step updated the weights


def test_default_precisions_are_the_machines_auto_set(tiny_size, tmp_path):
    """The bench's default precision is "auto": float32, and bfloat16 only where the CPU has bfloat16
    instructions (an emulated bfloat16 row would time the emulation, not the library)."""
    from glassformer.runtime.precision import bf16_hardware

    out = tmp_path / "bench.json"
    assert main(["bench", "--only", "attn", "--sizes", "tiny", "--rounds", "1", "--no-hf", "--out", str(out)]) == 0
    expected = ["float32", "bfloat16"] if bf16_hardware("cpu")[0] else ["float32"]
    assert json.loads(out.read_text())["settings"]["precisions"] == expected


def test_cli_writes_json(tiny_size, tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "--only", "attn", "--sizes", "tiny", "--rounds", "1", "--no-hf", "--precision", "float32",
                 "--out", str(out)]) == 0
    assert "cost of transparency" in capsys.readouterr().out
    results = json.loads(out.read_text())
    assert set(results) == {"machine", "settings", "attn"}
    assert results["settings"]["precisions"] == ["float32"]


@pytest.fixture
def nanogpt_file(tmp_path):
    path = tmp_path / "nanoGPT" / "model.py"
    path.parent.mkdir()
    path.write_text(NANOGPT_STAND_IN, encoding="utf-8")
    return path


def test_nanogpt_contender_is_built_at_the_size_and_trains(nanogpt_file):
    module = load_nanogpt(nanogpt_file.parent)  # the folder holding model.py will do
    model = nanogpt_model(TINY, module)
    assert (model.config.n_layer, model.config.n_head, model.config.n_embd) == (1, 2, 16)
    assert (model.config.block_size, model.config.vocab_size, model.config.bias, model.config.dropout) == (
        TINY.block, TINY.vocab_size, TINY.bias, 0.0)
    assert build_contender("glassformer", TINY).config.bias == model.config.bias  # same biases as glassformer
    optimizer = make_optimizer(model, **ADAMW)
    ids = torch.randint(0, TINY.vocab_size, (TINY.batch, TINY.block), generator=torch.Generator().manual_seed(0))
    before = model.fc.weight.detach().clone()
    train_step(model, optimizer, ids, ids.roll(-1, dims=1), loss_fn=nanogpt_loss)()
    assert not torch.equal(model.fc.weight, before)


def test_run_suite_with_nanogpt(tiny_size, nanogpt_file):
    results = run_suite(("train",), ("tiny",), quick=True, rounds=1, hf=False, nanogpt=nanogpt_file,
                        precisions="float32,bfloat16")
    assert results["settings"]["nanogpt"] == str(nanogpt_file)
    for r in results["train"]["tiny"].values():
        assert set(r["tokens_per_s"]) == {"glassformer", "glassformer-gelu", "nanogpt"}
        assert set(r["ratio_vs_nanogpt"]) == {"glassformer", "glassformer-gelu"}
        assert r["mfu"]["nanogpt"] > 0 and r["peak_mb"]["nanogpt"] > 0
    # its float32 rows ran in float32, its bfloat16 rows under autocast
    assert set(sys.modules[MODULE_NAME].SEEN) == {torch.float32, torch.bfloat16}
    table = format_table(results)
    assert "| size | precision | model | tokens/s | vs nanogpt | vs hf |" in table
    assert "| tiny | float32 | nanogpt |" in table and "| tiny | bfloat16 | nanogpt |" in table
    json.dumps(results)


def test_nanogpt_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nanogpt must be nanoGPT's model.py .* got '.*nowhere': no such"):
        load_nanogpt(tmp_path / "nowhere")
    other = tmp_path / "other.py"
    other.write_text("class GPT:\n    pass\n")
    with pytest.raises(ValueError, match="which defines no GPTConfig"):
        load_nanogpt(other)
    other.write_text("import a_module_that_is_not_there\n")
    with pytest.raises(ValueError, match="which does not import \\(ModuleNotFoundError"):
        load_nanogpt(other)


@pytest.mark.parametrize("argv, message", [
    (["--only", "trian"], "unknown bench part(s) ['trian']"),
    (["--sizes", "huge"], "unknown size(s) ['huge']"),
    (["--precision", "float32,float8"],
     "precision must be some of auto, float32, bfloat16, float16 (comma-separated), got 'float8'"),
    (["--precision", "fp16"],
     "precision must be some of auto, float32, bfloat16, float16 (comma-separated), got 'fp16'"),
    (["--precision", ","], "precision must name at least one of float32, bfloat16, float16, got none"),
    (["--nanogpt", "no/such/model.py"], "nanogpt must be nanoGPT's model.py (defining GPT and GPTConfig) or a "
                                        "folder holding it, got 'no/such/model.py': no such file"),
    (["--threads", "0"], "--threads must be an int in [1, 4096], got 0"),
    (["--device", "tpu"], "--device must be cpu or cuda (cuda:N), got 'tpu'"),
])
def test_cli_errors(argv, message, capsys):
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


class NoisyProfiler:
    """torch.profiler.profile that, like the profiler on some Intel CPUs, writes USDT lines from C."""

    real = torch.profiler.profile

    def __init__(self, *args, **kwargs):
        self.inner = NoisyProfiler.real(*args, **kwargs)

    def __enter__(self):
        os.write(1, b"USDT probe profiler_start\n")
        os.write(2, b"USDT probe profiler_start (stderr)\n")
        return self.inner.__enter__()

    def __exit__(self, *exc):
        done = self.inner.__exit__(*exc)
        os.write(1, b"USDT probe profiler_stop\n")
        ctypes.CDLL(None).printf(b"USDT held in C stdio's buffer (no newline)")
        return done


def test_peak_memory_swallows_what_c_code_prints(monkeypatch, capfd):
    monkeypatch.setattr(torch.profiler, "profile", NoisyProfiler)
    print("before", flush=True)
    assert peak_memory(lambda: torch.ones(1000).sum()) > 0
    print("after", flush=True)
    ctypes.CDLL(None).fflush(None)  # anything C still held would show now
    assert capfd.readouterr() == ("before\nafter\n", "")


def test_bench_output_is_only_what_the_bench_prints(tiny_size, nanogpt_file, tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(torch.profiler, "profile", NoisyProfiler)
    out = tmp_path / "bench.json"
    assert main(["bench", "--only", "train", "--sizes", "tiny", "--rounds", "1", "--no_hf", "--nanogpt",
                 str(nanogpt_file), "--out", str(out)]) == 0
    ctypes.CDLL(None).fflush(None)
    stdout, stderr = capfd.readouterr()
    assert "USDT" not in stdout + stderr and "profiler" not in stdout + stderr
    assert stdout == format_table(json.loads(out.read_text())) + f"\nresults written to {out}\n"
    assert stderr == "bench: train done\n"


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
    from glassformer.runtime import kernel_choice

    monkeypatch.setenv("GLASSFORMER_CACHE_DIR", str(tmp_path))
    for name in ("_kept_in", "_writes", "_choices"):  # the command points the module at the file: restored after
        monkeypatch.setattr(kernel_choice, name, getattr(kernel_choice, name))
    record = {"final": True, "measured": "2026-12-01T00:00:00+00:00", "how": "3 rounds x 7 pairs", "ratios": [0.5]}
    (tmp_path / "kernel-choices.json").write_text(json.dumps({kernel_choice.machine(): {
        "linear few-row route: 1 x 8 -> 8": {**record, "special": True},
        "precision bfloat16 | train | lm": {**record, "special": False},
        "attention bfloat16 blocked: train causal 48 rows": {**record, "special": True}}}))
    assert main(["bench", "--kernel_choices"]) == 0
    out = capsys.readouterr().out
    assert "linear few-row route: 1 x 8 -> 8: the route" in out and str(tmp_path) in out
    assert "precision bfloat16 | train | lm: float32" in out
    assert "attention bfloat16 blocked: train causal 48 rows: the blocked bfloat16 kernel" in out
    assert main(["bench", "--reset_kernel_choices"]) == 0
    assert "none yet" in capsys.readouterr().out
    assert kernel_choice.choices() == {}


@pytest.mark.parametrize("flags, expected", [(["avx2", "avx512_bf16"], ("float32", "bfloat16")),
                                             (["avx2"], ("float32",))])
def test_auto_precision_is_what_auto_can_pick_here(monkeypatch, flags, expected):
    from glassformer.bench.setups import check_precisions
    from glassformer.runtime import kernel_choice

    monkeypatch.setattr(kernel_choice, "cpu_features", lambda: flags)
    assert check_precisions("auto") == expected
    assert check_precisions("float16,auto,float32") == ("float16", *expected)
