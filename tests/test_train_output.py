"""What training prints (issue 34): the model line, evaluations above the bar, the end summary, "did you
mean" for config keys, ``train --help``'s keys, the resume line and its warnings, the right tokens/s after
a resume, and the command that resumes after Ctrl-C. Tiny CPU runs (tests/training_helpers.py)."""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import signal
import subprocess
import sys
from dataclasses import MISSING, fields

import pytest
import torch

import glassformer
import training_helpers as helpers
from glassformer.cli import main
from glassformer.config import ModelConfig
from glassformer.models.common import count_params
from glassformer.training import TrainConfig, Trainer
from glassformer.training.report import describe_model, schedule_warnings

TINY = ["--block_size", "8", "--batch_size", "4", "--eval_every", "2", "--log_every", "1", "--device", "cpu",
        "--model.d_model", "16", "--model.n_heads", "2", "--model.n_layers", "1", "--model.d_ff", "32"]


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(helpers.CORPUS, encoding="utf-8")
    return path


def test_the_model_line_names_the_shape_and_the_parameter_count(tmp_path, corpus, capsys):
    out = tmp_path / "run"
    assert main(["train", "--data", str(corpus), "--out_dir", str(out), "--max_steps", "2", *TINY]) == 0
    err = helpers.without_heartbeats(capsys.readouterr().err.splitlines())
    model, _ = glassformer.load(out / "best")
    n = count_params(model)
    assert err[1] == f"model: TransformerLM causal, 1 layer x 16 wide, 2 heads, vocab {model.config.vocab_size}, " \
                     f"block 8: {n:,} parameters"
    big = glassformer.TransformerLM(vocab_size=65, d_model=128, n_heads=4, n_layers=4, d_ff=512, max_len=64)
    pair = glassformer.EncoderDecoder(vocab_size=100, d_model=32, n_heads=4, d_ff=64)
    assert describe_model(pair, 24).startswith("model: EncoderDecoder, 2 encoder + 2 decoder layers x 32 wide, 4 heads")
    assert describe_model(big, 64) == ("model: TransformerLM causal, 4 layers x 128 wide, 4 heads, vocab 65, block 64: "
                                       f"{count_params(big) / 1e6:.2f} M parameters")


class _Terminal(io.StringIO):
    """Standard error as a terminal: tqdm draws its bar."""

    def isatty(self) -> bool:
        return True


def test_with_a_bar_each_evaluation_is_a_line_above_it(tmp_path, monkeypatch):
    err = _Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    trainer, _ = helpers.train(helpers.config(tmp_path, progress=True, max_steps=4, eval_every=2))
    lines = err.getvalue().replace("\r", "\n").splitlines()
    evals = [line for line in lines if line.startswith("step ") and "val_loss" in line]
    assert [line.split(" | ")[0] for line in evals] == ["step 2/4", "step 4/4"]
    expected = [f"val_loss {h['val_loss']:.4f}" for h in trainer.history if "val_loss" in h]
    assert [line.split(" | ")[1] for line in evals] == expected
    assert not any(line.startswith("step ") and "train_loss" in line for line in lines)  # those are in the bar


def test_the_summary_is_short_text_and_the_full_json_is_a_file(tmp_path, corpus, capsys):
    out = tmp_path / "run"
    assert main(["train", "--data", str(corpus), "--out_dir", str(out), "--max_steps", "2", *TINY]) == 0
    printed = capsys.readouterr().out.splitlines()
    full = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert printed[0] == (f"done: step 2 of 2 in {full['wall_s']:.1f} s, {full['tokens_per_s']:,.0f} tok/s "
                          "(float32)")
    assert printed[1].split(" | ")[:2] == [f"train_loss {full['train_loss']:.4f}", f"val_loss {full['val_loss']:.4f}"]
    assert len(printed) == 3 and "{" not in "".join(printed)
    assert full["val_loss"] != round(full["val_loss"], 4)  # the file keeps every digit

    assert main(["train", "--json", "--data", str(corpus), "--out_dir", str(out), "--max_steps", "2", *TINY]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    shown = json.loads(line)
    assert shown["step"] == 2 and shown["val_loss"] == round(shown["val_loss"], 4)


@pytest.mark.parametrize(("typo", "hint"), [("--max_step", "--max_steps"), ("--model.n_head", "--model.n_heads"),
                                            ("--eval-evry", "--eval_every"), ("--modl.d_model", "--model.d_model")])
def test_a_misspelled_key_gets_did_you_mean(tmp_path, corpus, capsys, typo, hint):
    assert main(["train", "--data", str(corpus), "--out_dir", str(tmp_path / "run"), typo, "3"]) == 2
    err = capsys.readouterr().err
    assert f"unknown option {typo.replace('-', '_').replace('__', '--')} (did you mean {hint}" in err
    assert not (tmp_path / "run").exists()  # refused before any work


def test_help_lists_every_key_with_its_default(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    for f in fields(TrainConfig):
        default = f.default if f.default is not MISSING else f.default_factory()
        shown = next(line for line in text.splitlines() if line.startswith(f"  --{f.name} ")).split()[1]
        if default is None or isinstance(default, bool):
            assert shown == json.dumps(default), f.name
        elif isinstance(default, (int, float)):
            assert float(shown) == default, f.name
        else:
            assert shown == (default if isinstance(default, str) else json.dumps(default)), f.name
    for f in fields(ModelConfig):
        default = json.dumps(f.default) if f.default is None or isinstance(f.default, bool) else str(f.default)
        if f.name != "vocab_size":
            shown = text.split("model keys", 1)[1].split(f" {f.name}=", 1)[1].split()[0]
            assert shown == default or float(shown) == f.default, f.name


@pytest.mark.parametrize("progress", [True, False])
def test_resume_says_what_it_resumes_counts_this_runs_tokens_and_warns(tmp_path, capsys, progress):
    """``progress: false`` quiets progress only: the resume line and the warnings are said either way."""
    helpers.train(helpers.config(tmp_path, max_steps=4))
    capsys.readouterr()
    cfg = helpers.config(tmp_path, max_steps=8, resume=True, progress=progress)
    trainer, result = helpers.train(cfg)
    err = capsys.readouterr().err
    out = tmp_path / "run"
    assert f"resuming {out}/ at step 4 of 8 (from {out / 'ckpt-000004'})" in err
    assert "warning: max_steps changed from 4 to 8 since the checkpoint" in err
    assert "add --lr_decay_steps 4 to keep the old schedule" in err
    progress_lines = [line for line in err.splitlines() if line.startswith(("step ", "model: "))]
    assert bool(progress_lines) is progress  # a line per record (no bar under capsys) and the model line
    tokens = 4 * cfg.batch_size * cfg.block_size  # the 4 steps of this call, not the 8 of the run
    assert result["tokens_per_s"] * result["wall_s"] == pytest.approx(tokens)
    assert trainer.tokens_seen == 2 * tokens


def test_schedule_warnings():
    short = TrainConfig.from_dict({"max_steps": 100, "lr_decay_steps": 2000, "warmup_steps": 10})
    [warning] = schedule_warnings(short, 0)
    assert warning.startswith("warning: lr_decay_steps 2000 is past max_steps 100: the learning rate ends at ")
    assert schedule_warnings(TrainConfig.from_dict({"max_steps": 100}), 0) == []
    constant = TrainConfig.from_dict({"max_steps": 100, "lr_schedule": "constant"})
    assert schedule_warnings(constant, 50, {"max_steps": 60}) == []  # nothing depends on max_steps
    same = TrainConfig.from_dict({"max_steps": 100, "lr_decay_steps": 60})
    assert schedule_warnings(same, 50, {"max_steps": 60, "lr_decay_steps": 60}) == []


def test_ctrl_c_prints_the_command_that_resumes(tmp_path, corpus, capsys, monkeypatch):
    out = tmp_path / "run"
    real = Trainer.train_step

    def step_then_ctrl_c(self):
        loss = real(self)
        if self.step in (2, 5):
            os.kill(os.getpid(), signal.SIGINT)  # the trainer's handler: stop after the next step, saved
        return loss

    monkeypatch.setattr(Trainer, "train_step", step_then_ctrl_c)
    argv = ["train", "--data", str(corpus), "--out_dir", str(out), "--max_steps", "10", *TINY]
    assert main(argv) == 130
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0].startswith("interrupted: step 3 of 10 in ")
    line = captured.err.splitlines()[-1]
    words = shlex.split(line.split("resume with: ", 1)[1])
    assert line.startswith("interrupted at step 3 of 10; resume with: glassformer train ")
    assert words == ["glassformer", *argv, "--resume", "true"]
    assert main(words[1:]) == 130  # the printed command continues the run, interrupted again after step 6
    err = capsys.readouterr().err
    assert f"resuming {out}/ at step 3 of 10" in err
    again = err.splitlines()[-1]
    assert again.startswith("interrupted at step 6 of 10; resume with: ")
    assert shlex.split(again.split("resume with: ", 1)[1]) == words  # --resume true once, not twice
    monkeypatch.setattr(Trainer, "train_step", real)
    assert main(words[1:]) == 0
    assert f"resuming {out}/ at step 6 of 10" in capsys.readouterr().err


def test_the_resume_command_replaces_any_resume_word():
    from glassformer.cli.commands.train import resume_command

    def command(*overrides: str) -> str:
        return resume_command(argparse.Namespace(config=None, overrides=list(overrides)))

    want = "glassformer train --max_steps 5 --resume true"
    assert command("--max_steps", "5") == want
    for given in (["--resume", "true"], ["--resume", "false"], ["--resume=true"], ["--resume=yes"]):
        assert command(*given, "--max_steps", "5") == want, given
    assert command("--max-steps", "5", "--resume", "true") == "glassformer train --max-steps 5 --resume true"


def test_an_interrupted_command_line_run_prints_the_resume_command(tmp_path, corpus):
    """The same through a real process and a real SIGINT (what Ctrl-C sends)."""
    out = tmp_path / "run"
    command = [sys.executable, "-m", "glassformer", "train", "--data", str(corpus), "--out_dir", str(out),
               "--max_steps", "1000000", "--progress", "false", *TINY, "--eval_every", "100000", "--num_threads", "1"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        helpers.wait_until_training(process, out)  # the trainer's handler is in place: no race with the import
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr[-2000:]
    step = json.loads((out / "summary.json").read_text())["step"]
    assert f"interrupted at step {step} of 1000000; resume with: glassformer train --data " in stderr
    assert stderr.rstrip().endswith("--resume true") and stdout.startswith(f"interrupted: step {step} of 1000000")


def test_a_misspelled_key_in_the_config_file_gets_did_you_mean(tmp_path, corpus, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(f"data: {corpus}\nmax_step: 3\n", encoding="utf-8")
    assert main(["train", "--config", str(config)]) == 2
    assert f"unknown key max_step in {config} (did you mean max_steps?)" in capsys.readouterr().err
    config.write_text(f"data: {corpus}\nmodel:\n  n_head: 2\n", encoding="utf-8")
    assert main(["train", "--config", str(config)]) == 2
    assert f"unknown key model.n_head in {config} (did you mean model.n_heads?)" in capsys.readouterr().err


def test_the_keys_read_from_the_source_are_the_dataclass_fields():
    from glassformer.cli.commands.train import known_keys

    known = known_keys()
    assert known[""] == {f.name for f in fields(TrainConfig)}
    assert known["model"] == {f.name for f in fields(ModelConfig)} | {"preset"}
