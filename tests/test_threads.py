"""runtime.threads: the thread count and OpenMP wait policy follow the load measured now.

The load is scripted (no CPU is burnt, no time asserted): an idle machine keeps torch's defaults, a
busy core means one thread fewer and passive waiting, set before torch loads; whatever the user
fixed wins.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from glassformer.runtime import threads

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.mark.parametrize(("others", "cpus", "online", "free"), [
    (0, 2, 2, 2), (1, 2, 2, 1), (5, 2, 2, 1), (1, 4, 4, 3), (8, 2, 64, 2), (64, 2, 64, 1), (0.4, 2, 2, 2)])
def test_free_cpus_counts_other_programs_against_this_process(monkeypatch, others, cpus, online, free):
    monkeypatch.setattr(threads.os, "cpu_count", lambda: online)
    assert threads.free_cpus(others, cpus) == free


def test_spare_cpus_may_be_negative(monkeypatch):
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    assert threads.spare_cpus(4, 2) == -2 and threads.spare_cpus(None, 2) == 2 and threads.spare_cpus(0.5, 2) == 1.5


def test_an_idle_machine_keeps_torchs_defaults():
    plan = threads.plan(others=0, cpus=2, env={})
    assert plan.threads is None and plan.wait == "spin" and "idle" in plan.describe()


def test_a_busy_core_means_one_thread_fewer_and_passive_waiting():
    plan = threads.plan(others=1, cpus=2, env={})
    assert (plan.threads, plan.wait) == (1, "passive")
    assert plan.describe().startswith("threads: 1 of 2 CPUs, wait passive (1 other busy thread")


def test_a_count_that_follows_the_load_keeps_threads_spinning():
    """Training and evaluation measure the load again as they run: on a busy machine they take one thread
    fewer but do not sleep (passive waiting cost ~15% a step once the load went, docs/benchmarks.md)."""
    plan = threads.plan(others=1, cpus=2, env={}, follows_load=True)
    assert (plan.threads, plan.wait) == (1, "spin") and "follows the load" in plan.reason
    assert threads.plan(others=0, cpus=2, env={}, follows_load=True).threads is None
    assert threads.plan(others=1, cpus=2, env={"OMP_NUM_THREADS": "2"}, follows_load=True).wait == "user"


@pytest.mark.parametrize("env", [{"OMP_NUM_THREADS": "2"}, {"OMP_WAIT_POLICY": "ACTIVE"}, {"KMP_BLOCKTIME": "200"},
                                 {"GLASSFORMER_THREADS": "fixed"}])
def test_what_the_user_set_wins(env):
    plan = threads.plan(others=1, cpus=2, env=env)
    assert plan.threads is None and plan.wait == "user" and next(iter(env)) in plan.reason


def test_without_proc_nothing_changes(monkeypatch):
    monkeypatch.setattr(threads, "_runnable_total", lambda: None)
    assert threads.others_running(samples=2, gap_s=0) is None
    assert threads.plan(cpus=2, env={}).threads is None


def test_others_running_subtracts_this_process(monkeypatch):
    monkeypatch.setattr(threads, "_runnable_total", lambda: 3)
    monkeypatch.setattr(threads, "_own_running", lambda: 2)
    assert threads.others_running(samples=3, gap_s=0) == 1
    assert threads.others_running(samples=1, gap_s=0) is not None


def test_the_real_probe_reads_proc():
    """On Linux the probe returns a count (no value asserted: it is the machine's load)."""
    others = threads.others_running(samples=2, gap_s=0)
    assert others is None or others >= 0
    assert threads.usable_cpus() >= 1 and threads._own_running() >= 1


def test_the_wait_policy_is_set_only_before_torch_loads():
    env: dict[str, str] = {}
    busy = threads.plan(others=1, cpus=2, env={})
    assert "torch" in sys.modules  # in this test process torch is loaded: too late
    assert threads.set_wait_policy(busy, env) is False and env == {}


PROBE = """
import argparse, importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("glassformer.runtime.threads", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
module.others_running = lambda samples=5, gap_s=0.0: float(sys.argv[2])  # the scripted load
module.usable_cpus = lambda: 2
import glassformer
from glassformer import cli
assert "torch" not in sys.modules and module.at_start() is None  # the import decided nothing


def verb(args):
    import torch
    print(json.dumps({"wait": os.environ.get("OMP_WAIT_POLICY"), "blocktime": os.environ.get("KMP_BLOCKTIME"),
                      "threads": torch.get_num_threads(), "plan": module.at_start().describe()}))


parser = argparse.ArgumentParser()
parser.set_defaults(func=verb, follows_load=sys.argv[3] == "follows")
cli.build_parser = lambda: parser
sys.exit(cli.main([]))
"""


@pytest.mark.parametrize(("others", "verb", "wait", "threads_now"), [
    (1.0, "fixed", "PASSIVE", 1), (0.0, "fixed", None, None), (1.0, "follows", None, 1)])
def test_the_command_sets_the_policy_before_torch(others, verb, wait, threads_now):
    """A fresh interpreter with a scripted load, a verb run by cli.main: busy -> OMP_WAIT_POLICY=PASSIVE
    before torch loads and one thread, or one spinning thread for a verb whose count follows the load;
    idle -> nothing set, torch's own thread count. ``import glassformer`` alone decides nothing
    (tests/test_startup.py: it changes nothing either)."""
    env = {k: v for k, v in os.environ.items()
           if k not in (*threads.WAIT_VARS, *threads.THREAD_VARS, threads.SWITCH)}
    env["PYTHONPATH"] = str(SRC)
    file = SRC / "glassformer" / "runtime" / "threads.py"
    out = subprocess.run([sys.executable, "-c", PROBE, str(file), str(others), verb], capture_output=True,
                         text=True, env=env, check=True, timeout=600).stdout
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["wait"] == wait and seen["blocktime"] == (None if wait is None else "0")
    if threads_now is not None:
        assert seen["threads"] == threads_now
    assert ("passive" in seen["plan"]) is (wait is not None)


ROOT = SRC.parent


@pytest.mark.parametrize(("words", "follows"), [
    (["train", "--config", "configs/shakespeare_char.yaml"], False),  # num_threads: 2
    (["train", "--config", "configs/shakespeare_char.yaml", "--num_threads", "0"], True),
    (["train", "--config", "configs/shakespeare_char_gpu.yaml"], True),  # no num_threads
    (["train", "--config", "configs/shakespeare_char_gpu.yaml", "--num-threads=3"], False),
    (["train", "--max_steps", "5"], True),
    (["recipe", "shakespeare_char_fast"], True),
    (["recipe", "shakespeare_char"], False),
    (["recipe", "configs/prefix_lookahead.yaml", "--num_threads", "null"], True),
    (["eval", "out/best"], True),
])
def test_each_verb_says_whether_its_thread_count_follows_the_load(monkeypatch, words, follows):
    """What cli.main passes to threads.prepare: read before torch loads, from the config and the overrides."""
    from glassformer import cli

    monkeypatch.chdir(ROOT)
    args, extra = cli.build_parser().parse_known_args(words)
    if extra:
        args.overrides = [*args.overrides, *extra]
    if getattr(args, "precheck", None) is not None:
        args.precheck(args)
    assert getattr(args, "follows_load", False) is follows


def test_a_loop_never_applies_a_thread_count_by_itself(monkeypatch):
    """A script that imported glassformer and did not ask (no runtime.tune, not the command): the trainer's and
    evaluation's LoadFollower neither apply a plan nor follow the load; once the policy is in force they do."""
    applied, followed = [], []
    monkeypatch.setattr(threads, "_at_start", None)
    monkeypatch.setattr(threads, "_applied", None)
    monkeypatch.setattr(threads, "prepare", lambda follows_load=False: applied.append(follows_load))
    monkeypatch.setattr(threads, "follow_load", lambda: followed.append(1))
    follower = threads.LoadFollower(first_s=0.0)
    follower.tick()
    assert applied == [] and followed == []
    monkeypatch.setattr(threads, "_applied", 2)  # tune() / the command applied a count
    follower.tick()
    threads.LoadFollower(first_s=0.0, on=False).tick()  # the config fixed the threads
    assert applied == [] and followed == [1]


@pytest.fixture
def policy_on(monkeypatch):
    """The thread policy as a user has it (the suite fixes threads), on a 2-CPU machine, torch at 2."""
    import torch

    monkeypatch.delenv(threads.SWITCH, raising=False)
    for name in (*threads.WAIT_VARS, *threads.THREAD_VARS):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads, "usable_cpus", lambda: 2)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads, "_default", 2)
    previous = torch.get_num_threads()
    yield monkeypatch
    torch.set_num_threads(previous)


def test_a_count_chosen_in_a_busy_moment_goes_back_to_torchs_when_the_machine_is_idle(policy_on):
    import torch

    torch.set_num_threads(1)
    policy_on.setattr(threads, "_applied", 1)  # import saw a busy core
    policy_on.setattr(threads, "others_running", lambda samples=10, gap_s=0.002: 0.0)
    chosen = threads.follow_load()
    assert chosen is not None and chosen.threads is None and torch.get_num_threads() == 2
    assert threads._applied == 2


def test_a_machine_that_becomes_busy_gets_one_thread_fewer(policy_on):
    import torch

    torch.set_num_threads(2)
    policy_on.setattr(threads, "_applied", 2)
    policy_on.setattr(threads, "others_running", lambda samples=10, gap_s=0.002: 1.0)
    assert threads.follow_load().threads == 1 and torch.get_num_threads() == 1


@pytest.mark.parametrize("how", ["torch.set_num_threads", "GLASSFORMER_THREADS", "never applied"])
def test_following_the_load_leaves_what_others_chose(policy_on, how):
    import torch

    torch.set_num_threads(2)
    policy_on.setattr(threads, "_applied", None if how == "never applied" else 2)
    if how == "torch.set_num_threads":
        torch.set_num_threads(1)  # the user's own call wins
    if how == "GLASSFORMER_THREADS":
        policy_on.setenv(threads.SWITCH, "fixed")
    policy_on.setattr(threads, "others_running", lambda samples=10, gap_s=0.002: 0.0 if how == "torch.set_num_threads"
                      else 1.0)
    before = torch.get_num_threads()
    assert threads.follow_load() is None and torch.get_num_threads() == before


def test_the_load_follower_measures_at_most_every_few_seconds(monkeypatch):
    calls, clock = [], [100.0]
    monkeypatch.setattr(threads, "_applied", 2)  # the policy was asked for
    monkeypatch.setattr(threads, "follow_load", lambda: calls.append(clock[0]))
    monkeypatch.setattr(threads.time, "monotonic", lambda: clock[0])
    follower, off = threads.LoadFollower(first_s=2.0, every_s=10.0), threads.LoadFollower(on=False)
    for now in (100.0, 101.9, 102.0, 103.0, 111.9, 112.0, 112.5, 130.0):
        clock[0] = now
        follower.tick()
        off.tick()
    assert calls == [102.0, 112.0, 130.0]


def test_the_trainer_follows_the_load_between_steps(tmp_path, monkeypatch):
    import glassformer.training.loop as loop
    from glassformer.training import TrainConfig, Trainer, prepare_run

    ticks = []

    class Recording:
        def __init__(self, on=True):
            self.on = on

        def tick(self):
            ticks.append(self.on)

    monkeypatch.setattr(loop, "LoadFollower", Recording)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("to be or not to be, that is the question\n" * 40)
    cfg = TrainConfig(data=[str(corpus)], tokenizer="char", max_steps=5, block_size=8, batch_size=2,
                      eval_every=0, log_every=5, out_dir=str(tmp_path / "run"), progress=False,
                      model={"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32, "max_len": 8})
    run = prepare_run(cfg)
    Trainer(cfg, run.model, run.tokenizer, run.batches).train()
    assert ticks == [True] * 5
    ticks.clear()
    fixed = dataclasses.replace(cfg, num_threads=1, out_dir=str(tmp_path / "fixed"))
    Trainer(fixed, run.model, run.tokenizer, run.batches).train()
    assert ticks == [False] * 5  # the config fixed the threads: the trainer leaves them


@pytest.mark.parametrize(("looks", "threads_now"), [((1.0, 0.0), None), ((1.0, 1.0), 1), ((0.0,), None)])
def test_a_busy_reading_is_confirmed_by_a_second_longer_look(monkeypatch, looks, threads_now):
    """A spike seen in the first 20 ms and gone in the next 50 ms leaves torch's defaults (the wait
    policy chosen at import lasts the whole process); an idle first look is not repeated."""
    seen = iter(looks)
    asked = []

    def scripted(samples=threads.SAMPLES, gap_s=threads.SAMPLE_GAP_S):
        asked.append(samples)
        return next(seen)

    monkeypatch.setattr(threads, "others_running", scripted)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    assert threads.plan(cpus=2, env={}).threads == threads_now
    assert asked == [threads.SAMPLES, threads.CONFIRM_SAMPLES][:len(looks)]


def test_evaluation_follows_the_load_between_batches(monkeypatch):
    import glassformer.training.validation as validation
    from glassformer import TransformerLM
    from glassformer.data import LMBatches

    ticks = []

    class Recording:
        def tick(self):
            ticks.append(1)

    monkeypatch.setattr(validation, "LoadFollower", Recording)
    ids = np.arange(200, dtype=np.int64) % 11
    batches = LMBatches("clm", ids[:150], ids[150:], block_size=8, seed=0)
    model = TransformerLM(vocab_size=11, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=8)
    validation.evaluate(model, batches, batch_size=2)
    assert len(ticks) >= 2


LIBRARY_PROBE = """
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("glassformer.runtime.threads", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
module.others_running = lambda samples=5, gap_s=0.0: 1.0  # a busy core: the policy, if asked, would act
module.usable_cpus = lambda: 4  # 4 CPUs, one of them busy: the policy would run 3 threads
module.os.cpu_count = lambda: 4
import torch
torch.set_num_threads(1)  # the script's own count (one thread: fast on a busy test machine)
from glassformer.generation import generate
from glassformer.training import TrainConfig, Trainer, evaluate, prepare_run
seen = lambda: {"threads": torch.get_num_threads(), "env": {k: v for k, v in os.environ.items() if "OMP" in k
                                                             or k.startswith(("KMP", "MKL", "GLASSFORMER_T"))}}
before = seen()
out = sys.argv[2]
corpus = os.path.join(out, "corpus.txt")
with open(corpus, "w") as f:
    f.write("to be or not to be, that is the question\\n" * 40)
cfg = TrainConfig(data=[corpus], tokenizer="char", max_steps=3, block_size=8, batch_size=2, eval_every=0,
                  log_every=3, out_dir=os.path.join(out, "run"), progress=False, precision="auto",
                  model={"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32, "max_len": 8})
run = prepare_run(cfg)
module.LoadFollower.__init__.__defaults__ = (0.0, 0.0, True)  # the load looked at every step, were it asked
Trainer(cfg, run.model, run.tokenizer, run.batches).train()
evaluate(run.model, run.batches, batch_size=2, progress=False)
generate(run.model.eval(), torch.zeros(1, 1, dtype=torch.long), 4)
after_library = seen()
from glassformer.runtime import tune
policy = tune()
print(json.dumps({"before": before, "after_library": after_library, "after_tune": seen(),
                  "policy": policy.describe(), "cache": sorted(os.listdir(os.environ["GLASSFORMER_CACHE_DIR"]))}))
"""


def test_library_calls_change_no_thread_count_or_variable_unless_asked(tmp_path):
    """A fresh interpreter on a 4-CPU machine the policy calls busy (scripted), none of the user's thread
    variables set: Trainer.train (precision auto: a kernel choice is measured), evaluate and generate leave torch's
    thread count, the OpenMP variables and the kernel-choice cache folder as they were; tune() then applies
    the policy (three threads beside the busy core). The command applies it for every verb (tests above)."""
    env = {k: v for k, v in os.environ.items() if k not in (*threads.WAIT_VARS, *threads.THREAD_VARS, threads.SWITCH)}
    env["PYTHONPATH"] = str(SRC)
    env["GLASSFORMER_CACHE_DIR"] = str(tmp_path / "cache")
    (tmp_path / "cache").mkdir()
    file = SRC / "glassformer" / "runtime" / "threads.py"
    out = subprocess.run([sys.executable, "-c", LIBRARY_PROBE, str(file), str(tmp_path)], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["before"] == seen["after_library"] == {"threads": 1, "env": {}}
    assert seen["cache"] == []  # kernel choices measured in the process, no file written
    assert seen["after_tune"]["threads"] == 3 and "3 of 4 CPUs" in seen["policy"]
