"""``--key value`` pairs from the command line, for the verbs that accept any config key (train, recipe).

Only argv is read here; applying the pairs to a config is
:func:`glassformer.training.config.apply_overrides`'s job.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
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


def did_you_mean(word: str, known: Collection[str], prefix: str = "--") -> str:
    """`` (did you mean --max_steps?)`` for the known key closest to ``word``, or "" when none is close."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.7)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def check_keys(keys: Sequence[str], known: Mapping[str, Collection[str] | None], where: str = "option",
               prefix: str = "--", verb: str = "train", source: str = "") -> None:
    """Every key is a known one, else one error naming it and the closest known key.

    Args:
        keys: config keys as the user wrote them (``max_steps``, ``model.n_layers``).
        known: the top-level keys under "" and each section's keys under its name (None: the section
            takes any key, checked later by whoever reads it, e.g. ``recipe``).
        where: how the message calls a key ("option" on the command line, "key in FILE" for a file).
        prefix: how a key is shown ("--" for a command-line option, "" for a file's key).
        verb: the command whose ``--help`` lists the keys; source: the file the keys come from, if any.
    Raises:
        UsageError: ``unknown option --max_step (did you mean --max_steps?); glassformer train --help
        lists the keys``.
    """
    for key in keys:
        head, dot, rest = key.partition(".")
        if dot and head in known and head:
            section = known[head]
            if section is None or rest in section:
                continue
            hint = did_you_mean(rest, section, f"{prefix}{head}.")
        elif key in known[""]:
            continue
        elif dot:  # a misspelled section: --modl.d_model
            close = difflib.get_close_matches(head, [name for name in known if name], n=1, cutoff=0.6)
            hint = f" (did you mean {prefix}{close[0]}.{rest}?)" if close else ""
        else:
            hint = did_you_mean(key, known[""], prefix)
        place = f" in {source}" if source else ""
        raise UsageError(f"unknown {where} {prefix}{key}{place}{hint}; glassformer {verb} --help lists the keys")


_FIELD = re.compile(r"^    (\w+): ([^=]+?) = (.+?)(?:  # (.*))?$")


def dataclass_keys(source: str | Path, class_name: str) -> list[tuple[str, str, str]]:
    """The fields of the dataclass ``class_name`` in the Python file ``source``, read as text: [(name,
    default as written, its comment)]. The help of ``train`` lists the config keys this way without
    importing torch (the config module does); tests check the list against the dataclass itself."""
    lines = Path(source).read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"class {class_name}"))
    found, above = [], ""  # above: a comment on the line before a field (used when the field has none)
    for line in lines[start + 1:]:
        if line.startswith("    def ") or line.startswith("class ") or line.startswith("@"):
            break
        match = _FIELD.match(line)
        if match:
            name, _type, default, comment = match.groups()
            found.append((name, _written_default(default), comment or above))
        above = line.strip()[2:] if line.startswith("    # ") else ""
    return found


def _written_default(default: str) -> str:
    """The default of a field as written: ``option("clm", choices=...)`` -> ``"clm"``, a list or dict
    factory -> ``[]`` / ``{}``, anything else as it stands."""
    call = ast.parse(default, mode="eval").body
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in ("option", "field")):
        return default
    if call.args:
        return ast.get_source_segment(default, call.args[0]) or default
    for keyword in call.keywords:
        if keyword.arg in ("default", "factory", "default_factory"):
            if isinstance(keyword.value, ast.Name) and keyword.arg != "default":
                return {"list": "[]", "dict": "{}"}.get(keyword.value.id, default)
            return ast.get_source_segment(default, keyword.value) or default
    return default
