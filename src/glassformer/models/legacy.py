"""Old state-dict names -> today's, so checkpoints written by earlier versions still load. Every rename
of a parameter's path is listed once in :data:`RENAMES`, old pattern first."""

import re
from typing import Any

from ..errors import GlassformerError

RENAMES: tuple[tuple[str, str], ...] = (
    (r"(^|\.)n1\.", r"\1attn_norm."),  # blocks.0.n1.weight -> blocks.0.attn_norm.weight (also enc./dec.)
    (r"(^|\.)n2\.", r"\1cross_norm."),  # blocks.0.n2.weight -> blocks.0.cross_norm.weight
    (r"(^|\.)n3\.", r"\1ffn_norm."),  # blocks.0.n3.weight -> blocks.0.ffn_norm.weight
    (r"(^|\.)logits_bias$", r"\1head.bias"),  # the bias on tied logits
    (r"(^|\.)head_transform\.", r"\1head.transform."),  # BERT's MLM head transform
    (r"(^|\.)embeddings\.dec_pos\.", r"\1dec_embedding.pos."),  # BART's decoder positions
    (r"(^|\.)embeddings\.dec_norm\.", r"\1dec_embedding.norm."),  # and its decoder's embedding norm
)
_COMPILED = tuple((re.compile(old), new) for old, new in RENAMES)


def upgrade_key(name: str) -> str:
    """Today's name for a state-dict key that may use an old name (unchanged if it does not)."""
    for old, new in _COMPILED:
        name = old.sub(new, name)
    return name


def upgrade_state_dict(state: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``state`` with every old key renamed, values untouched; an error when an old and a new
    key would land on the same name (a file mixing both is not one model's weights)."""
    out: dict[str, Any] = {}
    for name, value in state.items():
        new = upgrade_key(name)
        if new in out:
            raise GlassformerError(f"state dict holds both {name!r} and a tensor already named {new!r}")
        out[new] = value
    return out
