"""Lesson 2 · objectives 2: the masked LM (BERT): hide 15% of the tokens, predict them from both sides.

Run: python examples/11_objective_mlm.py   (a few seconds on a CPU)
Shows one masked batch (80% [MASK], 10% random, 10% kept; only chosen positions have a label), trains
a bidirectional 2-layer model on a handful of sentences, then fills masks that need the right context.
"""

import torch

from glassformer import TransformerLM
from glassformer.data import mask_tokens
from glassformer.generation import fill_mask
from glassformer.io.textwidth import pad
from glassformer.runtime import tune
from glassformer.tokenizers import CharTokenizer
from glassformer.training import batch_loss

SENTENCES = ["the cat sat on the mat.", "the dog sat on the log.", "a cat ate the fish.", "a dog ate the bone."]
STEPS = 300

if __name__ == "__main__":
    tune()  # one thread per free core: threads spinning against a busy core made the tiny LM lesson 23x slower
    torch.manual_seed(0)
    tokenizer = CharTokenizer.from_text("".join(SENTENCES), specials=["pad", "mask"])
    width = max(map(len, SENTENCES))
    rows = [tokenizer.encode(s) + [tokenizer.pad_id] * (width - len(s)) for s in SENTENCES]
    ids = torch.tensor(rows * 8)  # (32, T): the sentences, repeated so each batch masks them differently
    generator = torch.Generator().manual_seed(0)

    def masked_batch() -> dict:
        inputs, labels = mask_tokens(ids, mask_id=tokenizer.mask_id, vocab_size=tokenizer.vocab_size,
                                     generator=generator, special_ids=[tokenizer.pad_id])
        return {"ids": inputs, "labels": labels}

    example = masked_batch()
    shown = "".join("_" if t == tokenizer.mask_id else tokenizer.id_to_token(t) for t in example["ids"][0].tolist())
    targets = "".join(tokenizer.id_to_token(t) if t >= 0 else "·" for t in example["labels"][0].tolist())
    print(f"original : {SENTENCES[0]}\ninput    : {shown.replace('<pad>', '')}\n"
          f"labels   : {targets[:len(SENTENCES[0])]}   (· = no loss; _ = [MASK])\n")

    model = TransformerLM(vocab_size=tokenizer.vocab_size, d_model=64, n_heads=4, n_layers=2, d_ff=128,
                          attn="bidirectional", max_len=width)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(STEPS + 1):
        parts = batch_loss(model, masked_batch())
        if step % 100 == 0:
            print(f"step {step:>3}  masked-token loss {(parts.loss_sum / parts.count).item():.3f}  "
                  f"accuracy {(parts.correct / parts.count).item():.2f}")
        if step < STEPS:
            optimizer.zero_grad()
            (parts.loss_sum / parts.count).backward()
            optimizer.step()

    print("\nfill-mask: the right-hand context decides between cat and dog")
    for text in ("the _at sat on the mat.", "the _og sat on the log.", "the dog sat on the _og."):
        masked = [tokenizer.mask_id if c == "_" else tokenizer.encode(c)[0] for c in text]
        best = fill_mask(model, masked, tokenizer=tokenizer, top_k=3)[0]["tokens"]
        print(f"  {pad(text, 26)} -> " + "  ".join(f"{piece!r}:{p:.2f}" for piece, p in best))
