"""A resume state checked against the run it goes into before any kernel sees a tensor (``torch.load`` trusts
every shape); a mismatch is one line naming the file, the key, what it holds and what was expected."""

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import BadFileError, GlassformerError
from .checks import is_int, is_number, shown
from .loaders import MAX_STEP  # a step or token count beyond 2**53 is not one a run reached

MOMENTS = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer"}  # tensors shaped like the parameter
KNOWN_KEYS = MOMENTS | {"step"}


def _bad(file: str, key: str, value: Any, expected: str) -> BadFileError:
    return BadFileError(f"{file}: {key} holds {shown(value)}, expected {expected}")


def _tensor(file: str, key: str, value: Any, shape: tuple[int, ...] | None, dtype: torch.dtype | None) -> None:
    wanted = f"a tensor{f' of shape {shape}' if shape is not None else ''}{f' and dtype {dtype}' if dtype else ''}"
    if not torch.is_tensor(value) or value.layout != torch.strided \
            or (shape is not None and tuple(value.shape) != shape) or (dtype is not None and value.dtype != dtype):
        raise _bad(file, key, value, wanted)
    if value.is_floating_point() and not bool(torch.isfinite(value).all()):
        raise BadFileError(f"{file}: {key} holds NaN or infinity")


OPTIONAL_FLAGS = ("foreach", "fused")  # torch's flags that may be None ("let torch choose"); the others are bools
# What torch's constructors accept for a hyperparameter (load_state_dict checks none of it): [low, high), a
# closed high where the bound is inclusive. ns_steps: Newton-Schulz iterations, each a few matrix products.
RANGES: dict[str, tuple[float, float, bool]] = {
    "lr": (0.0, math.inf, True), "eps": (0.0, math.inf, True), "weight_decay": (0.0, math.inf, True),
    "betas": (0.0, 1.0, False), "momentum": (0.0, 1.0, False), "ns_steps": (1, 100, True)}


def _in_range(name: str, value: float) -> bool:
    low, high, closed = RANGES.get(name, (-math.inf, math.inf, True))
    return low <= value and (value <= high if closed else value < high)


def _range_text(name: str) -> str:
    low, high, closed = RANGES[name]
    return f"in [{low}, {high}{']' if closed else ')'}"


def _hyper_expected(name: str, value: Any, fresh: Any) -> str | None:
    """What a saved hyperparameter ``name`` must be beside this run's ``fresh`` one; None when ``value`` is that."""
    if fresh is None or (isinstance(fresh, bool) and name in OPTIONAL_FLAGS):
        return None if value is None or isinstance(value, bool) else "true, false or None"
    if isinstance(fresh, bool):  # amsgrad, maximize, capturable, differentiable, nesterov: the run decides them
        # amsgrad=None was a TypeError in fused AdamW's kernel; amsgrad=True without its max_exp_avg_sq a
        # KeyError; differentiable=True a RuntimeError with fused; capturable=True CUDA's
        return None if value is fresh else f"{fresh} (this run's optimizer)"
    if isinstance(fresh, (int, float)):
        if not is_number(value) or not math.isfinite(value):
            return "a finite number"
        if isinstance(fresh, int) and not (isinstance(value, int) and abs(value) <= 10_000):
            return "an int in [-10000, 10000]"
        return None if _in_range(name, value) else f"a number {_range_text(name)}"
    if isinstance(fresh, (tuple, list)) and not (isinstance(value, (tuple, list)) and len(value) == len(fresh) and all(
            is_number(v) and math.isfinite(v) and _in_range(name, v) for v in value)):
        return f"{len(fresh)} finite numbers" + (f" {_range_text(name)}" if name in RANGES else "")
    return repr(fresh) if isinstance(fresh, str) and value != fresh else None


def _moments(group: dict[str, Any]) -> set[str]:
    """The entries a parameter's state holds under the optimizer of ``group`` (a fresh one's, of those glassformer
    builds): Muon's momentum, else Adam's count and two moments (and the running maximum under amsgrad)."""
    if "momentum" in group:
        return {"momentum_buffer"}
    return {"step", "exp_avg", "exp_avg_sq"} | ({"max_exp_avg_sq"} if group.get("amsgrad") else set())


def check_optimizer_state(saved: Any, optimizer: Any, file: str, key: str = "optimizer") -> None:
    """Refuse a saved optimizer state (``saved``, from ``file``) not shaped exactly as ``optimizer``'s (a torch
    optimizer or glassformer's AdamW + Muon pair): the same parts and parameter groups, and per parameter
    only known entries, tensors with the parameter's shape and dtype, step counts in range."""
    parts = getattr(optimizer, "parts", None)
    if isinstance(parts, dict):  # glassformer's AdamW + Muon pair: a state per part
        if not isinstance(saved, dict) or set(saved) != set(parts):
            raise _bad(file, key, saved, f"a dict with the parts {sorted(parts)}")
        for name, part in parts.items():
            check_optimizer_state(saved[name], part, file, f"{key}.{name}")
        return
    if not isinstance(saved, dict) or set(saved) != {"state", "param_groups"}:
        raise _bad(file, key, saved, "a dict with 'state' and 'param_groups'")
    fresh = optimizer.state_dict()["param_groups"]
    groups = saved["param_groups"]
    if not isinstance(groups, list) or len(groups) != len(fresh):
        raise _bad(file, f"{key}.param_groups", groups, f"a list of {len(fresh)} parameter groups")
    params: dict[int, nn.Parameter] = {}
    needed: dict[int, set[str]] = {}  # per parameter index: the entries its state must hold
    for g, (group, mine, live) in enumerate(zip(groups, fresh, optimizer.param_groups, strict=True)):
        where = f"{key}.param_groups[{g}]"
        if not isinstance(group, dict) or group.get("params") != mine["params"]:
            raise BadFileError(f"{file}: {where} does not hold this model's parameters {mine['params'][:8]}"
                               f"{'...' if len(mine['params']) > 8 else ''} (a checkpoint of another model?)")
        for name, value in ((n, v) for n, v in mine.items() if n != "params"):
            if name not in group and not (isinstance(value, bool) or value is None):  # flags get torch's defaults
                raise BadFileError(f"{file}: {where} lacks {name!r} (this run's optimizer has {shown(value)})")
            expected = _hyper_expected(name, group[name], value) if name in group else None
            if expected is not None:
                raise _bad(file, f"{where}.{name}", group[name], expected)
        params.update(zip(mine["params"], live["params"], strict=True))
        needed.update(dict.fromkeys(mine["params"], _moments(mine)))
    state = saved["state"]
    if not isinstance(state, dict):
        raise _bad(file, f"{key}.state", state, "a dict")
    for index, entry in state.items():
        where = f"{key}.state[{shown(index)}]"
        if not is_int(index) or index not in params:
            raise BadFileError(f"{file}: {where} names no parameter of this model (0 to {len(params) - 1})")
        if not isinstance(entry, dict) or not entry or not set(entry) <= KNOWN_KEYS:
            raise _bad(file, where, entry, f"a dict of {sorted(KNOWN_KEYS)}")
        param = params[index]
        for name, value in entry.items():
            if name in MOMENTS:
                _tensor(file, f"{where}.{name}", value, tuple(param.shape), param.dtype)
            elif torch.is_tensor(value):
                _tensor(file, f"{where}.step", value, None, None)
                if value.numel() != 1 or value.is_complex() or value.dtype == torch.bool \
                        or not 0 <= float(value) <= MAX_STEP:
                    raise _bad(file, f"{where}.step", value, f"one number in [0, {MAX_STEP}]")
            elif not is_number(value) or not 0 <= value <= MAX_STEP:
                raise _bad(file, f"{where}.step", value, f"a number in [0, {MAX_STEP}]")
        wanted = needed[index]
        if set(entry) != wanted:  # torch reads each (a KeyError) and ignores no other
            missing, extra = sorted(wanted - set(entry)), sorted(set(entry) - wanted)
            problems = [f"lacks {missing}"] if missing else []
            problems += [f"holds {extra}, not kept by this optimizer"] if extra else []
            raise BadFileError(f"{file}: {where} " + "; ".join(problems))


MAX_KEPT = 1_000_000  # steps of a kept checkpoint series a train_state.pt may list


def check_train_state(state: dict[str, Any], file: str | Path, model: nn.Module, optimizer: Any,
                      state_format: int, scaler_enabled: bool = False) -> None:
    """Refuse (:class:`BadFileError` naming ``file`` and the key) a resume state that does not fit the run: a
    missing key, a wrong type, an optimizer state of another shape, a wrong RNG state, a bad scaler state."""
    file = str(file)
    if state.get("format") != state_format:
        raise BadFileError(f"{file} has format {shown(state.get('format'))}, expected {state_format}")
    needed = ("step", "best_val", "tokens_seen", "optimizer", "rng_cpu")
    missing = [k for k in needed if k not in state]
    if missing:
        raise BadFileError(f"{file} lacks {missing} (is it a glassformer train_state.pt?)")

    def count(low: int) -> tuple[Callable[[Any], bool], str]:  # a step or token count
        return lambda v: is_int(v) and low <= v <= MAX_STEP, f"an int in [{low}, {MAX_STEP}]"

    def kept(v: Any) -> bool:  # the steps of the kept checkpoints
        return isinstance(v, list) and len(v) <= MAX_KEPT and all(is_int(s) and 0 <= s <= state["step"] for s in v)

    def scaler(v: Any) -> bool:  # read only when this run scales its loss (float16)
        return not scaler_enabled or isinstance(v, dict) and all(
            is_number(x) and math.isfinite(x) and x >= 0 for x in v.values())

    rules = {  # key: (is its value right, what it must be); in this order: kept reads a checked step
        "step": count(0), "tokens_seen": count(0), "best_step": count(-1),
        "best_val": (lambda v: is_number(v) and not math.isnan(v), "a number (inf before the first evaluation)"),
        "kept": (kept, f"a list of at most {MAX_KEPT:,} steps from 0 to the state's step"),
        "precision": (lambda v: isinstance(v, str), "a string"),
        "scaler": (scaler, "a dict of finite non-negative numbers"),
    }
    for key, (right, expected) in rules.items():
        if key in state and not right(state[key]):
            raise _bad(file, key, state[key], expected)
    _tensor(file, "rng_cpu", state["rng_cpu"], tuple(torch.get_rng_state().shape), torch.uint8)
    if "rng_cuda" in state:
        expected = tuple(torch.cuda.get_rng_state().shape) if torch.cuda.is_available() else None
        _tensor(file, "rng_cuda", state["rng_cuda"], expected, torch.uint8)
        if state["rng_cuda"].dim() != 1:
            raise _bad(file, "rng_cuda", state["rng_cuda"], "a 1-D uint8 tensor")
    check_optimizer_state(state["optimizer"], optimizer, file)


RECORDED = ("objective", "tokenizer", "tokenizer_vocab_size")


def check_resume_matches(path: str | Path, model_config: Any, checkpoint_config: Any, tokenizer_kind: str,
                         recorded: dict[str, Any] | None, run: dict[str, Any]) -> None:
    """Refuse to resume from ``path`` when its model config (``checkpoint_config``), tokenizer kind or
    recorded objective/tokenizer (``recorded``: its ``training.json``, or None) differ from this ``run``'s."""
    path = str(path)
    if tokenizer_kind != run.get("tokenizer"):
        raise GlassformerError(f"cannot resume from {path!r}: its tokenizer is {tokenizer_kind!r}, this run asks "
                               f"for {shown(run.get('tokenizer'))}; resume with tokenizer {tokenizer_kind!r} or "
                               "start afresh")
    for key in RECORDED if recorded is not None else ():
        if key in recorded and recorded[key] != run.get(key):
            raise GlassformerError(f"cannot resume from {path!r}: it was trained with {key}={shown(recorded[key])}, "
                                   f"this run asks for {key}={shown(run.get(key))}; resume with the same "
                                   f"{key} or start afresh in another out_dir")
    if checkpoint_config != model_config:
        ours, theirs = vars(model_config), vars(checkpoint_config)
        diff = [f"{k}={shown(theirs.get(k))} in the checkpoint, {shown(ours.get(k))} in this run"
                for k in ours if ours.get(k) != theirs.get(k)]
        raise GlassformerError(f"cannot resume from {path!r}: its model config differs from this run's: "
                               f"{'; '.join(diff[:4]) or 'a field differs'}")
