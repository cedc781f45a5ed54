"""One validator for every config dataclass: a field's type comes from its annotation, its range or
choices from :func:`option`; each config's ``__post_init__`` calls :func:`check_fields`."""

import contextlib
import math
from collections.abc import Sequence
from dataclasses import MISSING, asdict, field, fields
from typing import Any, TypeVar

from .errors import ArgumentTypeError, GlassformerError
from .io.checks import check_int, check_known_keys, check_number, is_int, is_number, shown


def option(default: Any = MISSING, *, factory: Any = MISSING, ge: float | None = None, gt: float | None = None,
           le: float | None = None, lt: float | None = None, choices: Sequence[str] | None = None) -> Any:
    """A dataclass field (``default`` or ``factory``; neither: required) with its bounds (``ge``, ``gt``,
    ``le``, ``lt``, shown as written) or ``choices``, checked by :func:`check_fields`."""
    spec = {k: v for k, v in dict(ge=ge, gt=gt, le=le, lt=lt, choices=choices).items() if v is not None}
    return field(default=default, default_factory=factory, metadata=spec)


_TYPES = {  # a field's annotated type -> (does a value have it, how a message names it)
    "int": (is_int, "an int"), "float": (is_number, "a float"), "str": (lambda v: isinstance(v, str), "a string"),
    "bool": (lambda v: isinstance(v, bool), "True or False"), "dict": (lambda v: isinstance(v, dict), "a mapping"),
    "list": (lambda v: isinstance(v, list), "a list"),
    "list[str]": (lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v), "a list of strings"),
}


MAX_INT_FIELD = 2**53  # an int field without its own bound: a count no run reaches (and JSON keeps exactly)


def check_fields(config: Any, prefix: str = "", *, coerce: bool = False) -> None:
    """Check every field of the dataclass ``config`` against its annotation and :func:`option`: an
    ArgumentTypeError for a wrong type, a GlassformerError out of range or choices (NaN, inf and bools for
    ints refused). ``prefix`` goes before each name; ``coerce`` first stores :func:`coerced` values back."""
    for f in fields(config):
        name, value, kinds = prefix + f.name, getattr(config, f.name), [k.strip() for k in f.type.split("|")]
        if coerce:
            value = coerced(name, f.type, value)
            object.__setattr__(config, f.name, value)
        if value is None and "None" in kinds:
            continue
        kinds = [k for k in kinds if k != "None"]
        known = [_TYPES.get(k, _TYPES.get(k.split("[")[0])) for k in kinds]
        if None not in known and not any(has_type(value) for has_type, _ in known):
            raise ArgumentTypeError(f"{name} must be {known[0][1]}, got {shown(value)}")
        spec = f.metadata
        if kinds[0] == "int" and is_int(value):
            low = spec["ge"] if "ge" in spec else spec["gt"] + 1 if "gt" in spec else None
            high = spec["le"] if "le" in spec else spec["lt"] - 1 if "lt" in spec else None
            if high is None and value > MAX_INT_FIELD:  # past any count a run reaches: [low, 2**53] named
                high = MAX_INT_FIELD
            check_int(name, value, low, high)
        elif kinds[0] == "float":
            check_number(name, value, spec.get("ge", spec.get("gt")), spec.get("le", spec.get("lt")),
                         low_open="gt" in spec, high_open="lt" in spec)
        if "choices" in spec:
            check_choice(name, value, spec["choices"])


class CommandLineText(str):
    """A value as typed on the command line (``--out_dir 'exp #2'``): :func:`coerced` reads it as the type of
    the field it sets, never guessing from the text (a string field keeps it as written)."""


BOOLEANS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


def typed_text(name: str, kind: str, text: str) -> Any:
    """Command-line ``text`` as the annotated type ``kind`` of the field ``name``: a string as written (``#``,
    ``null``, ``yes``, ``{x}`` and newlines included), a number or a bool parsed as one, ``null`` for an
    optional field that is no string, YAML (bounded, no aliases) only for a list or mapping; else an error."""
    from .io.loaders import parse_yaml_text

    kinds = [k.strip() for k in kind.split("|")]
    base = next((k for k in kinds if k != "None"), "str")
    if base == "str":
        return text
    if "None" in kinds and text.strip().lower() in ("null", "none", "~"):
        return None
    if base in ("int", "float"):
        with contextlib.suppress(ValueError):
            return int(text) if base == "int" else float(text)
        with contextlib.suppress(ValueError):  # an int field given 2.0 or 1e3: the int it is
            number = float(text)
            if math.isfinite(number) and number.is_integer():
                return int(number)
        raise ArgumentTypeError(f"{name} must be a number ({base}), got {shown(text)}")
    if base == "bool":
        if text.strip().lower() not in BOOLEANS:
            raise ArgumentTypeError(f"{name} must be true or false, got {shown(text)}")
        return BOOLEANS[text.strip().lower()]
    if base == "list[str]" and not text.lstrip().startswith("["):
        return [text]  # one file name, as written
    if base.split("[")[0] in ("list", "dict", "tuple"):
        return parse_yaml_text(text, name, ArgumentTypeError)
    return text


def untyped(value: Any, name: str = "value") -> Any:
    """A command-line value for a key ``name`` no field types (a recipe's own keys): an int, a finite float,
    true/false or null when the text is one, YAML (bounded, no aliases) when it starts with ``[`` or ``{``, else
    the text; anything that is no :class:`CommandLineText` as it is."""
    if not isinstance(value, CommandLineText):
        return value
    text = str(value).strip()
    for parse in (int, float):
        try:
            number = parse(text)
        except ValueError:
            continue
        return number if parse is int or math.isfinite(number) else str(value)
    if text.lower() in ("true", "false", "null"):
        return {"true": True, "false": False, "null": None}[text.lower()]
    if text.startswith(("[", "{")):
        from .io.loaders import parse_yaml_text

        return parse_yaml_text(text, name, ArgumentTypeError)
    return str(value)


def coerced(name: str, kind: str, value: Any) -> Any:
    """``value`` as the annotated type ``kind`` where unambiguous ("3e-4" -> 3e-4, "12" or "12.0" -> 12, a string ->
    [string], an int -> float; a :class:`CommandLineText` by :func:`typed_text`); else unchanged, for the type
    check to name."""
    if isinstance(value, CommandLineText):
        return typed_text(name, kind, str(value))
    kind = kind.split("|")[0].strip()
    if kind == "list[str]" and isinstance(value, str):
        return [value]
    if kind in ("int", "float") and isinstance(value, str):  # read as the command line's text is
        return typed_text(name, kind, value)
    if kind == "int" and isinstance(value, float) and value.is_integer():
        return int(value)
    if kind == "float" and is_int(value):
        try:
            return float(value)
        except OverflowError:
            raise GlassformerError(f"{name} must be a finite number, got {shown(value)}") from None
    return value


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """``value`` when it is one of ``choices``, else an error naming ``name``, the value and the choices."""
    if not isinstance(value, str) or value not in choices:
        raise GlassformerError(f"{name} must be one of {list(choices)}, got {shown(value)}")
    return value


Config = TypeVar("Config", bound="DictConfig")


class DictConfig:
    """What every dataclass config shares: ``to_dict`` (plain JSON values) and ``from_dict`` (built and checked;
    an unknown key is an error naming it and the known ones). ``WHAT`` names the config in those errors."""

    WHAT = "config"

    def to_dict(self) -> dict[str, Any]:
        """Every key as plain JSON values."""
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[Config], data: dict[str, Any]) -> Config:
        """``cls(**data)``, checked; a non-mapping, an unknown key or a missing required one is an error naming it."""
        if not isinstance(data, dict):
            raise ArgumentTypeError(f"{cls.WHAT} must be a mapping of keys to values, got {type(data).__name__}")
        check_known_keys(data, {f.name for f in fields(cls)}, cls.WHAT)
        missing = [f.name for f in fields(cls)
                   if f.default is MISSING and f.default_factory is MISSING and f.name not in data]
        if missing:
            raise GlassformerError(f"{cls.WHAT} is missing {', '.join(missing)}")
        return cls(**data)


class CheckedConfig(DictConfig):
    """A run's config, whose keys may change after it was made: :meth:`validate` checks them again."""

    def validate(self: Config) -> Config:
        """Check every key again (after one was changed); return self."""
        self.__post_init__()  # type: ignore[attr-defined]
        return self
