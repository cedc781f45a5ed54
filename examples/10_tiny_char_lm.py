"""Lesson 2 · objectives 1: the causal LM (next-token prediction), as the tiny character LM lesson.

Run: python examples/10_tiny_char_lm.py   (a few seconds on a CPU)
Four lines of text, a 2-layer model 32 wide: every window predicts each next character from the ones
before it. After training, greedy decoding from "春天来了，" continues the pattern, and the trace
shows the top candidates at each step.
"""

import torch

from glassformer import ModelConfig, TransformerLM
from glassformer.generation import format_trace, trace_generation
from glassformer.runtime import tune
from glassformer.tokenizers import CharTokenizer
from glassformer.training import batch_loss

LINES = ["春天来了，花开了。", "夏天来了，蝉叫了。", "秋天来了，叶落了。", "冬天来了，雪下了。"]
CONTEXT, STEPS = 16, 320

if __name__ == "__main__":
    tune()  # one thread per free core: threads spinning against a busy core made this lesson 23x slower
    torch.manual_seed(1212)
    corpus = "\n".join(LINES) + "\n"
    tokenizer = CharTokenizer.from_text(corpus)
    ids = torch.tensor(tokenizer.encode(corpus))
    # every window of CONTEXT characters and its targets, shifted by one: y[:, t] == x[:, t + 1]
    x = torch.stack([ids[i:i + CONTEXT] for i in range(len(ids) - CONTEXT)])
    y = torch.stack([ids[i + 1:i + CONTEXT + 1] for i in range(len(ids) - CONTEXT)])
    assert torch.equal(x[:, 1:], y[:, :-1])
    print(f"corpus: {len(corpus)} characters, vocabulary {tokenizer.vocab_size}, windows {tuple(x.shape)}")

    model = TransformerLM(ModelConfig.preset("tiny-char", vocab_size=tokenizer.vocab_size, max_len=CONTEXT))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batch = {"ids": x, "labels": y}
    for step in range(STEPS + 1):
        parts = batch_loss(model, batch)
        loss = parts.loss_sum / parts.count
        if step % 80 == 0:
            print(f"step {step:>3}  next-character loss {loss.item():.3f}  (uniform guess: "
                  f"{torch.log(torch.tensor(float(tokenizer.vocab_size))):.3f})")
        if step < STEPS:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    prompt = "春天来了，"
    records = trace_generation(model, tokenizer.encode(prompt), max_new_tokens=5, tokenizer=tokenizer)
    print(f"\ngreedy continuation of {prompt!r}: {prompt + ''.join(r['chosen_text'] for r in records)!r}")
    print(format_trace(records))
