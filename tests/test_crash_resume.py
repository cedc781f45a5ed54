"""Crash tests: real training processes killed with SIGKILL at many points, then resumed.

A driver process (the script below, run with this Python) trains a tiny character model on CPU, one
forked process per run, so that torch is imported once. Each scenario kills a run at one point:

* before a training step (``step N``);
* before the N-th file-system call of the run (``io N``: ``os.fsync``, ``os.rename``, ``os.replace``,
  ``os.symlink``, ``shutil.rmtree``), which lands the kill between any two steps of a checkpoint save:
  inside the folder, between the folder and its pointers, between the pointers and the pruning;
* in the middle of a ``metrics.jsonl`` line (``torn N``: half the line is written, then the kill);
* twice: once in the first run and once in the resumed run (``io N, then io M``).

After each kill, ``resume: true`` runs to the end. Every scenario must: resume from the newest
complete step folder found on disk, never from one older than the last save that had returned before
the kill (nothing committed is lost), and end with ``model.safetensors`` bit-identical to an
uninterrupted run's and the same metrics records (timings aside).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

import training_helpers as helpers

DRIVER = r'''
import json, os, re, shutil, signal, sys, traceback
from pathlib import Path

import torch

torch.set_num_threads(1)
import glassformer.training.loop as loop
from glassformer.training import TrainConfig, Trainer, prepare_run

torch.optim.AdamW([torch.zeros(1, requires_grad=True)])  # imports torch._dynamo once, before the forks (4 s)

ROOT = Path(sys.argv[1])
CORPUS = ROOT / "corpus.txt"
MAX_STEPS = 6


def config(out, resume):
    return TrainConfig.from_dict(dict(
        data=[str(CORPUS)], block_size=8, batch_size=4, max_steps=MAX_STEPS, lr=3e-3, warmup_steps=2, min_lr=3e-4,
        eval_every=2, log_every=1, eval_batch_size=16, seed=5, device="cpu", progress=False, num_threads=1,
        out_dir=str(out), cache_dir=str(ROOT / "cache"), resume=resume,
        model={"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32, "dropout": 0.1}))


def kill_now():
    os.kill(os.getpid(), signal.SIGKILL)


def install(kill, out):
    """Arrange for this process to SIGKILL itself at the point ``kill`` names; count io calls."""
    kind, n = kill if kill else ("count", 0)
    calls = {"io": 0, "step": 0, "log": 0}

    def hook(owner, name, counter, when):
        real = getattr(owner, name)

        def hooked(*args, **kwargs):
            calls[counter] += 1
            if when(calls[counter]):
                kill_now()
            return real(*args, **kwargs)
        setattr(owner, name, hooked)

    io_kill = (lambda c: c == n) if kind == "io" else (lambda c: False)
    for name in ("fsync", "rename", "replace", "symlink"):
        hook(os, name, "io", io_kill)
    hook(shutil, "rmtree", "io", io_kill)
    hook(Trainer, "train_step", "step", (lambda c: c == n) if kind == "step" else (lambda c: False))
    real_log, real_save = Trainer._log, Trainer.save

    def torn_log(self, record):
        calls["log"] += 1
        if kind == "torn" and calls["log"] == n:
            with open(self.out / "metrics.jsonl", "a", encoding="utf-8") as handle:
                line = loop.metrics_line(record)
                handle.write(line[: len(line) // 2])
            kill_now()
        real_log(self, record)

    def logged_save(self, *args, **kwargs):
        folder = real_save(self, *args, **kwargs)
        with open(out.parent / (out.name + ".committed"), "a") as handle:  # what a save that returned promised
            handle.write(f"{self.step}\n")
        return folder

    Trainer._log, Trainer.save = torn_log, logged_save
    return calls


def child(out, resume, kill):
    calls = install(kill, out)
    run = prepare_run(config(out, resume))
    trainer = Trainer(config(out, resume), run.model, run.tokenizer, run.batches)
    real_start = Trainer._start

    def start(self):
        real_start(self)
        (out.parent / (out.name + ".resumed")).write_text(str(self.step))
    trainer._start = start.__get__(trainer)
    trainer.train()
    (out.parent / (out.name + ".io")).write_text(str(calls["io"]))


def run(out, resume=False, kill=None):
    """Fork a process that trains into ``out``; returns "killed", "done" or "failed"."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            child(out, resume, kill)
        except BaseException:
            traceback.print_exc()
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return "killed"
    return "done" if os.waitstatus_to_exitcode(status) == 0 else "failed"


def newest_complete(out):
    """The newest step folder on disk that holds every file (checked here, not by the code under test)."""
    steps = [int(m.group(1)) for p in out.iterdir() if (m := re.fullmatch(r"ckpt-(\d+)", p.name))
             and all((p / f).is_file() for f in ("config.json", "tokenizer.json", "model.safetensors",
                                                  "train_state.pt"))]
    return max(steps, default=0)


def records(out):
    return [{k: v for k, v in json.loads(line).items() if k != "tokens_per_s"}
            for line in (out / "metrics.jsonl").read_text().splitlines()]


def scenario(name, kills):
    out = ROOT / name
    report = {"name": name, "kills": kills, "runs": []}
    for i, kill in enumerate(kills + [None]):
        committed = out.parent / (out.name + ".committed")
        before = max(map(int, committed.read_text().split()), default=0) if committed.exists() else 0
        newest = newest_complete(out) if i else 0
        status = run(out, resume=i > 0, kill=kill)
        resumed = out.parent / (out.name + ".resumed")
        report["runs"].append({"kill": kill, "status": status, "committed_before": before, "newest_complete": newest,
                               "resumed_from": int(resumed.read_text()) if resumed.exists() and i else None})
        if resumed.exists():
            resumed.unlink()
    final = out / "last" / "model.safetensors"
    report["weights_equal"] = final.is_file() and final.read_bytes() == REFERENCE_WEIGHTS
    report["metrics_equal"] = records(out) == REFERENCE_METRICS
    return report


CORPUS.write_text("To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n" * 8)
assert run(ROOT / "reference") == "done"
REFERENCE_WEIGHTS = (ROOT / "reference" / "last" / "model.safetensors").read_bytes()
REFERENCE_METRICS = records(ROOT / "reference")
assert run(ROOT / "count") == "done"  # the token cache exists now, as it does for every scenario
assert (ROOT / "count" / "last" / "model.safetensors").read_bytes() == REFERENCE_WEIGHTS
io_calls = int((ROOT / "count.io").read_text())
plan = [[["step", n]] for n in range(1, MAX_STEPS + 1)]
plan += [[["io", n]] for n in range(1, io_calls + 1)]
plan += [[["torn", n]] for n in (2, 5, 9)]
plan += [[["io", 20], ["io", 5]], [["io", 33], ["io", 12]], [["step", 3], ["torn", 4]]]
reports = [scenario(f"s{i:03d}", kills) for i, kills in enumerate(plan)]
print(json.dumps({"io_calls": io_calls, "reports": reports}))
'''


def test_sigkill_anywhere_then_resume_ends_bit_identical(tmp_path):
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path)], capture_output=True, text=True,
                          timeout=1800, env={**os.environ, "OMP_NUM_THREADS": "1"})  # ~50 s idle: a hang guard
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["io_calls"] >= 40  # three saves and the start: the kills cover every step of each save
    problems = []
    for report in result["reports"]:
        runs = report["runs"]
        if runs[0]["status"] != "killed":
            problems.append(f"{report['name']} {report['kills']}: the first run was not killed ({runs[0]})")
        for previous, resumed in zip(runs, runs[1:]):
            if previous["status"] != "killed":
                continue
            # continues from the newest complete folder, and never from before a save that had returned
            if not (resumed["resumed_from"] == resumed["newest_complete"] >= resumed["committed_before"]):
                problems.append(f"{report['name']} {report['kills']}: {resumed}")
        if runs[-1]["status"] != "done":
            problems.append(f"{report['name']} {report['kills']}: the last run ended {runs[-1]['status']}")
        if not (report["weights_equal"] and report["metrics_equal"]):
            problems.append(f"{report['name']} {report['kills']}: weights equal {report['weights_equal']}, "
                            f"metrics equal {report['metrics_equal']}")
    assert not problems, "\n".join(problems) + "\n" + done.stderr[-3000:]
    kinds = {kill[0] for report in result["reports"] for kill in report["kills"]}
    assert kinds == {"step", "io", "torn"}
    print(f"{len(result['reports'])} crash scenarios in {time.perf_counter() - started:.1f} s")


CLI_ARGS = ["--block_size", "8", "--batch_size", "4", "--eval_every", "100000", "--log_every", "1", "--progress",
            "false", "--device", "cpu", "--num_threads", "1", "--lr_schedule", "constant", "--model.d_model", "16",
            "--model.n_heads", "2", "--model.n_layers", "1", "--model.d_ff", "32"]


def test_sigterm_stops_glassformer_train_after_saving(tmp_path):
    """What schedulers and `docker stop` send: the command saves, says where, and exits with 143;
    `--resume true` then continues from that step."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The quick brown fox jumps over the lazy dog.\n" * 20, encoding="utf-8")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "glassformer", "train", "--json", "--data", str(corpus), "--out_dir", str(out),
               *CLI_ARGS]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([*command, "--max_steps", "1000000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env)
    try:
        helpers.wait_until_training(process, out)  # training (and its handlers) started: SIGTERM meets them
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr
    summary = json.loads(stdout.splitlines()[0])
    assert summary["stopped"] == "interrupted"
    step = summary["step"]
    assert os.readlink(out / "last") == f"ckpt-{step:06d}" and not (out / "best").exists()
    assert stdout.splitlines()[1] == f"checkpoints in {out / 'last'}"  # only what exists

    done = subprocess.run([*command, "--max_steps", str(step + 2), "--resume", "true"], capture_output=True,
                          text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    logged = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()
              if "train_loss" in json.loads(line)]
    assert logged == list(range(1, step + 3))
    assert re.fullmatch(r"ckpt-0*" + str(step + 2), os.readlink(out / "last"))


@pytest.mark.parametrize("setup", ["empty", "incomplete"])
def test_resume_says_what_it_found(tmp_path, capsys, setup):
    """`--resume true` with no checkpoint says it starts at step 0; with only a damaged one it refuses."""
    from glassformer.cli import main

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The quick brown fox jumps over the lazy dog.\n" * 20, encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    if setup == "incomplete":
        (out / "ckpt-000004").mkdir()
    argv = ["train", "--data", str(corpus), "--out_dir", str(out), *CLI_ARGS, "--max_steps", "2", "--resume", "true"]
    code = main(argv)
    err = capsys.readouterr().err
    if setup == "empty":
        assert code == 0 and f"resume: {out} holds no checkpoint to resume from; starting at step 0" in err
    else:
        assert code == 2 and "ckpt-000004' is incomplete (no config.json" in err and err.count("\n") == 1
        assert not (out / "metrics.jsonl").exists()
