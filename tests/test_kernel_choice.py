"""Speed choices are made by measurement on the machine at hand, remembered, and can be reset.

The logic is tested with scripted timings (no time is asserted): a way is chosen only when it is
clearly faster, a choice is measured once and kept per machine in the cache file, a broken cache
file is re-measured, and ``F.linear`` stays the default wherever the route is not measured faster.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from glassformer.runtime import kernel_choice
from glassformer.runtime.linear import MIN_WEIGHT, linear


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GLASSFORMER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(kernel_choice, "_choices", None)
    return tmp_path / "kernel-choices.json"


def scripted(monkeypatch, plain_s: float, special_s: float) -> list[str]:
    """Make every timing sample return ``plain_s`` for the plain way and ``special_s`` for the other."""
    calls = []

    def seconds_per_call(fn):
        calls.append(fn.__name__)
        return plain_s if fn.__name__ == "plain" else special_s

    monkeypatch.setattr(kernel_choice, "_seconds_per_call", seconds_per_call)
    return calls


def plain():
    return None


def special():
    return None


def ways():  # what choose() times
    return plain, special


@pytest.mark.parametrize(("special_s", "chosen"), [(0.5, True), (0.9, True), (0.95, False), (1.0, False),
                                                     (2.0, False)])
def test_the_special_way_is_chosen_only_when_clearly_faster(cache, monkeypatch, special_s, chosen):
    scripted(monkeypatch, 1.0, special_s)
    assert kernel_choice.choose("case", ways) is chosen


def test_a_choice_is_measured_once_and_kept_per_machine(cache, monkeypatch):
    calls = scripted(monkeypatch, 1.0, 0.5)
    assert kernel_choice.choose("case", ways) is True
    measured = len(calls)
    assert measured == 2 * kernel_choice.PAIRS
    assert kernel_choice.choose("case", ways) is True
    assert len(calls) == measured  # not measured again in this process
    stored = json.loads(cache.read_text())
    assert stored == {kernel_choice.machine(): {"case": True}}
    monkeypatch.setattr(kernel_choice, "_choices", None)  # a new process on the same machine
    assert kernel_choice.choose("case", ways) is True and len(calls) == measured
    assert kernel_choice.choices() == {"case": True}


def test_another_machine_measures_for_itself(cache, monkeypatch):
    cache.write_text(json.dumps({"some other cpu | torch 0 | 64 threads": {"case": True}}))
    calls = scripted(monkeypatch, 1.0, 3.0)
    assert kernel_choice.choose("case", ways) is False and calls
    stored = json.loads(cache.read_text())
    assert stored["some other cpu | torch 0 | 64 threads"] == {"case": True}  # kept
    assert stored[kernel_choice.machine()] == {"case": False}


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"%s": {"case": "yes"}}'])
def test_a_broken_cache_file_is_measured_again(cache, monkeypatch, content):
    cache.write_text(content.replace("%s", kernel_choice.machine()))
    calls = scripted(monkeypatch, 1.0, 0.5)
    assert kernel_choice.choose("case", ways) is True and calls


def test_reset_forgets_every_choice(cache, monkeypatch):
    calls = scripted(monkeypatch, 1.0, 0.5)
    kernel_choice.choose("case", ways)
    kernel_choice.reset_choices()
    assert kernel_choice.choices() == {}
    assert json.loads(cache.read_text())[kernel_choice.machine()] == {}
    before = len(calls)
    kernel_choice.choose("case", ways)
    assert len(calls) == 2 * before


@pytest.mark.parametrize(("route_faster", "rows"), [(False, 1), (True, 2)])
def test_linear_follows_the_measured_choice(cache, monkeypatch, route_faster, rows):
    """Where the route measured slower (an AMX Xeon), decoding never calls bmm and is exactly
    F.linear; where it measured faster, it takes the route (bmm), same numbers to rounding."""
    monkeypatch.setattr(kernel_choice, "faster", lambda plain, special, pairs=7: route_faster)
    bmm = []
    real = torch.bmm
    monkeypatch.setattr(torch, "bmm", lambda *a, **k: bmm.append(1) or real(*a, **k))
    weight = torch.randn(MIN_WEIGHT // 256, 256)
    x = torch.randn(rows, 256)
    with torch.no_grad():
        y = linear(x, weight)
    assert bool(bmm) is route_faster
    torch.testing.assert_close(y, F.linear(x, weight), atol=0 if not route_faster else 1e-5,
                               rtol=0 if not route_faster else 1e-5)
    assert kernel_choice.choices() == {f"linear few-row route: {rows} x 256 -> {MIN_WEIGHT // 256}": route_faster}


def test_no_route_under_autocast(cache, monkeypatch):
    """Under bfloat16 autocast the product is F.linear's (in 16 bits), never timed or routed."""
    monkeypatch.setattr(kernel_choice, "faster", lambda plain, special, pairs=7: True)
    weight, x = torch.randn(MIN_WEIGHT // 256, 256), torch.randn(1, 256)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        y = linear(x, weight)
        assert torch.equal(y, F.linear(x, weight)) and y.dtype == torch.bfloat16
    assert kernel_choice.choices() == {}


def test_a_read_only_cache_folder_still_chooses(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("GLASSFORMER_CACHE_DIR", str(blocked / "below-a-file"))
    monkeypatch.setattr(kernel_choice, "_choices", None)
    scripted(monkeypatch, 1.0, 0.5)
    assert kernel_choice.choose("case", ways) is True


def test_the_real_measurement_runs_both_ways(cache):
    """faster() on real callables: both are called, and the answer is a bool (no time asserted)."""
    ran = {"plain": 0, "special": 0}

    def count(name):
        def fn():
            ran[name] += 1
        return fn

    assert kernel_choice.faster(count("plain"), count("special")) in (True, False)
    assert ran["plain"] > kernel_choice.PAIRS and ran["special"] > kernel_choice.PAIRS
