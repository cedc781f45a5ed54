"""Speed choices are made by measurement on the machine at hand, remembered, and can be reset.

The logic is tested with scripted timings and a scripted load (no time is asserted, no CPU is
burnt): a way is chosen only when it is clearly faster in every round, rounds that disagree are no
decision (the plain way), a choice measured under load is not kept, an old one is measured again, a
choice is measured once and kept per machine in the cache file, a broken or old-format cache file is
re-measured, and ``F.linear`` stays the default wherever the route is not measured faster.
"""

from __future__ import annotations

import datetime
import json
import os
import stat

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glassformer.runtime import kernel_choice, threads
from glassformer.runtime.linear import MIN_WEIGHT, linear


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A kernel-choice cache file asked for (as runtime.tune(kernel_cache=True) or glassformer bench do)."""
    monkeypatch.setenv("GLASSFORMER_CACHE_DIR", str(tmp_path))
    kept(monkeypatch, kernel_choice.cache_file())
    loaded(monkeypatch, 0)  # an idle machine unless a test says otherwise
    return tmp_path / "kernel-choices.json"


def kept(monkeypatch, file, write=True) -> None:
    """Keep choices in ``file`` for this test (restored after it), starting with none in memory."""
    for name in ("_kept_in", "_writes", "_choices", "_warned", "ignored"):
        monkeypatch.setattr(kernel_choice, name, getattr(kernel_choice, name))
    monkeypatch.setattr(kernel_choice, "_warned", set())
    monkeypatch.setattr(kernel_choice, "ignored", [])
    kernel_choice.use_cache(file, write=write)


def loaded(monkeypatch, others: float | None) -> None:
    """Make the load probe report ``others`` busy threads of other programs (None: unknown), at both ends of a
    measurement and at the second look a busy reading gets."""
    monkeypatch.setattr(kernel_choice, "load_now", lambda: others)
    monkeypatch.setattr(threads, "others_running", lambda samples=None: others)


def new_process(monkeypatch) -> None:
    """Forget what this process measured and read the cache file again, as the next program would."""
    monkeypatch.setattr(kernel_choice, "_choices", None)


def scripted(monkeypatch, plain_s: float, special_s: float | list[float]) -> list[str]:
    """Make every timing sample return ``plain_s`` for the plain way and ``special_s`` for the other
    (a list: one value per round of PAIRS pairs, e.g. [0.5, 0.5, 1.0] for rounds that disagree)."""
    calls = []

    def seconds_per_call(fn):
        calls.append(fn.__name__)
        if fn.__name__ == "plain":
            return plain_s
        if isinstance(special_s, list):
            return special_s[(calls.count("special") - 1) // kernel_choice.PAIRS]
        return special_s

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
    assert measured == 2 * kernel_choice.PAIRS * kernel_choice.ROUNDS
    assert kernel_choice.choose("case", ways) is True
    assert len(calls) == measured  # not measured again in this process
    stored = json.loads(cache.read_text())[kernel_choice.machine()]["case"]
    assert stored["special"] is True and stored["final"] is True
    assert stored["ratios"] == [0.5] * kernel_choice.ROUNDS and stored["others_running"] == 0
    new_process(monkeypatch)
    assert kernel_choice.choose("case", ways) is True and len(calls) == measured
    assert kernel_choice.choices() == {"case": True}


def test_another_machine_measures_for_itself(cache, monkeypatch):
    cache.write_text(json.dumps({"some other cpu | torch 0 | 64 threads": {"case": True}}))
    calls = scripted(monkeypatch, 1.0, 3.0)
    assert kernel_choice.choose("case", ways) is False and calls
    stored = json.loads(cache.read_text())
    assert stored["some other cpu | torch 0 | 64 threads"] == {"case": True}  # kept
    assert stored[kernel_choice.machine()]["case"]["special"] is False


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"%s": {"case": "yes"}}',
                                     '{"%s": {"case": true}}'])  # the old format: no record of how
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
    new_process(monkeypatch)
    before = len(calls)
    kernel_choice.choose("case", ways)
    assert len(calls) == 2 * before


@pytest.mark.parametrize(("route_faster", "rows"), [(False, 1), (True, 2)])
def test_linear_follows_the_measured_choice(cache, monkeypatch, route_faster, rows):
    """Where the route measured slower (an AMX Xeon), decoding never calls bmm and is exactly
    F.linear; where it measured faster, it takes the route (bmm), same numbers to rounding."""
    monkeypatch.setattr(kernel_choice, "faster", lambda plain, special, pairs=7, rounds=3: route_faster)
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
    monkeypatch.setattr(kernel_choice, "faster", lambda plain, special, pairs=7, rounds=3: True)
    weight, x = torch.randn(MIN_WEIGHT // 256, 256), torch.randn(1, 256)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        y = linear(x, weight)
        assert torch.equal(y, F.linear(x, weight)) and y.dtype == torch.bfloat16
    assert kernel_choice.choices() == {}


def test_a_read_only_cache_folder_still_chooses(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("GLASSFORMER_CACHE_DIR", str(blocked / "below-a-file"))
    kept(monkeypatch, kernel_choice.cache_file())
    loaded(monkeypatch, 0)
    scripted(monkeypatch, 1.0, 0.5)
    assert kernel_choice.choose("case", ways) is True


def test_the_real_measurement_runs_both_ways(cache):
    """faster() on real callables: both are called, and the answer is a bool (no time asserted)."""
    ran = {"plain": 0, "special": 0}

    def count(name):
        def fn():
            ran[name] += 1
        return fn

    assert kernel_choice.faster(count("plain"), count("special")) in (True, False, None)
    assert ran["plain"] > kernel_choice.PAIRS and ran["special"] > kernel_choice.PAIRS
    assert len(kernel_choice.last_ratios) == kernel_choice.ROUNDS


@pytest.mark.parametrize("rounds_s", [[0.5, 0.5, 1.0], [1.0, 0.5, 0.5], [0.5, 0.95, 0.5]])
def test_rounds_that_disagree_are_no_decision_and_the_plain_way(cache, monkeypatch, rounds_s):
    """One round of three not clearly faster: no decision, the plain way, measured again next time."""
    scripted(monkeypatch, 1.0, rounds_s)
    assert kernel_choice.choose("case", ways) is False
    record = kernel_choice.records()["case"]
    assert record["special"] is None and record["final"] is False
    assert record["ratios"] == rounds_s
    assert "no decision" in kernel_choice.describe(record)
    new_process(monkeypatch)
    scripted(monkeypatch, 1.0, 0.5)  # the next program, on a steady machine, decides
    assert kernel_choice.choose("case", ways) is True and kernel_choice.records()["case"]["final"]


@pytest.mark.parametrize("measured_s", [0.5, 2.0])  # the route looks faster, or slower, under load
def test_a_choice_made_under_load_does_not_stick(cache, monkeypatch, measured_s):
    """Measured while another program held a core (simulated: the load probe says so, timings are
    scripted): this process takes the plain way whatever the timings said, the record says it was
    taken under load, and the next process on an idle machine measures again and decides."""
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(kernel_choice, "spare_cpus", lambda others: 2 - others)
    loaded(monkeypatch, 1)
    calls = scripted(monkeypatch, 1.0, measured_s)
    assert kernel_choice.choose("case", ways) is False
    record = kernel_choice.records()["case"]
    assert record["final"] is False and record["others_running"] == 1
    assert "taken under load" in kernel_choice.describe(record)
    measured = len(calls)
    assert kernel_choice.choose("case", ways) is False and len(calls) == measured  # not twice per process
    new_process(monkeypatch)
    loaded(monkeypatch, 0)
    scripted(monkeypatch, 1.0, 0.5)
    assert kernel_choice.choose("case", ways) is True  # measured again, idle: the route
    assert kernel_choice.records()["case"]["final"] is True
    new_process(monkeypatch)
    calls = scripted(monkeypatch, 1.0, 2.0)
    assert kernel_choice.choose("case", ways) is True and calls == []  # a final choice is kept


def test_a_passing_spike_does_not_void_a_measurement(cache, monkeypatch):
    """The ends of a measurement read a busy machine (one read can catch this process's own threads winding
    down) but the second, longer look finds it idle: the choice stands, and the record says the load it kept."""
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(kernel_choice, "spare_cpus", lambda others: 2 - others)
    monkeypatch.setattr(kernel_choice, "load_now", lambda: 1.0)
    looks = []
    monkeypatch.setattr(threads, "others_running", lambda samples=None: looks.append(samples) or 0.0)
    scripted(monkeypatch, 1.0, 0.5)
    assert kernel_choice.choose("case", ways) is True
    record = kernel_choice.records()["case"]
    assert record["final"] is True and record["others_running"] == 0.0
    assert looks == [threads.CONFIRM_SAMPLES]  # one second look, the longer one


@pytest.mark.parametrize(("threads", "others", "final"), [(2, 1, True), (2, 2, True), (2, 3, False), (1, 3, True),
                                                          (1, 4, True), (1, 9, True)])
def test_a_load_that_leaves_threads_their_cpus_is_no_load(cache, monkeypatch, threads, others, final):
    """On 4 CPUs: torch's threads plus the other programs' up to 4 leave the measurement standing;
    one more and it is provisional. One thread is timed in its own CPU time, which sharing a core does not
    lengthen: its choice stands under any load."""
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    monkeypatch.setattr(kernel_choice, "spare_cpus", lambda o: 4 - o)
    loaded(monkeypatch, others)
    scripted(monkeypatch, 1.0, 0.5)
    assert kernel_choice.choose("case", ways) is final and kernel_choice.records()["case"]["final"] is final


def test_an_old_choice_is_measured_again(cache, monkeypatch):
    calls = scripted(monkeypatch, 1.0, 0.5)
    assert kernel_choice.choose("case", ways) is True
    measured = len(calls)
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=kernel_choice.MAX_AGE_DAYS + 1)
    monkeypatch.setattr(kernel_choice, "_now", lambda: later)
    new_process(monkeypatch)
    scripted(monkeypatch, 1.0, 2.0)  # the machine changed meanwhile
    assert kernel_choice.choose("case", ways) is False
    assert kernel_choice.records()["case"]["measured"] == later.isoformat(timespec="seconds") and measured


def test_the_cli_shows_when_and_how_each_choice_was_measured(cache, monkeypatch, capsys):
    from glassformer.cli import main

    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)  # both choices at one thread count
    scripted(monkeypatch, 1.0, 0.5)
    kernel_choice.choose("linear few-row route: 1 x 384 -> 1536", ways)
    loaded(monkeypatch, 3)
    monkeypatch.setattr(kernel_choice, "spare_cpus", lambda others: 2 - others)
    kernel_choice.choose("precision bfloat16 | lm", ways, grad=True)
    assert main(["bench", "--kernel_choices"]) == 0
    out = capsys.readouterr().out
    assert "linear few-row route: 1 x 384 -> 1536: the route" in out
    assert f"{kernel_choice.ROUNDS} rounds x {kernel_choice.PAIRS} pairs, margin {kernel_choice.MARGIN}" in out
    assert "special/plain time 0.50 0.50 0.50; 0 other busy threads" in out
    assert "precision bfloat16 | lm: float32" in out and "3 other busy threads; taken under load" in out


def test_the_last_level_cache_is_read_from_sysfs(tmp_path):
    for index, size in (("index0", "32K"), ("index2", "1024K"), ("index3", "32768K"), ("index4", "bad")):
        (tmp_path / index).mkdir()
        (tmp_path / index / "size").write_text(size + "\n")
    assert kernel_choice.last_level_cache_bytes(tmp_path) == 32 << 20
    assert kernel_choice.last_level_cache_bytes(tmp_path / "missing") == 32 << 20  # the fallback
    (tmp_path / "index5").mkdir()
    (tmp_path / "index5" / "size").write_text("96M")
    assert kernel_choice.last_level_cache_bytes(tmp_path) == 96 << 20


def test_a_settled_answer_is_looked_up_once_and_forgotten_by_a_reset(cache, monkeypatch):
    """A decoding step asks for each product: after the first answer no record is read again (no date
    parsing per call); reset_choices (a new dict) drops the remembered answers."""
    scripted(monkeypatch, 1.0, 0.5)
    assert kernel_choice.choose("case", ways) is True
    settled = kernel_choice._settled
    monkeypatch.setattr(kernel_choice, "_settled", lambda record: pytest.fail("record read again"))
    assert kernel_choice.choose("case", ways) is True
    monkeypatch.setattr(kernel_choice, "_settled", settled)
    monkeypatch.setattr(kernel_choice, "_choices", kernel_choice._choices)  # restored after the reset below
    scripted(monkeypatch, 0.5, 1.0)  # now the special way is slower
    kernel_choice.reset_choices()
    assert kernel_choice.choose("case", ways) is False


def test_a_choice_holds_for_the_thread_count_it_was_measured_at(cache, monkeypatch):
    """A process that changes torch's thread count gets that count's choices (measured, or read from the
    file), not the first count's; the file keeps both under their own keys."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        scripted(monkeypatch, 1.0, 0.5)
        assert kernel_choice.choose("case", ways) is True
        torch.set_num_threads(1)
        measured = scripted(monkeypatch, 0.5, 1.0)  # at 1 thread the special way is slower
        assert kernel_choice.choose("case", ways) is False and measured
        torch.set_num_threads(2)
        again = scripted(monkeypatch, 0.5, 1.0)
        assert kernel_choice.choose("case", ways) is True and not again  # 2 threads' choice, not re-measured
        saved = json.loads(cache.read_text(encoding="utf-8"))
        verdicts = {key.rsplit("| ", 1)[1]: value["case"]["special"] for key, value in saved.items()}
        assert verdicts == {"2 threads": True, "1 threads": False}
    finally:
        torch.set_num_threads(before)


# --- Kept only where asked, read through the bounded loader (issues 43 and 47) ---------------------------------


def test_a_library_call_measures_in_its_process_and_keeps_no_file(tmp_path, monkeypatch):
    """Without tune(kernel_cache=...) or the bench command, a choice is measured once per process and no
    file is read or written (a FIFO where the cache would be is never opened)."""
    monkeypatch.setenv("GLASSFORMER_CACHE_DIR", str(tmp_path))
    os.mkfifo(tmp_path / "kernel-choices.json")
    kept(monkeypatch, None)
    loaded(monkeypatch, 0)
    calls = scripted(monkeypatch, 1.0, 0.5)
    assert kernel_choice.choose("case", ways) is True and calls
    measured = len(calls)
    assert kernel_choice.choose("case", ways) is True and len(calls) == measured  # once per process
    assert kernel_choice.kept_in() is None and os.listdir(tmp_path) == ["kernel-choices.json"]
    assert stat.S_ISFIFO(os.stat(tmp_path / "kernel-choices.json").st_mode)


def test_tune_asks_for_the_cache_file_and_the_commands_read_it(cache, monkeypatch):
    """runtime.tune(kernel_cache=True) reads and writes the user's file; a command other than bench reads it
    and writes nothing new; tune(kernel_cache=False) goes back to this process only."""
    from glassformer.runtime import tune

    scripted(monkeypatch, 1.0, 0.5)
    assert tune(threads=None, kernel_cache=True).kernel_cache == cache
    assert kernel_choice.choose("kept", ways) is True
    assert "kept" in json.loads(cache.read_text())[kernel_choice.machine()]
    before = cache.read_text()
    kernel_choice.use_cache(True, write=False)  # what cli.main asks for a verb other than bench
    calls = scripted(monkeypatch, 1.0, 0.5)
    assert kernel_choice.choose("kept", ways) is True and calls == []  # read from the file
    assert kernel_choice.choose("new", ways) is True and calls  # measured here ...
    assert cache.read_text() == before  # ... and not written
    assert tune(threads=None, kernel_cache=False).kernel_cache is None and kernel_choice.choices() == {}


def _fifo(path):
    os.mkfifo(path)


def _zero_link(path):
    path.symlink_to("/dev/zero")


def _huge(path):
    with open(path, "wb") as file:  # sparse: 800 MB that take no disk
        file.truncate(800_000_000)


def _deep(path):
    path.write_text("[" * 100_000 + "]" * 100_000)


def _list(path):
    path.write_text("[1, 2]")


@pytest.mark.parametrize("make", [_fifo, _zero_link, _huge, _deep, _list])
def test_an_unusable_cache_file_is_one_warning_and_left_alone(cache, monkeypatch, capsys, make):
    """A FIFO, a link to /dev/zero, an 800 MB file, deep nesting, a list: never a hang, a MemoryError or a
    RecursionError: one warning line (once per process), the choice measured here, the file not replaced."""
    make(cache)
    before = os.lstat(cache)
    scripted(monkeypatch, 1.0, 0.5)
    assert kernel_choice.choose("case", ways) is True
    kernel_choice.reset_choices()
    assert kernel_choice.choose("case", ways) is True
    err = capsys.readouterr().err
    assert err.count("glassformer: warning: kernel-choice cache") == 1 and len(err.strip().splitlines()) == 1
    after = os.lstat(cache)
    assert (after.st_ino, after.st_size, after.st_mode) == (before.st_ino, before.st_size, before.st_mode)


def test_bench_lists_entries_of_wrong_types_in_one_line(cache, monkeypatch, capsys):
    from glassformer.cli import main

    good = {"special": True, "final": True, "measured": "2026-12-01T00:00:00+00:00", "ratios": [0.5], "how": "x",
            "others_running": 0}
    bad = [{**good, "ratios": "abc"}, {**good, "others_running": "x"}, {**good, "ratios": [float("nan")]},
           {**good, "how": 5}, {**good, "threads": 1.5}, {**good, "final": "yes"}, {**good, "measured": 7},
           {**good, "ratios": [10**400]}, {**good, "others_running": -(10**300)}]
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    entries = {"good": good, **{f"bad{i}": b for i, b in enumerate(bad)}}
    cache.write_text(json.dumps({kernel_choice.machine(): entries}))
    assert main(["bench", "--kernel_choices"]) == 0
    out = capsys.readouterr().out
    assert "good: the route" in out and "bad" not in out
    assert f"{len(bad)} more entries in a form glassformer does not write: ignored" in out


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=20)
RECORD = st.fixed_dictionaries({}, optional={key: JSON for key in (
    "special", "final", "measured", "ratios", "how", "others_running", "threads")}) | st.fixed_dictionaries({
        "special": st.sampled_from([True, False, None]), "final": st.booleans(),
        "measured": st.sampled_from(["2026-12-01T00:00:00+00:00", "", "not a date", "2026-12-01"]),
        "ratios": st.lists(st.floats(allow_nan=False, allow_infinity=False) | st.integers(), max_size=4)},
    optional={"how": JSON, "others_running": JSON, "threads": JSON})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=JSON | st.dictionaries(st.just("MACHINE") | st.text(max_size=4),
                                      JSON | st.dictionaries(st.text(max_size=4), RECORD | JSON, max_size=4),
                                      max_size=3))
def test_any_cache_content_gives_a_choice_or_one_warning(cache, monkeypatch, content):
    """Whatever JSON the file holds (this machine's entry included: "MACHINE"), choose() answers a bool,
    records() and describe() read every kept record, and nothing raises."""
    text = json.dumps(content).replace('"MACHINE"', json.dumps(kernel_choice.machine()))
    cache.write_text(text)
    kept(monkeypatch, cache)
    scripted(monkeypatch, 1.0, 0.5)
    assert kernel_choice.choose("case", ways) in (True, False)
    for record in kernel_choice.records().values():
        assert isinstance(kernel_choice.describe(record), str)
    assert all(isinstance(v, bool) for v in kernel_choice.choices().values())
