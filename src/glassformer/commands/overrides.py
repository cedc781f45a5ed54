"""``--key value`` pairs from the command line, for the verbs that accept any config key (train, recipe).

Only argv is read here; applying the pairs to a config is
:func:`glassformer.training.config.apply_overrides`'s job.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from ..errors import UsageError


def overrides_from_argv(argv: Sequence[str]) -> list[tuple[str, Any]]:
    """Split ``--key value`` / ``--key=value`` words into (key, value) pairs, in order.

    Values are read as YAML, so ``--compile true`` gives True, ``--max_steps 5`` an int and
    ``--data [a.txt, b.txt]`` a list; other text stays a string (``3e-4`` too: YAML 1.1 floats need a dot),
    which the config converts to its field's type. Dashes in a key become underscores (``--max-steps`` =
    ``--max_steps``); dots are kept (``--model.n_layers``).

    Args:
        argv: the words after the verb's own options, e.g. ``["--lr", "0.01", "--model.n_layers=2"]``.
    Returns:
        [(key, value)], e.g. ``[("lr", 0.01), ("model.n_layers", 2)]``.
    Raises:
        UsageError for a word that is not ``--key`` or a ``--key`` without a value.
    """
    pairs, i = [], 0
    while i < len(argv):
        word = argv[i]
        if not word.startswith("--") or len(word) == 2:
            raise UsageError(f"expected an override like --key value, got {word!r}")
        if "=" in word:
            key, text = word[2:].split("=", 1)
            i += 1
        else:
            if i + 1 >= len(argv):
                raise UsageError(f"override {word} has no value")
            key, text = word[2:], argv[i + 1]
            i += 2
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = text
        pairs.append((key.replace("-", "_"), value))
    return pairs
