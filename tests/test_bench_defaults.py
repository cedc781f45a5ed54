"""``glassformer bench --defaults``: every default speed choice against its plain alternative.

Which default wins is the machine's business (``glassformer bench --defaults`` says it, docs/benchmarks.md):
on a busy 2-core machine a 10% verdict is noise, so no test here decides by time. The first test runs the
real timings and checks the record is consistent whatever they measured; the others check the verdicts
with stand-in timings read from a fake clock (no sleeping, nothing a busy machine can change).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from glassformer.bench import defaults
from glassformer.cli import main
from glassformer.errors import GlassformerError


def test_the_quick_check_times_every_default_and_its_verdict_follows_the_ratios(tmp_path, capsys):
    out = tmp_path / "defaults.json"
    code = main(["bench", "--defaults", "--quick", "--out", str(out)])
    table = capsys.readouterr().out
    results = json.loads(out.read_text(encoding="utf-8"))
    assert set(results["checks"]) == set(defaults.CHECKS) and results["quick"] and results["tolerance"] == 0.10
    timed = [c for c in results["checks"].values() if c["timed"]]
    assert all(c["ratio"] > 0 and len(c["ratios"]) == 5 for c in timed)
    assert results["checks"]["newton_schulz"]["timed"]  # always timed: float32 against bfloat16
    for name, check in results["checks"].items():  # whatever this machine measured, the verdict follows it
        assert check["loses"] is (check["ratio"] is not None and check["ratio"] > 1.10), name
        assert f"| {name} |" in table
    assert results["losers"] == [name for name, check in results["checks"].items() if check["loses"]]
    assert results["ok"] is (not results["losers"]) and code == (0 if results["ok"] else 1)
    assert ("no default is more than 10% slower" in table) is results["ok"]


@pytest.fixture
def stand_ins(monkeypatch):
    """``ways(a, b)``: two stand-ins that take ``a`` and ``b`` seconds of a fake clock, the one the timing reads."""
    now = [0.0]
    monkeypatch.setattr("glassformer.bench.timing.time", SimpleNamespace(perf_counter=lambda: now[0]))

    def ways(*seconds: float):
        return tuple(lambda s=s: now.__setitem__(0, now[0] + s) for s in seconds)

    return ways


def test_a_default_that_loses_is_named_and_fails_the_command(monkeypatch, tmp_path, capsys, stand_ins):
    # the "chosen" precision made 5 ms slower than the other: the check must say so, and the command exit 1
    monkeypatch.setattr(defaults, "resolve_ns_precision", lambda *a, **k: ("bfloat16", "stand-in"))
    monkeypatch.setattr("glassformer.training.muon.ns_ways", lambda shapes: stand_ins(0.001, 0.006))
    out = tmp_path / "d.json"
    assert main(["bench", "--defaults", "--only", "newton_schulz", "--out", str(out)]) == 1
    results = json.loads(out.read_text(encoding="utf-8"))
    check = results["checks"]["newton_schulz"]
    assert check["default"] == "bfloat16" and check["other"] == "float32" and check["loses"]
    assert check["ratio"] == pytest.approx(6.0) and check["ratios"] == pytest.approx([6.0] * 9)
    assert results["losers"] == ["newton_schulz"] and not results["ok"] and list(results["checks"]) == ["newton_schulz"]
    assert "more than 10% slower than its alternative: newton_schulz" in capsys.readouterr().out


def test_a_faster_default_passes(monkeypatch, stand_ins):
    monkeypatch.setattr(defaults, "resolve_ns_precision", lambda *a, **k: ("float32", "stand-in"))
    monkeypatch.setattr("glassformer.training.muon.ns_ways", lambda shapes: stand_ins(0.002, 0.004))
    results = defaults.check_defaults(only=("newton_schulz",), tolerance=0.1)
    check = results["checks"]["newton_schulz"]
    assert check["default"] == "float32" and check["ratio"] == pytest.approx(0.5) and not check["loses"]
    assert results["ok"] and "no default is more than 10% slower" in defaults.format_defaults(results)


def test_threads_fixed_by_the_user_are_not_timed(monkeypatch):
    monkeypatch.setenv("GLASSFORMER_THREADS", "fixed")
    check = defaults.check_threads(rounds=1, calls=1, batch=2)
    n = f"{torch.get_num_threads()} thread{'s' * (torch.get_num_threads() != 1)}"
    assert check == {"default": n, "other": n,
                     "why": "set by GLASSFORMER_THREADS", "ratio": 1.0, "timed": False}


def test_bad_options_are_one_line():
    with pytest.raises(GlassformerError, match=r"^tolerance must be"):
        defaults.check_defaults(tolerance=-0.5, only=())
    with pytest.raises(GlassformerError, match=r"^unknown default check\(s\) \['speed'\]; available: \['newton"):
        defaults.check_defaults(only=("speed",))


@pytest.mark.parametrize(("steps", "loses"), [(275, False), (5000, True)])
def test_compile_is_judged_over_the_recipes_run(monkeypatch, steps, loses):
    """Compiling (30 s here, then 0.10 s a step against eager's 0.12) pays only past the break-even run
    length: the check compares whole runs, compiling included (stand-in timings, no clock)."""
    from glassformer.bench.timing import Timing

    monkeypatch.setattr(defaults, "_step", lambda model, batch, precision="float32", compiled=False: lambda: compiled)
    monkeypatch.setattr(defaults, "time_call", lambda fn: 30.0 if fn() else 0.12)
    monkeypatch.setattr(defaults, "paired", lambda ways, rounds, calls: {
        "default": Timing("default", [0.12] * rounds), "other": Timing("other", [0.10] * rounds)})
    result = defaults.check_compile(rounds=3, calls=1, batch=2, steps=steps)
    want = steps * 0.12 / (30.0 + (steps - 1) * 0.10)
    assert result["ratio"] == pytest.approx(want) and result["ratios"] == pytest.approx([want] * 3)
    assert result["steady_ratio"] == pytest.approx(1.2) and result["compile_s"] == 30.0
    assert result["break_even_steps"] == 1496  # (30 - 0.10) / (0.12 - 0.10), rounded up
    assert (result["ratio"] > 1 + defaults.TOLERANCE) is loses
    assert f"the recipe's {steps} steps; compiling took 30.0 s" in result["why"]


def test_the_compile_check_pays_for_the_recipe_as_shipped():
    """``bench --defaults``' compile row weighs a first compile against the fast recipe's steps: the same number
    as the shipped recipe's max_steps (it said 275 after the recipe went to 225)."""
    from glassformer.bench.defaults import RECIPE_STEPS
    from glassformer.recipes.run import SHIPPED
    from glassformer.training.config import read_yaml

    assert read_yaml(SHIPPED / "shakespeare_char_fast.yaml")["max_steps"] == RECIPE_STEPS
