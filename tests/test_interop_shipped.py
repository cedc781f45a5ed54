"""Every shipped configuration (configs/*.yaml, the recipes) exports to Hugging Face with equal logits, or says
why it cannot: a tiny model of each config's shape (narrow, trained-looking weights) is saved with
``save_hf_dir``, read back by ``transformers.AutoModelForCausalLM`` and compared; RoPE models also generate
past their training block in transformers, as they can (no position table)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from glassformer.interop import load_hf_dir, save_hf_dir  # noqa: E402
from glassformer.interop.families import OPEN_CONTEXT  # noqa: E402
from glassformer.models import build_model  # noqa: E402
from glassformer.recipes.run import SHIPPED  # noqa: E402
from glassformer.training.config import TrainConfig, read_yaml  # noqa: E402

V = 50
NARROW = {"d_model": 16, "n_heads": 2, "d_ff": 32}  # the shape's kind kept, its width cut (fast)
# What each shipped causal LM exports as: bias-free GPT-2 gets zero biases, RoPE + LayerNorm is GPT-NeoX,
# the attention-only induction model gets a zero feed-forward sub-layer.
EXPORTS = {"induction_heads": "GPTNeoXForCausalLM", "induction_heads_mlp": "GPTNeoXForCausalLM",
           "prefix_lookahead": "GPT2LMHeadModel",
           "prefix_reverse": "GPT2LMHeadModel", "shakespeare_char": "GPT2LMHeadModel",
           "shakespeare_char_gpu": "GPT2LMHeadModel",
           "shakespeare_char_sae": "GPT2LMHeadModel", "tang_poems_char": "GPT2LMHeadModel"}
# The shapes no transformers class computes, and the reason the error gives.
REFUSED = {"mlm_shakespeare_bpe": "BERT, is post-norm", "multi30k_de_en": "BART, is post-norm",
           "shakespeare_char_fast": "qk_norm: no family here normalises"}


def shipped_model(name: str, **model):
    """A random model of the shipped recipe ``name``'s shape (narrow), every tensor perturbed (norm gains not 1)."""
    data = read_yaml(SHIPPED / f"{name}.yaml")
    data.pop("recipe", None)
    data.pop("watch", None)
    data["model"] = {**data.get("model", {}), **NARROW, **model}
    data.setdefault("data", ["unused.txt"])
    torch.manual_seed(0)
    ours = build_model(TrainConfig.from_dict(data).model_config(V)).eval()
    with torch.no_grad():
        for p in ours.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return ours


def test_every_shipped_config_is_covered():
    assert sorted([*EXPORTS, *REFUSED]) == sorted(path.stem for path in SHIPPED.glob("*.yaml"))


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_shipped_config_exports_with_equal_logits(name, tmp_path):
    ours = shipped_model(name)
    save_hf_dir(ours, None, tmp_path / "hf")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert type(theirs).__name__ == EXPORTS[name]
    c = ours.config
    ids = torch.randint(0, V, (2, c.max_len))  # the whole training block
    back, _ = load_hf_dir(tmp_path / "hf")  # and glassformer reads the folder back (without transformers)
    with torch.no_grad():
        torch.testing.assert_close(theirs(ids).logits, ours(ids), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(back(ids), ours(ids), rtol=1e-5, atol=1e-5)
    # the context the export declares: the learned table's rows, or (RoPE) more than the training block
    limit = theirs.config.max_position_embeddings
    assert limit == (c.max_len if c.pos == "learned" else max(c.max_len, OPEN_CONTEXT))


@pytest.mark.parametrize("name", sorted(n for n, cls in EXPORTS.items() if cls == "GPTNeoXForCausalLM"))
def test_rope_export_generates_past_the_training_block(name, tmp_path):
    ours = shipped_model(name)
    save_hf_dir(ours, None, tmp_path / "hf")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    block = ours.config.max_len
    prompt = torch.randint(0, V, (1, block - 4))
    out = theirs.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert out.shape[1] == block + 8  # 8 tokens past the training block
    with torch.no_grad():  # each generated token is glassformer's greedy choice on the whole sequence
        greedy = ours(out[:, :-1]).argmax(-1)[:, prompt.shape[1] - 1:]
    assert torch.equal(greedy, out[:, prompt.shape[1]:])


def test_learned_positions_export_their_table_size(tmp_path):
    ours = shipped_model("shakespeare_char_gpu")
    save_hf_dir(ours, None, tmp_path / "hf")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert theirs.config.n_positions == ours.config.max_len == 256


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_shipped_config_without_a_hugging_face_form_says_why(name, tmp_path):
    with pytest.raises(ValueError, match=f"no Hugging Face architecture matches.*{REFUSED[name]}"):
        save_hf_dir(shipped_model(name), None, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_prefix_lm_of_the_prefix_recipes_says_why(tmp_path):
    with pytest.raises(ValueError, match="a prefix-LM has no exact Hugging Face form"):
        save_hf_dir(shipped_model("prefix_reverse", attn="prefix"), None, tmp_path / "hf")


def test_a_trained_rope_run_converts_with_its_char_tokenizer(tmp_path, capsys):
    """`glassformer train` on the shakespeare_char_fast shape (RoPE, no biases, Muon) without its QK-norm (which no
    family exports), then `glassformer convert`: transformers reads a GPT-NeoX model and the character tokenizer,
    and computes the same logits."""
    import yaml

    from glassformer import load
    from glassformer.cli import main

    data = read_yaml(SHIPPED / "shakespeare_char_fast.yaml")
    data.pop("recipe", None)
    data["model"] = {**data["model"], **NARROW, "max_len": 32, "qk_norm": False}
    (tmp_path / "fast.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 20, encoding="utf-8")
    run, hf = tmp_path / "run", tmp_path / "hf"
    assert main(["train", "--config", str(tmp_path / "fast.yaml"), "--data", str(corpus), "--out_dir", str(run),
                 "--max_steps", "2", "--eval_every", "0", "--progress", "false", "--block_size", "32"]) == 0
    assert main(["convert", str(run / "best"), str(hf)]) == 0
    ours, tokenizer = load(run / "best")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(hf).eval()
    assert type(theirs).__name__ == "GPTNeoXForCausalLM"
    text = "Citizen: hear me."
    ids = tokenizer.encode(text)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(hf)
    assert hf_tokenizer(text)["input_ids"] == ids and hf_tokenizer.decode(ids) == text
    with torch.no_grad():
        torch.testing.assert_close(theirs(torch.tensor([ids])).logits, ours.eval()(torch.tensor([ids])),
                                   rtol=1e-5, atol=1e-5)
    capsys.readouterr()
