"""The CLI verbs demo, train, eval and sample: the lesson's result, a train -> eval -> sample round, bad input."""

from __future__ import annotations

import json
import os
import re

import pytest
import torch

from glassformer.cli import build_parser, main

CORPUS = "The quick brown fox jumps over the lazy dog.\nPack my box with five dozen liquor jugs.\n" * 6
TINY = ["--block_size", "8", "--batch_size", "4", "--max_steps", "4", "--eval_every", "2", "--progress", "false",
        "--device", "cpu", "--model.d_model", "16", "--model.n_heads", "2", "--model.n_layers", "1",
        "--model.d_ff", "32"]


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_demo_runs_the_tiny_char_lm_lesson(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "generated: '春天来了，花开了。" in printed
    result = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert result["generation"]["text"].startswith("春天来了，花开了。")
    assert result["final_train_token_accuracy"] >= 0.9
    for key in ("torch_version", "lines", "corpus", "vocab", "configuration", "window_count", "shapes",
                "shift_example", "norm_example", "causal_earlier_logits_max_diff", "history"):
        assert key in result
    assert result["window_count"] == 24 and len(result["vocab"]) == 18
    assert result["causal_earlier_logits_max_diff"] == 0.0
    assert result["history"][0]["step"] == 0 and result["history"][-1]["step"] == 320
    assert result["history"][-1]["train_loss"] < 0.2 < result["history"][0]["train_loss"]
    first = result["generation"]["steps"][0]
    assert first["chosen"] == "花" and len(first["top4"]) == 4 and first["top4"][0]["char"] == "花"
    assert result["checkpoint"]["reload_max_logit_diff"] == 0.0
    for name in ("loss_curve.png", "attention_layer1.png", "attention_layer2.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "run" / "loss.png").read_bytes()[:4] == b"\x89PNG"  # the trainer's curve, drawn by the lesson


def test_demo_lesson2_is_still_reachable():
    args = build_parser().parse_args(["demo", "--lesson2"])
    assert args.lesson2 and args.verb == "demo"


@pytest.mark.parametrize("verb", ["demo", "train", "eval", "generate"])
def test_help(verb, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([verb, "--help"])
    assert exit_.value.code == 0 and "usage: glassformer " + verb in capsys.readouterr().out


def test_train_eval_sample(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"data: {corpus}\nlr: 3.0e-3\nmodel:\n  pos: learned\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["train", "--config", str(recipe), "--out_dir", str(out), *TINY]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("done: step 4 of 4 in ") and printed[1].startswith("train_loss ")
    assert printed[2] == f"checkpoints in {out / 'last'} and {out / 'best'}; summary in {out / 'summary.json'}"
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))  # the full numbers
    assert summary["step"] == 4 and summary["stopped"] == "done" and "history" not in summary
    assert (out / "loss.png").read_bytes()[:4] == b"\x89PNG"  # drawn by the command from the returned history
    assert json.loads((out / "last" / "config.json").read_text())["pos"] == "learned"

    assert main(["eval", str(out / "best"), "--data", str(corpus)]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["objective"] == "clm" and metrics["tokens"] == len(CORPUS) - 1
    assert metrics["bits_per_char"] > 0 and metrics["data"] == str(corpus)  # labelled by the file, not val_*

    assert main(["generate", str(out / "best"), "--prompt", "The ", "--max_new_tokens", "10", "--sample",
                 "--seed", "1"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("The ") and len(text.rstrip("\n")) >= 4
    assert main(["generate", str(out / "best"), "--prompt", "The ", "--max-new-tokens", "10"]) == 0


def _error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("glassformer: error: ") and err.count("\n") == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"),
    (b"", "is empty"),
    ("café\n".encode("latin-1"), "is not UTF-8 text"),
    (b"tiny\n", "has 5 tokens, fewer than one window of block_size \\+ 1 = 9"),
])
def test_bad_corpus(tmp_path, capsys, content, message):
    corpus = tmp_path / "corpus.txt"
    if content is not None:
        corpus.write_bytes(content)
    err = _error(capsys, ["train", "--data", str(corpus), "--out_dir", str(tmp_path / "o"), "--val_fraction", "0",
                          *TINY])
    assert re.search(message, err), err


@pytest.mark.parametrize("overrides, message", [
    (["--learning_rate", "1"], "unknown option --learning_rate; glassformer train --help lists the keys"),
    (["--model.widht", "3"], "unknown option --model.widht; glassformer train --help lists the keys"),
    (["--batch_size", "0"], "batch_size must be an int >= 1, got 0"),
    (["--lr", "-1"], "lr must be a finite number > 0.0, got -1.0"),
    (["--lr", "nan"], "lr must be a finite number > 0.0, got nan"),
    (["--beta2", "1"], "beta2 must be a finite number >= 0.0 and < 1.0, got 1.0"),
    (["--weight_decay", "inf"], "weight_decay must be a finite number >= 0.0, got inf"),
    (["--block_size", "many"], "block_size must be a number (int), got 'many'"),
    (["--model.n_heads", "3"], "d_model=16 must be divisible by n_heads=3"),
    (["--objective", "gan"], "objective must be one of"),
])
def test_bad_config(tmp_path, capsys, overrides, message):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    err = _error(capsys, ["train", "--data", str(corpus), "--out_dir", str(tmp_path / "o"), *TINY, *overrides])
    assert message in err, err


def test_bad_config_file_and_checkpoint(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("lr: [1, 2\n", encoding="utf-8")
    assert "is not valid YAML" in _error(capsys, ["train", "--config", str(tmp_path / "bad.yaml")])
    assert "config file" in _error(capsys, ["train", "--config", str(tmp_path / "missing.yaml")])
    assert "needs data" in _error(capsys, ["train"])
    assert "does not exist" in _error(capsys, ["eval", str(tmp_path / "nope"), "--data", "x.txt"])
    assert "does not exist" in _error(capsys, ["generate", str(tmp_path / "nope"), "--prompt", "x"])


def test_overrides_from_argv_then_applied_to_a_config():
    from glassformer.cli.commands.overrides import overrides_from_argv
    from glassformer.errors import UsageError
    from glassformer.training import TrainConfig, apply_overrides

    pairs = overrides_from_argv(["--lr", "3e-4", "--model.n_layers=2", "--max-steps", "7", "--data", "[a, b]",
                                 "--compile", "true"])
    assert pairs == [("lr", "3e-4"), ("model.n_layers", "2"), ("max_steps", "7"), ("data", "[a, b]"),
                     ("compile", "true")]  # the text as written: the config types each by its field
    base = {"lr": 1.0, "model": {"d_model": 16}}
    merged = apply_overrides(base, pairs)
    assert merged["model"] == {"d_model": 16, "n_layers": "2"} and merged["max_steps"] == "7"
    typed = TrainConfig.from_dict(merged)
    assert (typed.lr, typed.model, typed.max_steps, typed.data, typed.compile) == (3e-4, {"d_model": 16, "n_layers": 2},
                                                                                  7, ["a", "b"], True)
    assert base == {"lr": 1.0, "model": {"d_model": 16}}  # the input is not modified
    config = TrainConfig.from_yaml(None, {"block_size": "12", "model.n_heads": 2})  # a mapping works too
    assert config.block_size == 12 and config.model == {"n_heads": 2}
    for argv, message in ((["lr", "1"], "expected an override like --key value, got 'lr'"),
                          (["--lr"], "override --lr has no value")):
        with pytest.raises(UsageError, match=message):
            overrides_from_argv(argv)


def test_commands_do_not_import_the_cli():
    """The verbs raise glassformer's own errors; nothing in glassformer.cli.commands imports glassformer.cli."""
    import ast
    from pathlib import Path

    import glassformer.cli.commands

    for path in Path(glassformer.cli.commands.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                assert not (node.module == "cli" or (node.module or "").endswith("glassformer.cli")), path.name


def test_train_draws_the_loss_curve_even_when_training_diverges(tmp_path, capsys, monkeypatch):
    import glassformer.training.loop as loop

    real_loss, calls = loop.batch_loss, {"train": 0}

    def poisoned(model, batch, label_smoothing=0.0, count_correct=True, **options):
        parts = real_loss(model, batch, label_smoothing, count_correct, **options)
        calls["train"] += model.training
        if model.training and calls["train"] >= 3:  # steps 1 and 2 are fine, step 3 diverges
            parts.loss_sum = parts.loss_sum * float("nan")
        return parts

    monkeypatch.setattr(loop, "batch_loss", poisoned)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    out = tmp_path / "out"
    err = _error(capsys, ["train", "--data", str(corpus), "--out_dir", str(out), *TINY, "--log_every", "1"])
    assert "training loss became nan at step 3" in err
    assert f"The last good checkpoint is kept in {out / 'last'}" in err  # it exists: the evaluation at step 2
    assert os.readlink(out / "last") == "ckpt-000002" and not list(out.glob("*ckpt-000003*"))
    logged = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert logged == [1, 2, 2]  # two training records and the evaluation at step 2
    assert (out / "loss.png").read_bytes()[:4] == b"\x89PNG"  # drawn from the history the failed run left


def test_command_line_values_are_typed_by_the_field_they_set(tmp_path, capsys):
    """Strings as written (a YAML comment cut ``exp #2`` to ``exp``; ``null``, ``yes``, ``0123`` changed type),
    numbers as numbers, YAML only for lists and mappings; an alias bomb refused at once, in one line."""
    from glassformer.cli.commands.overrides import overrides_from_argv
    from glassformer.training import TrainConfig, apply_overrides

    argv = ["--out_dir", str(tmp_path / "exp #2"), "--src", "a\nb", "--cache_dir", "null", "--device", "cpu",
            "--tokenizer_vocab_size", "0123", "--resume", "yes", "--num_threads", "null", "--model", "{n_layers: 2}",
            "--data", "notes #1.txt", "--specials", "[pad]", "--watch.heads", "[[0, 0]]", "--lr=1e-3"]
    config = TrainConfig.from_dict(apply_overrides({}, overrides_from_argv(argv)))
    assert (config.out_dir, config.src, config.cache_dir, config.tokenizer_vocab_size, config.resume) == (
        str(tmp_path / "exp #2"), "a\nb", "null", 123, True)
    assert (config.num_threads, config.model, config.data, config.specials, config.watch, config.lr) == (
        None, {"n_layers": 2}, ["notes #1.txt"], ["pad"], {"heads": [[0, 0]]}, 1e-3)
    from glassformer.validate import untyped  # a recipe's own keys: no field types them

    assert [untyped(v) for _, v in overrides_from_argv(["--a", "0.5", "--b", "[4, 8]", "--c", "true", "--d", "x #y",
                                                        "--e", "12", "--f", "nan"])] == [0.5, [4, 8], True, "x #y", 12,
                                                                                         "nan"]
    bomb = "[" + ", ".join(["&a [x, x, x, x, x, x, x, x]", *["*a"] * 9]) + "]"
    for key, value, message in (("--model", "{a: &b [1, 2], c: *b}", "alias"), ("--data", bomb, "alias"),
                                ("--max_steps", "ten", "max_steps must be a number"),
                                ("--compile", "maybe", "compile must be true or false")):
        assert main(["train", "--out_dir", str(tmp_path / "o"), key, value]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "exp").exists() and not (tmp_path / "o").exists()
