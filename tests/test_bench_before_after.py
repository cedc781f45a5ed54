"""benchmarks/bench_before_after.py pairs every throughput figure both bench runs report (the runs
themselves are made up here: each is a bench JSON)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_before_after.py"
spec = importlib.util.spec_from_file_location("bench_before_after", SCRIPT)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_every_tokens_per_s_is_found_by_its_path():
    results = {"machine": {"load_1min": 1.5, "tokens_per_s": "n/a"},
               "train": {"baby": {"float32": {"tokens_per_s": {"glassformer": 900.0, "hf": 700},
                                              "peak_mb": {"glassformer": 30}, "ok": True}}},
               "gen": {"cases": {"B1": {"bound_tokens_per_s": 400.0, "tokens_per_s": {"glassformer": 150}}}},
               "rows": [{"case": [1, 1, 8], "cached_tokens_per_s": 120, "hf_tokens_per_s": None}]}
    assert bench.throughputs(results) == {"train/baby/float32/tokens_per_s/glassformer": 900.0,
                                          "train/baby/float32/tokens_per_s/hf": 700.0,
                                          "gen/cases/B1/tokens_per_s/glassformer": 150.0,
                                          "rows[0]/cached_tokens_per_s": 120.0}


def test_pairs_alternate_and_the_ratio_is_the_median_of_the_pairs(tmp_path, monkeypatch, capsys):
    rates = {"before": iter([100.0, 100.0, 100.0]), "after": iter([110.0, 90.0, 130.0])}
    order = []

    caches = {"before": set(), "after": set()}

    def fake_run(src, bench_args, out, cache):
        side = "before" if src.name == "old" else "after"
        order.append(side)
        caches[side].add(cache)
        return {"train/tokens_per_s": next(rates[side])}

    monkeypatch.setattr(bench, "run_bench", fake_run)
    out = tmp_path / "ba.json"
    assert bench.main(["--before", str(tmp_path / "old"), "--after", str(tmp_path / "new"), "--pairs", "3",
                       "--out", str(out)]) == 0
    assert order == ["before", "after", "after", "before", "before", "after"]
    assert len(caches["before"]) == len(caches["after"]) == 1 and caches["before"] != caches["after"]  # one per tree
    row = json.loads(out.read_text())["rows"][0]
    assert row["figure"] == "train/tokens_per_s" and row["ratio"] == pytest.approx(1.1)
    assert "| train/tokens_per_s | 100 | 110 | 1.10x (1.10, 0.90, 1.30) |" in capsys.readouterr().out


def test_each_trees_kept_kernel_choices_are_reported(tmp_path, monkeypatch, capsys):
    def fake_run(src, bench_args, out, cache):
        side = "before" if src.name == "old" else "after"
        taken = {"before": {"route A": {"special": True, "final": True, "measured": "x"},
                            "route B": {"special": None, "final": False, "measured": "x"}},
                 "after": {"route A": False}}[side]  # a bool: a choice set by hand
        (cache / "kernel-choices.json").write_text(json.dumps({"cpu | 2 threads": taken}))
        return {"gen/tokens_per_s": 100.0}

    monkeypatch.setattr(bench, "run_bench", fake_run)
    out = tmp_path / "ba.json"
    assert bench.main(["--before", str(tmp_path / "old"), "--after", str(tmp_path / "new"), "--pairs", "1",
                       "--out", str(out)]) == 0
    assert json.loads(out.read_text())["choices"] == {"before": {"route A": True, "route B": False},
                                                      "after": {"route A": False}}
    printed = capsys.readouterr().out
    assert "before: special way taken for 1 of 2 kernel choices (route A)" in printed
    assert "after: special way taken for 0 of 1 kernel choices (none)" in printed
    assert bench.kept_choices(tmp_path / "missing") == {}
