"""One validator for every config dataclass: each field declares its constraint, :func:`check_fields` checks them.

A field's type comes from its annotation ("int", "float | None", "str", "bool", "list[str]", ...); its
range or choices from :func:`option`. Every config class (model, training, SAE, microscope,
generation) calls :func:`check_fields` from ``__post_init__``, so a config is valid from construction;
only checks across fields stay in the class. NaN and infinity are refused for every float and a bool
for every int; each error names the field, the value and what was expected.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import MISSING, field, fields
from typing import Any

from .errors import (
    ArgumentTypeError,
    GlassformerError,
    check_int,
    check_known_keys,
    check_number,
    is_int,
    is_number,
    shown,
)


def option(default: Any = MISSING, *, factory: Any = MISSING, ge: float | None = None, gt: float | None = None,
           le: float | None = None, lt: float | None = None, choices: Sequence[str] | None = None) -> Any:
    """A dataclass field with its constraint, checked by :func:`check_fields`.

    Args:
        default, factory: the field's default value or default factory (neither: a required field).
        ge, gt: lower bound, inclusive or exclusive; le, lt: upper bound, likewise (numbers only; a bound
            is shown as written, so ``gt=0.0`` reads "> 0.0").
        choices: the values a string field may take.
    """
    spec = {k: v for k, v in dict(ge=ge, gt=gt, le=le, lt=lt, choices=choices).items() if v is not None}
    return field(default=default, default_factory=factory, metadata=spec)


_TYPES = {"int": is_int, "float": is_number, "bool": lambda v: isinstance(v, bool), "str": lambda v: isinstance(v, str),
          "list": lambda v: isinstance(v, list), "dict": lambda v: isinstance(v, dict)}


def check_fields(config: Any, prefix: str = "", *, coerce: bool = False) -> None:
    """Check every field of the dataclass instance ``config`` against its annotation and :func:`option`.

    Args:
        config: a dataclass instance (frozen or not).
        prefix: put before each field's name in messages ("watch." names ``watch.every``).
        coerce: first convert each value to its annotated type where that is unambiguous (the command
            line's "3e-4" -> 3e-4; see :func:`coerce_value`) and store it back.
    Raises:
        ArgumentTypeError for a value of the wrong type; GlassformerError for one out of range or not
        among the choices. Types outside int/float/bool/str/list/dict (``Sequence[int]``) are the class's.
    """
    for f in fields(config):
        name, value, kinds = prefix + f.name, getattr(config, f.name), [k.strip() for k in f.type.split("|")]
        if coerce:
            value = coerce_value(name, f.type, value)
            object.__setattr__(config, f.name, value)
        if value is None and "None" in kinds:
            continue
        kinds = [k for k in kinds if k != "None"]
        known = [_TYPES[k.split("[")[0]] for k in kinds if k.split("[")[0] in _TYPES]
        if len(known) == len(kinds) and not any(is_type(value) for is_type in known):
            raise ArgumentTypeError(f"{name} must be {_expected_type(kinds[0])}, got {shown(value)}")
        spec = f.metadata
        if kinds[0] == "int" and is_int(value):
            low = spec["ge"] if "ge" in spec else spec["gt"] + 1 if "gt" in spec else None
            high = spec["le"] if "le" in spec else spec["lt"] - 1 if "lt" in spec else None
            check_int(name, value, low, high)
        elif kinds[0] == "float":
            check_number(name, value, spec.get("ge", spec.get("gt")), spec.get("le", spec.get("lt")),
                         low_open="gt" in spec, high_open="lt" in spec)
        if "choices" in spec:
            check_choice(name, value, spec["choices"])


def _expected_type(kind: str) -> str:
    names = {"int": "an int", "float": "a float", "bool": "True or False", "str": "a string", "list": "a list",
             "dict": "a mapping"}
    return names.get(kind.split("[")[0], f"a {kind}")


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """``value`` when it is one of ``choices``, else an error naming ``name``, the value and the choices."""
    if not isinstance(value, str) or value not in choices:
        raise GlassformerError(f"{name} must be one of {list(choices)}, got {shown(value)}")
    return value


def from_mapping(cls: type, data: Any, what: str = "config") -> Any:
    """``cls(**data)`` for a mapping ``data`` of ``cls``'s fields; an error names a value that is no mapping,
    an unknown key (with the known ones) or a missing required field. ``what`` names the mapping."""
    if not isinstance(data, dict):
        raise ArgumentTypeError(f"{what} must be a mapping of keys to values, got {type(data).__name__}")
    check_known_keys(data, {f.name for f in fields(cls)}, what)
    missing = [f.name for f in fields(cls)
               if f.default is MISSING and f.default_factory is MISSING and f.name not in data]
    if missing:
        raise GlassformerError(f"{what} is missing {', '.join(missing)}")
    return cls(**data)


def coerce_value(name: str, kind: str, value: Any) -> Any:
    """``value`` converted to the annotated type ``kind`` (a dataclass field's type as text: "int",
    "float | None", "list[str]", ...) where that is unambiguous ("3e-4" -> 3e-4, as the command line gives
    it), else an ArgumentTypeError naming ``name``."""
    options = [k.strip() for k in kind.split("|")]
    if value is None:
        if "None" in options:
            return None
        raise ArgumentTypeError(f"{name} must not be empty (null)")
    base = options[0]
    if base == "list[str]":
        value = [value] if isinstance(value, str) else value
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ArgumentTypeError(f"{name} must be a string or a list of strings, got {shown(value)}")
        return value
    if base == "dict":
        if not isinstance(value, dict):
            raise ArgumentTypeError(f"{name} must be a mapping, got {shown(value)}")
        return value
    if base == "bool":
        if isinstance(value, bool):
            return value
        raise ArgumentTypeError(f"{name} must be true or false, got {shown(value)}")
    if base in ("int", "float") and not isinstance(value, bool):
        if base == "int" and isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, str):
            try:
                value = int(value) if base == "int" else float(value)
            except ValueError:
                raise ArgumentTypeError(f"{name} must be a number ({base}), got {shown(value)}") from None
        if base == "int" and is_int(value) or base == "float" and is_number(value):
            try:
                return float(value) if base == "float" else value
            except OverflowError:
                raise GlassformerError(f"{name} must be a finite number, got {shown(value)}") from None
    if base == "str" and isinstance(value, str):
        return value
    raise ArgumentTypeError(f"{name} must be {_expected_type(base)}, got {shown(value)}")
