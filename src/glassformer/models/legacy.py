"""Old state-dict names -> today's, so checkpoints written by earlier versions still load.

Every rename of a parameter's path is listed here once, old pattern first:

    blocks.0.n1.weight               -> blocks.0.attn_norm.weight      (also enc./dec. blocks)
    blocks.0.n2.weight               -> blocks.0.cross_norm.weight
    blocks.0.n3.weight               -> blocks.0.ffn_norm.weight
    logits_bias                      -> head.bias                      (the bias on tied logits)
    head_transform.dense.weight      -> head.transform.dense.weight    (BERT's MLM head transform)
    embeddings.dec_pos.weight        -> dec_embedding.pos.weight       (BART's decoder positions)
    embeddings.dec_norm.weight       -> dec_embedding.norm.weight

``head.weight`` and ``head.bias`` of an untied output layer keep their names.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import GlassformerError

RENAMES: tuple[tuple[str, str], ...] = (
    (r"(^|\.)n1\.", r"\1attn_norm."),
    (r"(^|\.)n2\.", r"\1cross_norm."),
    (r"(^|\.)n3\.", r"\1ffn_norm."),
    (r"(^|\.)logits_bias$", r"\1head.bias"),
    (r"(^|\.)head_transform\.", r"\1head.transform."),
    (r"(^|\.)embeddings\.dec_pos\.", r"\1dec_embedding.pos."),
    (r"(^|\.)embeddings\.dec_norm\.", r"\1dec_embedding.norm."),
)
_COMPILED = tuple((re.compile(old), new) for old, new in RENAMES)


def upgrade_key(name: str) -> str:
    """Today's name for a state-dict key that may use an old name (unchanged if it does not)."""
    for old, new in _COMPILED:
        name = old.sub(new, name)
    return name


def upgrade_state_dict(state: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``state`` with every old key renamed (see the module docstring); values untouched.

    A state dict that already uses today's names comes back equal. Raises ValueError when an old
    and a new key would land on the same name (a file mixing both is not one model's weights).
    """
    out: dict[str, Any] = {}
    for name, value in state.items():
        new = upgrade_key(name)
        if new in out:
            raise GlassformerError(f"state dict holds both {name!r} and a tensor already named {new!r}")
        out[new] = value
    return out
