"""Every recipe in configs/ runs end to end in a shortened form (a few steps of a tiny model, on small
stand-in corpora laid out like the real ones), so none of them rots. No network: data is written here."""

import gzip
import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from glassformer.cli import main as cli_main
from glassformer.recipes import SequenceTask, load_recipe
from glassformer.recipes.summary import verdict
from glassformer.training import TrainConfig


def main(argv: list[str]) -> int:
    """``glassformer recipe ...``."""
    return cli_main(["recipe", *argv])

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
RECIPES = sorted(p.name for p in CONFIGS.glob("*.yaml") if "recipe:" in p.read_text(encoding="utf-8"))
TINY = ["--max_steps", "2", "--eval_every", "0", "--batch_size", "4", "--eval_batch_size", "8", "--eval_batches",
        "2", "--log_every", "1", "--model.d_model", "16", "--model.n_heads", "2", "--model.d_ff", "32"]
# Per recipe: further overrides that keep it small (layer counts, vocabulary, block, evaluation size).
SHORTEN = {
    "shakespeare_char_fast.yaml": ["--block_size", "16", "--model.n_layers", "1", "--model.max_len", "16",
                                   "--recipe.sample_tokens", "5"],
    "tang_poems_char.yaml": ["--block_size", "8", "--model.n_layers", "1", "--recipe.sample_tokens", "4",
                             "--recipe.prompts", "[床, 月]"],
    "mlm_shakespeare_bpe.yaml": ["--block_size", "16", "--model.n_layers", "1", "--tokenizer_vocab_size", "300",
                                 "--recipe.examples", "2"],
    "multi30k_de_en.yaml": ["--block_size", "24", "--model.n_enc", "1", "--model.n_dec", "1",
                            "--tokenizer_vocab_size", "300", "--recipe.beams", "[2]", "--recipe.test_split", "val"],
    "prefix_reverse.yaml": ["--model.n_layers", "1", "--recipe.max_len", "5", "--recipe.eval_examples", "8"],
    "prefix_lookahead.yaml": ["--model.n_layers", "1", "--recipe.max_len", "5", "--recipe.eval_examples", "8"],
    "shakespeare_char_sae.yaml": ["--block_size", "16", "--model.n_layers", "3", "--model.max_len", "16",
                                  "--recipe.steps", "3", "--recipe.batch_size", "32", "--recipe.buffer_size", "64",
                                  "--recipe.model_batch", "4", "--recipe.feature_windows", "4",
                                  "--recipe.eval_batches", "1", "--recipe.log_every", "1"],
    "induction_heads.yaml": ["--block_size", "24", "--recipe.gpt2_steps", "2", "--recipe.measure_every", "1",
                             "--recipe.probe_length", "8", "--recipe.probe_batch", "4"],
    "induction_heads_mlp.yaml": ["--block_size", "24", "--recipe.mlp_from_step", "1", "--recipe.measure_every", "1",
                                 "--recipe.probe_length", "8", "--recipe.probe_batch", "4"],
}
VERSE = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
         "ROMEO:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. resolved.\n\n")
PAIRS = [("Ein Hund läuft über das Gras.", "A dog runs across the grass."),
         ("Zwei Männer sprechen miteinander.", "Two men are talking to each other."),
         ("Eine Frau liest ein Buch.", "A woman is reading a book."),
         ("Kinder spielen im Park.", "Children play in the park.")]
POEM = "\x1b[32m《{t}》\x1b[m\n\x1b[33m作者：李白\x1b[m\n床前明月光，疑是地上霜。\n举头望明月，低头思故乡。\n"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    (root / "tinyshakespeare").mkdir()
    (root / "tinyshakespeare/input.txt").write_text(VERSE * 12, encoding="utf-8")
    (root / "multi30k").mkdir()
    for split in ("train", "val", "test_2016_flickr"):
        for lang, side in (("de", 0), ("en", 1)):
            with gzip.open(root / f"multi30k/{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("".join(pair[side] + "\n" for pair in PAIRS * 3))
    (root / "tang300").write_text("%\n".join(POEM.format(t=f"静夜思{i}") for i in range(12)), encoding="utf-8")
    return root


def test_every_recipe_is_covered():
    assert set(RECIPES) == set(SHORTEN), "add the new recipe to SHORTEN"


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_runs_shortened(name, data_dir, tmp_path, capsys):
    overrides = [*TINY, *SHORTEN[name], "--out_dir", str(tmp_path / "out"), "--recipe.source",
                 str(data_dir / "tang300")]
    assert main([str(CONFIGS / name), "--data-dir", str(data_dir), *overrides]) == 0
    results = json.loads((tmp_path / "out/results.json").read_text(encoding="utf-8"))
    assert results["config"]["max_steps"] == 2 and results["wall_s"] > 0
    task = results["task"]
    captured = capsys.readouterr()
    printed = captured.out  # a short summary, not the JSON (that is in results.json)
    # into a file (capsys is no terminal) every recipe beats: its stages, and a line per logged training step
    assert "recipe: " in captured.err and "step 2/2 | train_loss " in captured.err, captured.err
    if task == "sae":  # and its SAE a line per logged SAE step
        assert "\nsae step 3/3 | " in captured.err, captured.err
    lines = printed.splitlines()
    assert lines[0].startswith(f"recipe {task}") and lines[-1] == f"everything in {tmp_path / 'out'}/results.json"
    assert len(lines) < 60 and not printed.lstrip().startswith("{")
    for sample in results.get("samples", []):
        assert "\n".join("    " + line for line in sample["text"].splitlines()) in printed  # as text, not escaped
    if task == "prefix-vs-causal":
        assert lines[-2] == verdict(results["models"])
        for model, folder in (("prefix-LM", "prefix"), ("causal LM", "clm")):
            assert 0.0 <= results["models"][model]["exact_match"] <= 1.0
            assert results["models"][model]["training"]["step"] == 2
            assert "history" not in results["models"][model]["training"]
            assert (tmp_path / "out" / folder / "loss.png").read_bytes()[:4] == b"\x89PNG"
        return
    if task == "induction":
        for run in results["runs"].values():  # the attention-only model and the GPT-2 one
            assert [r["step"] for r in run["history"]] == [0, 1, 2]
            assert (Path(run["out_dir"]) / "phase_change.png").read_bytes()[:4] == b"\x89PNG"
        return
    assert results["training"]["step"] == 2 and results["training"]["val_loss"] > 0
    assert "history" not in results["training"]
    assert (tmp_path / "out/loss.png").read_bytes()[:4] == b"\x89PNG"  # drawn by the recipe from the history
    if task == "lm":
        assert [s["prompt"] for s in results["samples"]] == results["recipe"]["prompts"]
        assert all(s["text"].startswith(s["prompt"]) for s in results["samples"])
    elif task == "sae":  # the SAE on the model just trained: metrics and feature pages
        assert results["sae"]["metrics"]["tokens"] > 0 and Path(results["sae"]["features_html"]).is_file()
    elif task == "mlm":
        assert 0 <= results["training"]["val_accuracy"] <= 1
        for example in results["fill_mask"]:
            assert "[MASK]" in example["text"] and len(example["top5"]) == 5
    else:
        scores = results["bleu"]
        assert scores["sentences"] == 12 and set(scores) >= {"greedy", "beam2"}
        assert 0 <= scores["greedy"]["bleu"] <= 100
        assert (tmp_path / "out/val.greedy.en").read_text(encoding="utf-8").count("\n") == 12
    assert f"training: done: step 2 of 2 in {results['training']['wall_s']:.1f} s" in printed


def test_recipe_json_and_did_you_mean(data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["prefix_reverse", "--max_step", "2", "--out_dir", str(out)]) == 2
    assert "unknown option --max_step (did you mean --max_steps?)" in capsys.readouterr().err
    assert not out.exists()
    assert main(["prefix_reverse", "--json", *TINY, *SHORTEN["prefix_reverse.yaml"], "--out_dir", str(out)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["task"] == "prefix-vs-causal" and "config" not in shown and set(shown["models"]) == {
        "prefix-LM", "causal LM"}


def test_the_verdict_follows_the_numbers():
    low, high = {"exact_match": 0.623, "symbol_accuracy": 0.9}, {"exact_match": 1.0, "symbol_accuracy": 1.0}
    assert verdict({"prefix-LM": low, "causal LM": high}) == "causal LM wins: 1.000 vs 0.623 exact match (prefix-LM)"
    assert verdict({"prefix-LM": high, "causal LM": low}) == "prefix-LM wins: 1.000 vs 0.623 exact match (causal LM)"
    assert verdict({"prefix-LM": {**low, "symbol_accuracy": 0.95}, "causal LM": low}).startswith(
        "prefix-LM wins on symbols: both 0.623 exact match, 0.950 vs 0.900")
    assert verdict({"prefix-LM": high, "causal LM": high}) == "a tie: both 1.000 exact match and 1.000 symbol accuracy"


def test_recipes_hold_valid_training_configs(data_dir):
    for name in RECIPES:
        recipe = load_recipe(CONFIGS / name, [("recipe.source", str(data_dir / "tang300")),
                                              ("out_dir", str(data_dir / "out"))], data_dir)
        assert isinstance(recipe.train, TrainConfig)
        if recipe.train.objective != "seq2seq" and recipe.spec["task"] != "prefix-vs-causal":
            assert all(Path(p).is_file() for p in recipe.train.data)


def test_recipe_errors_are_named(tmp_path, data_dir, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("max_steps: 3\n")
    with pytest.raises(ValueError, match="'recipe:' section"):
        load_recipe(bad)
    bad.write_text("recipe: {task: dance}\n")
    with pytest.raises(ValueError, match="recipe.task must be one of"):
        load_recipe(bad)
    assert main([str(CONFIGS / "multi30k_de_en.yaml"), "--data-dir", str(tmp_path)]) == 2  # tinyshakespeare is shipped
    err = capsys.readouterr().err
    assert err.startswith("glassformer: error: ") and "--download" in err
    assert main([str(CONFIGS / "shakespeare_char_fast.yaml"), "--max_steps"]) == 2
    assert "override --max_steps has no value" in capsys.readouterr().err


def test_load_recipe_takes_a_mapping_and_split_overrides(tmp_path):
    config = {"recipe": {"task": "prefix-vs-causal", "kind": "reverse"}, "max_steps": 5, "model": {"d_model": 16}}
    recipe = load_recipe(config, {"recipe.kind": "sort", "model.n_heads": 2, "out_dir": str(tmp_path)})
    assert recipe.spec == {"task": "prefix-vs-causal", "kind": "sort"}
    assert recipe.train.model == {"d_model": 16, "n_heads": 2} and recipe.train.max_steps == 5
    assert config["recipe"]["kind"] == "reverse" and "n_heads" not in config["model"]  # the input is untouched


def test_python_m_glassformer_is_the_command_line():
    done = subprocess.run([sys.executable, "-m", "glassformer", "recipe", "--help"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0 and "usage: glassformer recipe" in done.stdout
    assert "shakespeare_char_fast" in done.stdout  # the shipped recipes are listed


def test_sequence_task_batches():
    task = SequenceTask("reverse", "prefix", alphabet="abc", min_len=2, max_len=4, seed=3)
    assert task.answer("abcc") == "ccba" and SequenceTask("sort", alphabet="cab").answer("cab") == "abc"
    inputs = ["ab", "cab"]
    batch = task.batch(inputs)
    decode = task.tokenizer.decode
    assert decode(batch["ids"][1].tolist()) == "cab=bac.."  # right-padded with the end mark
    assert batch["prefix_len"].tolist() == [3, 4]
    labelled = [decode([t for t in row.tolist() if t >= 0]) for row in batch["labels"]]
    assert labelled == ["ba.", "bac."]  # only the output and its end are predicted
    assert (batch["labels"][1, :3] == -100).all() and batch["labels"][1, 3] == task.tokenizer.encode("b")[0]
    causal = SequenceTask("reverse", "clm", alphabet="abc", min_len=2, max_len=4, seed=3)
    assert "prefix_len" not in causal.global_batch(0, 2)
    assert torch.equal(causal.global_batch(5, 8)["ids"], task.global_batch(5, 8)["ids"])
    with pytest.raises(ValueError, match="alphabet"):
        SequenceTask(alphabet="ab=")


def test_count_task_counts_later_copies():
    again = SequenceTask("count", "prefix", alphabet="abc")  # max_count=1: "does it occur again later?"
    assert again.answer("abcab") == "11000" and again.answer("aaaa") == "1110"
    capped = SequenceTask("count", alphabet="abc", max_count=2)
    assert capped.answer("aaaab") == "22100"
    batch = again.batch(["aba"])
    assert again.tokenizer.decode(batch["ids"][0].tolist()).startswith("aba=100.")
    assert batch["prefix_len"].tolist() == [4]
    with pytest.raises(ValueError, match="must not contain any"):
        SequenceTask("count", alphabet="ab1")
    with pytest.raises(ValueError, match=r"max_count must be an int in \[1, 9\], got 0"):
        SequenceTask("count", max_count=0)


@pytest.mark.parametrize("script", ["10_tiny_char_lm.py", "11_objective_mlm.py", "13_objective_seq2seq.py",
                                    pytest.param("12_objective_prefix.py", marks=pytest.mark.slow)])
def test_objective_lessons_run(script, capsys):
    runpy.run_path(str(CONFIGS.parent / "examples" / script), run_name="__main__")
    out = capsys.readouterr().out
    assert {"10_tiny_char_lm.py": "greedy continuation of '春天来了，': '春天来了，花开了。",
            "11_objective_mlm.py": "-> 'c':", "13_objective_seq2seq.py": "exactly right",
            "12_objective_prefix.py": "sort     causal LM"}[script] in out
