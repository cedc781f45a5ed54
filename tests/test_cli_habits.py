"""What users of other command lines expect: no abbreviated options, a warning for sampling options without
--sample, the valid keys for a misspelled one, a hint for a run folder, eval results named by their file."""

from __future__ import annotations

import json

import pytest

from glassformer.cli import main
from training_helpers import CORPUS, config, train, without_heartbeats


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    trainer, _ = train(config(tmp_path_factory.mktemp("habits"), max_steps=2))
    return trainer.out


def test_an_abbreviated_option_is_refused_with_the_full_name(run, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["generate", str(run / "best"), "--prompt", "To", "--max_new_token", "5"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --max_new_token 5" in err and "did you mean --max_new_tokens?" in err


def test_sampling_options_without_sample_warn(run, capsys):
    assert main(["generate", str(run / "best"), "--prompt", "To", "--max_new_tokens", "3", "--temperature",
                 "0.8"]) == 0
    err = capsys.readouterr().err
    assert "warning: --temperature 0.8 only shapes sampling; without --sample the decoding is greedy" in err
    assert main(["generate", str(run / "best"), "--prompt", "To", "--max_new_tokens", "3", "--temperature",
                 "0.8", "--sample", "--seed", "1"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_misspelled_model_key_names_the_closest_one(tmp_path, capsys):
    assert main(["train", "--data", "x.txt", "--model.n_layer", "2", "--out_dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown option --model.n_layer (did you mean --model.n_layers?); glassformer train --help lists" in err


def test_a_run_folder_instead_of_a_checkpoint_names_best_and_last(run, capsys):
    assert main(["generate", str(run), "--prompt", "To"]) == 2
    err = capsys.readouterr().err
    assert f"it is a training run's folder: give '{run / 'best'}' or '{run / 'last'}'" in err


def test_eval_on_a_file_is_labelled_by_the_file(run, tmp_path, capsys):
    data = tmp_path / "held_out.txt"
    data.write_text(CORPUS[:200], encoding="utf-8")  # characters the tokenizer knows
    assert main(["eval", str(run / "best"), "--data", str(data)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["data"] == str(data) and {"loss", "ppl", "accuracy", "tokens"} <= set(result)
    assert not any(key.startswith("val_") for key in result)


def test_train_off_a_terminal_prints_a_line_per_log_and_says_when_it_evaluates(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    assert main(["train", "--data", str(corpus), "--out_dir", str(tmp_path / "run"), "--max_steps", "4",
                 "--eval_every", "2", "--log_every", "2", "--block_size", "8", "--batch_size", "4",
                 "--model.d_model", "16", "--model.n_heads", "2", "--model.d_ff", "32"]) == 0
    err = without_heartbeats(capsys.readouterr().err.splitlines())  # capsys's stderr is no terminal: lines
    assert err[0].startswith("preparing the data: char tokenizer and token cache from 1 file(s)")
    assert err[1].startswith("model: TransformerLM causal, 2 layers x 16 wide, 2 heads")  # then the steps
    assert [line.split(" | ")[:2] for line in err[2:5]] == [
        ["step 2/4", err[2].split(" | ")[1]], ["step 2/4", "evaluating on the validation split ..."],
        ["step 2/4", err[4].split(" | ")[1]]]
    assert err[2].split(" | ")[1].startswith("train_loss ") and err[4].split(" | ")[1].startswith("val_loss ")
    assert err[-1].startswith("step 4/4 | val_loss ")


def test_generate_compile_reaches_generation_and_a_bad_value_is_one_line(run, capsys, monkeypatch):
    """``--compile true|auto`` is the library's ``compile=`` (the same tokens, tested in test_decode_compile.py);
    without it generation is not asked to compile; anything else is refused by the parser."""
    import glassformer.generation as generation

    asked, real = [], generation.generate_text

    def spy(*args, **options):
        asked.append(options.get("compile", False))
        return real(*args, **{**options, "compile": False})  # the flag's path, without minutes of compiling

    monkeypatch.setattr(generation, "generate_text", spy)
    ck = str(run / "best")
    assert main(["generate", ck, "--prompt", "To", "--max_new_tokens", "2", "--compile", "auto"]) == 0
    assert asked[-1] == "auto"
    assert main(["generate", ck, "--prompt", "To", "--max_new_tokens", "2", "--compile", "TRUE"]) == 0
    assert asked[-1] is True
    assert main(["generate", ck, "--prompt", "To", "--max_new_tokens", "2"]) == 0
    assert asked[-1] is False
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main(["generate", ck, "--prompt", "To", "--compile", "maybe"])
    assert stop.value.code == 2
    assert "argument --compile: expected false, true or auto, got 'maybe'" in capsys.readouterr().err


@pytest.mark.parametrize(("words", "hint"), [
    (["train", "--data", "x.txt", "--dtype", "float32"], "unknown option --dtype (did you mean --precision?)"),
    (["generate", "ck", "--prompt", "a", "--dtype=bfloat16"],
     "(--dtype was replaced by --precision)"),
])
def test_the_removed_dtype_option_points_to_precision(words, hint, capsys):
    try:  # a verb's own keys return 2; argparse's unrecognized arguments exit with 2
        code = main(words)
    except SystemExit as stop:
        code = stop.code
    assert code == 2
    assert hint in capsys.readouterr().err
