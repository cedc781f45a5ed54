"""Lesson 2 · objectives 4: sequence-to-sequence (the 2017 Transformer): an encoder reads the source,
a decoder writes the target token by token, looking back at the source through cross-attention.

Run: python examples/13_objective_seq2seq.py   (seconds on an idle CPU)
A toy German -> English task (number words: "drei eins" -> "three one"). Shows the teacher-forcing
batch (the decoder input is the target shifted right), trains a 1+1-layer encoder-decoder, and
translates held-out inputs with glassformer.generation.translate.
"""

import random

import torch

from glassformer import EncoderDecoder
from glassformer.data import collate_pairs, encode_pairs
from glassformer.generation import translate
from glassformer.io.textwidth import pad
from glassformer.tokenizers import CharTokenizer
from glassformer.training import batch_loss

DE = ["null", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun"]
EN = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
STEPS, BATCH = 300, 32


def pair(rng: random.Random) -> tuple[str, str]:
    digits = [rng.randrange(10) for _ in range(rng.randint(1, 3))]
    return " ".join(DE[d] for d in digits), " ".join(EN[d] for d in digits)


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = random.Random(0)
    tokenizer = CharTokenizer.from_text(" ".join(DE + EN), specials=["pad", "bos", "eos"])
    example = collate_pairs(encode_pairs([("zwei eins", "two one")], tokenizer, 40), tokenizer.pad_id)
    src, tgt_in, labels = (tokenizer.decode(example[k][0].tolist(), skip_special_tokens=False)
                           for k in ("src", "tgt_in", "labels"))
    print(f"src     {src!r}\ntgt_in  {tgt_in!r}"
          f"   (decoder input: <bos> + target)\nlabels  {labels!r}"
          "   (what each decoder position must predict: target + <eos>)\n")

    model = EncoderDecoder(vocab_size=tokenizer.vocab_size, d_model=64, n_heads=4, n_enc=1, n_dec=1, d_ff=128,
                           max_len=40)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(STEPS + 1):
        batch = collate_pairs(encode_pairs([pair(rng) for _ in range(BATCH)], tokenizer, 40), tokenizer.pad_id)
        parts = batch_loss(model, batch)
        if step % 100 == 0:
            print(f"step {step:>3}  target-token loss {(parts.loss_sum / parts.count).item():.3f}")
        if step < STEPS:
            optimizer.zero_grad()
            (parts.loss_sum / parts.count).backward()
            optimizer.step()

    tests = [pair(random.Random(1000 + i)) for i in range(6)]
    outputs = translate(model, tokenizer, [s for s, _ in tests])
    print(f"\ngreedy translations ({sum(o == t for o, (_, t) in zip(outputs, tests))}/{len(tests)} exactly right):")
    for (source, target), output in zip(tests, outputs):
        print(f"  {pad(source, 24)} -> {pad(output, 24)} ({'ok' if output == target else 'want ' + target})")
