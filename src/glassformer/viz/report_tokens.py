"""The report's tokens: inputs as ids (cut, padded), printable labels, the report's bounds, the generation trace."""

from collections.abc import Sequence
from typing import Any

from torch import nn

from ..data.padding import pad_rows
from ..errors import ArgumentTypeError, GlassformerError
from ..generation.api import batch_prompts, special_id
from ..io.checks import check_int
from .i18n import text as tr

PAD_LABEL = "<pad>"
# What one report may draw: the page holds L x h x T^2 bytes of weights per view and a row per generation step.
MAX_TOKENS = 2048  # longest input (max_tokens, pad_to)
MAX_STEPS = 1024  # generation trace steps
MAX_TOP_K = 100  # candidates shown per step


def to_ids(value: Any, tokenizer: Any, name: str, add_special_tokens: bool | None = False) -> list[int]:
    """Text (with a tokenizer) or token ids (a list, a (T,) or (1, T) tensor) -> a non-empty list of ids;
    ``add_special_tokens=None``: the tokenizer's default."""
    if not isinstance(value, str):
        rows, _ = batch_prompts(value, name=name)  # (B, T) ids, never empty
        if len(rows) != 1:
            raise GlassformerError(f"{name} must be one row of token ids, got {len(rows)} rows")
        return rows[0].tolist()
    if tokenizer is None:
        raise ArgumentTypeError(f"{name} is text but no tokenizer was given; pass a tokenizer or token ids")
    ids = list(tokenizer.encode(value) if add_special_tokens is None
               else tokenizer.encode(value, add_special_tokens=add_special_tokens))
    if not ids:
        raise GlassformerError(f"{name} is empty: it gives no tokens")
    return ids


def token_labels(ids: Sequence[int], tokenizer: Any, pad: Sequence[bool] | None = None) -> list[str]:
    """The printable piece of each id (the id itself without a tokenizer); padding shows as <pad>."""
    if tokenizer is None:
        labels = [str(i) for i in ids]
    elif hasattr(tokenizer, "id_to_token"):
        labels = [str(tokenizer.id_to_token(int(i))) for i in ids]
    else:  # a Hugging Face tokenizer
        labels = [str(t) for t in tokenizer.convert_ids_to_tokens([int(i) for i in ids])]
    if pad is not None:
        labels = [PAD_LABEL if p else t for t, p in zip(labels, pad, strict=True)]
    return labels


def check_report_options(*, max_tokens: int = 128, generate: int = 16, top_k: int = 5,
                         pad_to: int | None = None, prefix: str = "") -> None:
    """A one-line error naming the first option out of bounds; ``prefix`` goes before each name ("--")."""
    check_int(f"{prefix}max_tokens", max_tokens, 1, MAX_TOKENS)
    check_int(f"{prefix}generate", generate, 0, MAX_STEPS)
    check_int(f"{prefix}top_k", top_k, 1, MAX_TOP_K)
    check_int(f"{prefix}pad_to", pad_to, 1, MAX_TOKENS, allow_none=True)


def cap_ids(ids: list[int], max_tokens: int, name: str, notes: list[str], lang: str = "en") -> list[int]:
    """The first ``max_tokens`` of ``ids``; when some are cut, a note naming ``name`` (in ``lang``) is added to
    ``notes`` so the page says what it leaves out."""
    if len(ids) > max_tokens:
        notes.append(tr("note.cap", lang, name=tr(f"note.name.{name}", lang), n=len(ids), max_tokens=max_tokens))
        return ids[:max_tokens]
    return ids


def pad_ids(ids: list[int], pad_to: int | None, pad_id: int) -> tuple[list[int], list[bool]]:
    """``ids`` right-padded to ``pad_to`` (>= len(ids)) with ``pad_id``, and the pad flags."""
    if pad_to is None:
        return ids, [False] * len(ids)
    check_int("pad_to", pad_to, len(ids))
    padded, pad = pad_rows([ids], pad_id, length=pad_to)
    return padded[0].tolist(), pad[0].tolist()


def generation_trace(model: nn.Module, tokenizer: Any, ids: list[int], steps: int, top_k: int, notes: list[str],
                     lang: str, **options: Any) -> dict[str, Any]:
    """Per step of a greedy continuation: the top-k candidates and the choice. A note (in ``lang``) is added to
    ``notes`` when the trace looks like an untrained model's: the same token chosen at every step."""
    from ..generation.trace import trace_generation

    eos = special_id(tokenizer, "eos")
    if eos is not None:
        options["eos_token_id"] = eos
    records = trace_generation(model, ids, steps, top_k=top_k, **options)
    rows = [{"chosen": r["chosen"], "chosen_label": token_labels([r["chosen"]], tokenizer)[0],
             "candidates": [{"id": i, "label": token_labels([i], tokenizer)[0], "p": p} for i, p in r["top_k"]]}
            for r in records]
    new_ids = [r["chosen"] for r in rows]
    text = tokenizer.decode(new_ids) if tokenizer is not None else " ".join(map(str, new_ids))
    if new_ids and not text.strip():  # only special tokens (an untrained model's <bos> ...): show them
        text = "".join(r["chosen_label"] for r in rows)
    if len(new_ids) >= 4 and len(set(new_ids)) == 1:
        notes.append(tr("note.trace_same", lang, token=repr(rows[0]["chosen_label"])))
    return {"steps": rows, "ids": new_ids, "continuation": text, "top_k": top_k}
