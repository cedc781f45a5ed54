"""Lesson 2 · objectives 3: the prefix-LM, next to a causal LM of the same size, on reverse, sort and count.

Run: python examples/12_objective_prefix.py   (seconds on an idle CPU)
An example is "cab=bac.": the prefix "cab=" is read both ways by the prefix-LM (one-way by the causal
LM), and only "bac." is predicted. The script prints the mask of one example, then trains both
models with the same seed, steps and size, and prints how many held-out inputs each maps exactly right,
with one held-out example marked right or wrong (at 200 steps most answers are still wrong).
"count" ("abcab=11000.": does each symbol occur again later?) needs look-ahead inside the input: that
is where reading the prefix both ways pays. The full-size comparisons (configs/prefix_lookahead.yaml,
configs/prefix_reverse.yaml) and their figures are in docs/results.md.
"""

import torch

from glassformer import TransformerLM
from glassformer.io.textwidth import pad
from glassformer.recipes import SequenceTask, exact_match
from glassformer.training import batch_loss

STEPS, BATCH = 200, 64

if __name__ == "__main__":
    torch.set_num_threads(1)
    example = SequenceTask("reverse", "prefix", alphabet="abc", min_len=3, max_len=3).batch(["cab"])
    model = TransformerLM(vocab_size=5, d_model=16, n_heads=2, n_layers=1, d_ff=32, attn="prefix", max_len=7)
    mask = model.make_mask(7, prefix_len=example["prefix_len"])[0, 0].int()
    print("prefix-LM mask of 'cab=bac' (row: query, column: key; the prefix 'cab=' sees itself both ways):")
    for char, row in zip("cab=bac", mask.tolist(), strict=True):
        print(f"  {char}  {' '.join(map(str, row))}")
    print(f"labels (predicted only after the prefix): {example['labels'][0].tolist()}\n")

    for kind in ("reverse", "sort", "count"):
        for objective in ("prefix", "clm"):
            task = SequenceTask(kind, objective, alphabet="abcdef", min_len=3, max_len=6, eval_examples=128)
            torch.manual_seed(0)
            model = TransformerLM(vocab_size=task.tokenizer.vocab_size, d_model=64, n_heads=4, n_layers=2,
                                  d_ff=128, attn="prefix" if objective == "prefix" else "causal", pos="learned",
                                  max_len=task.block_size)
            optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
            for step in range(STEPS):
                parts = batch_loss(model, task.global_batch(step, BATCH))
                optimizer.zero_grad()
                (parts.loss_sum / parts.count).backward()
                optimizer.step()
            found = exact_match(model, task)
            name = "prefix-LM" if objective == "prefix" else "causal LM"
            source, output = found["examples"][0]
            want = task.answer(source)
            verdict = "right" if output == want else f"wrong, want {want}"
            print(f"{pad(kind, 8)} {pad(name, 10)} exact match {found['exact_match']:.2f}  symbols right "
                  f"{found['symbol_accuracy']:.2f}  e.g. {source} -> {output} ({verdict})")
