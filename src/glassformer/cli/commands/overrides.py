"""``--key value`` pairs from the command line (train, recipe, sae); applying them to a config is
:func:`glassformer.training.config.apply_overrides`'s job."""

import ast
import difflib
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...errors import UsageError
from ...validate import CommandLineText
from ..zh import cli_text


def overrides_from_argv(argv: Sequence[str]) -> list[tuple[str, CommandLineText]]:
    """``["--lr", "0.01", "--model.n_layers=2"]`` -> ``[("lr", "0.01"), ("model.n_layers", "2")]``, in order.

    Each value is the text as written, a :class:`~glassformer.validate.CommandLineText` that the config reads as
    the type of the field it sets (``--out_dir 'exp #2'`` is that folder, ``--lr 3e-4`` a float, ``--data '[a.txt,
    b.txt]'`` a list); dashes in a key become underscores, dots are kept. A word that is not ``--key``, or a
    ``--key`` without a value, is a UsageError.
    """
    pairs, words = [], iter(argv)
    for word in words:
        if not word.startswith("--") or len(word) == 2:
            raise usage_error("override_form", word=word)
        key, equals, text = word[2:].partition("=")
        if not equals:
            text = next(words, None)
            if text is None:
                raise usage_error("override_no_value", word=word)
        pairs.append((key.replace("-", "_"), CommandLineText(text)))
    return pairs


def usage_error(key: str, **fields: Any) -> UsageError:
    """A UsageError with the CLI text ``key`` of locale/cli.json (English); ``cli.main`` prints it in the command
    line's language from the ``text`` it carries."""
    error = UsageError(cli_text(key, "en", **fields))
    error.text = (key, fields)
    return error


def did_you_mean(word: str, known: Collection[str], prefix: str = "--") -> str:
    """`` (did you mean --max_steps?)`` for the known key closest to ``word``, or "" when none is close."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.7)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def check_keys(keys: Sequence[str], known: Mapping[str, Collection[str] | None], source: str = "") -> None:
    """Every key (``max_steps``, ``model.n_layers``) is a known one, else a UsageError naming it and the
    closest known key: ``unknown option --max_step (did you mean --max_steps?); glassformer train --help
    lists the keys``.

    ``known`` holds the top-level keys under "" and each section's under its name (None: any key, checked
    by whoever reads the section); ``source`` names the file the keys come from ("": the command line's
    options, refused in its language).
    """
    prefix = "" if source else "--"
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
            if not hint and RENAMED_KEYS.get(key) in known[""]:  # a removed key: the one that replaced it
                hint = f" (did you mean {prefix}{RENAMED_KEYS[key]}?)"
        if source:
            raise UsageError(f"unknown key {key} in {source}{hint}; glassformer train --help lists the keys")
        close_key = hint[len(" (did you mean "):-len("?)")]
        raise usage_error("unknown_option_close" if hint else "unknown_option", option=f"--{key}", close=close_key,
                          verb="train")


RENAMED_KEYS = {"dtype": "precision"}  # a key (option) glassformer removed: the one that replaced it

_FIELD = re.compile(r"^    (\w+): ([^=]+?) = (.+?)(?:  # (.*))?$")


def dataclass_keys(source: str | Path, class_name: str) -> list[tuple[str, str, str]]:
    """The fields of the dataclass ``class_name`` in the Python file ``source``, read as text (``--help``
    imports no torch): [(name, default as written, its comment)]."""
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
    """``option("clm", choices=...)`` -> ``"clm"``, a list or dict factory -> ``[]`` / ``{}``, else as written."""
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
