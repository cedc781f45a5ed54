"""Tasks whose output follows the whole input (the prefix): ``x=y.`` with ``y`` ``x`` reversed (``cab=bac.``),
sorted (``cab=abc.``) or, for ``count``, how often each symbol occurs later, capped (``abab=1100.``)."""

from collections.abc import Iterator

import torch
from torch import nn

from ..data import IGNORE, step_generator
from ..errors import GlassformerError
from ..generation import generate
from ..io.checks import check_int
from ..tokenizers import CharTokenizer
from ..validate import check_choice

KINDS = ("reverse", "sort", "count")
DIGITS = "0123456789"
SEPARATOR, END = "=", "."


class SequenceTask:
    """Random examples of a ``kind`` task as Trainer batches for ``objective`` "prefix" or "clm", inputs of
    ``min_len`` to ``max_len`` symbols of ``alphabet``; step s's batch depends only on (seed, s)."""

    def __init__(self, kind: str = "reverse", objective: str = "prefix", alphabet: str = "abcdefghij",
                 min_len: int = 4, max_len: int = 16, seed: int = 0, eval_examples: int = 512, max_count: int = 1):
        check_choice("kind", kind, KINDS)
        check_choice("objective", objective, ("prefix", "clm"))
        if not alphabet or SEPARATOR in alphabet or END in alphabet or len(set(alphabet)) != len(alphabet):
            raise GlassformerError(f"alphabet must be distinct symbols without '=' or '.', got {alphabet!r}")
        check_int("max_count", max_count, 1, 9)
        if kind == "count" and any(c in DIGITS for c in alphabet):
            raise GlassformerError(f"kind 'count' writes digits, so the alphabet must not contain any, "
                                   f"got {alphabet!r}")
        check_int("min_len", min_len, 1)
        check_int("max_len", max_len, min_len)
        check_int("eval_examples", eval_examples, 1)
        check_int("seed", seed)
        self.kind, self.objective, self.seed, self.max_count = kind, objective, seed, max_count
        self.min_len, self.max_len, self.eval_examples, self.alphabet = min_len, max_len, eval_examples, alphabet
        outputs = DIGITS[:max_count + 1] if kind == "count" else ""
        self.tokenizer = CharTokenizer(list(alphabet + outputs + SEPARATOR + END))
        self.block_size = 2 * max_len + 1

    def answer(self, text: str) -> str:
        """The output the task asks for, given an input string (as long as the input)."""
        if self.kind == "count":
            return "".join(str(min(text[i + 1:].count(c), self.max_count)) for i, c in enumerate(text))
        return text[::-1] if self.kind == "reverse" else "".join(sorted(text))

    def inputs(self, count: int, generator: torch.Generator) -> list[str]:
        """``count`` random input strings, each of min_len to max_len symbols, drawn from ``generator``."""
        lengths = torch.randint(self.min_len, self.max_len + 1, (count,), generator=generator).tolist()
        return ["".join(self.alphabet[i] for i in torch.randint(len(self.alphabet), (n,), generator=generator))
                for n in lengths]

    def batch(self, inputs: list[str]) -> dict[str, torch.Tensor]:
        """The batch of B input strings: ``ids`` (padded with the end mark) and ``labels`` (-100 but on ``y.``),
        (B, block_size) each, and for a prefix-LM ``prefix_len`` (B,): input length + 1."""
        end = self.tokenizer.encode(END)[0]
        B, T = len(inputs), self.block_size
        ids = torch.full((B, T + 1), end, dtype=torch.long)
        labels = torch.full((B, T), IGNORE, dtype=torch.long)
        for row, text in enumerate(inputs):
            n = len(text)
            ids[row, :2 * n + 2] = torch.tensor(self.tokenizer.encode(text + SEPARATOR + self.answer(text) + END))
            labels[row, n:2 * n + 1] = ids[row, n + 1:2 * n + 2]  # predict y and the end mark
        batch = {"ids": ids[:, :-1], "labels": labels}
        if self.objective == "prefix":
            batch["prefix_len"] = torch.tensor([len(t) + 1 for t in inputs])
        return batch

    def global_batch(self, step: int, batch_size: int) -> dict[str, torch.Tensor]:
        """The training batch of ``step``: :meth:`batch` of ``batch_size`` inputs drawn from (seed, step)."""
        return self.batch(self.inputs(batch_size, step_generator(self.seed, step)))

    def val_inputs(self) -> list[str]:
        """The fixed validation inputs (drawn from a seed training never uses)."""
        return self.inputs(self.eval_examples, step_generator(self.seed, -1))

    def eval_batches(self, batch_size: int, max_batches: int | None = None) -> Iterator[dict[str, torch.Tensor]]:
        """The validation inputs as :meth:`batch` es of up to ``batch_size`` rows (at most ``max_batches``)."""
        inputs = self.val_inputs()
        for start in range(0, len(inputs), batch_size)[:max_batches]:
            yield self.batch(inputs[start:start + batch_size])


def exact_match(model: nn.Module, task: SequenceTask, batch_size: int = 256) -> dict[str, float]:
    """Greedy-decode every validation input and compare with the answer: {"exact_match": share of outputs
    exactly right, "symbol_accuracy": share of output symbols right, "examples": a few (input, output)}."""
    check_int("batch_size", batch_size, 1)
    tokenizer, inputs = task.tokenizer, task.val_inputs()
    end = tokenizer.encode(END)[0]
    exact, symbols_right, symbols, examples = 0, 0, 0, []
    for start in range(0, len(inputs), batch_size):
        chunk = inputs[start:start + batch_size]
        prompts = [tokenizer.encode(text + SEPARATOR) for text in chunk]
        out = generate(model, prompts, task.max_len + 1, eos_token_id=end, pad_token_id=end)
        width = max(len(p) for p in prompts)
        for text, row in zip(chunk, out[:, width:].tolist(), strict=True):
            got = tokenizer.decode(row).split(END)[0]
            want = task.answer(text)
            exact += got == want
            symbols_right += sum(a == b for a, b in zip(got, want))
            symbols += len(want)
            if len(examples) < 4:
                examples.append((text, got))
    return {"exact_match": exact / len(inputs), "symbol_accuracy": symbols_right / symbols, "examples": examples}
